"""The web chat in real Chromium (Debian's, driven by Playwright) against the real main
app: tether, the agent and the offline reference model, which OCRs every image it
receives and answers with the words it read.

Screenshots of the main states go to ``test-artifacts/web/``.
"""

from __future__ import annotations

import base64
import io
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from PIL import Image

from tests.hostile import Recorder
from tests.timing import within
from visus import limits
from visus.app import create_main_app
from visus.attachments import AttachmentStore
from visus.providers import ProviderSettings
from visus.reference.grid import make_grid

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "web"
# An answer's end: generous, it only says the turn finished.
ANSWER_TIMEOUT_MS = 90_000

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="Debian chromium is not installed (run: bash scripts/setup-system.sh)",
    ),
]

sync_api = pytest.importorskip("playwright.sync_api")


class Served:
    """The main app under uvicorn in a thread on a free loopback port."""

    def __init__(
        self,
        data: Path,
        reference_url: str,
        *,
        token: str | None = None,
        make_token: bool = False,
        port: int = 0,
    ) -> None:
        self.data = data
        # Token-less (the explicit loopback opt-out) unless a test is about the token.
        self.app = create_main_app(
            data=data,
            model="reference",
            settings=ProviderSettings(reference_url=reference_url, env={}),
            token=token,
            no_token=token is None and not make_token,
        )
        config = uvicorn.Config(
            self.app,
            host="127.0.0.1",
            port=port,
            log_level="warning",
            ws="none",
            lifespan="on",
            # An open SSE stream would otherwise hold a graceful shutdown open.
            timeout_graceful_shutdown=2,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + within(20)
        while not self.server.started:
            assert self.thread.is_alive(), "the web app did not start"
            assert time.monotonic() < deadline, "the web app did not start in time"
            time.sleep(0.02)
        self.port = int(self.server.servers[0].sockets[0].getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"

    @property
    def files(self) -> Path:
        """The served files folder (the operator's first root): where the agent reads."""
        return Path(self.app.state.policy.roots[0])

    @property
    def instance_dir(self) -> Path:
        iid = self.app.state.default_instance
        return Path(self.app.state.registry.get(iid).config.data_dir)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)
        assert not self.thread.is_alive()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, reference_url: str) -> Iterator[Served]:
    s = Served(tmp_path_factory.mktemp("web") / "data", reference_url)
    yield s
    s.stop()


@pytest.fixture
def open_page(browser: Any) -> Iterator[Any]:
    """Open the chat in a fresh browser context; every context closes after the test,
    so no SSE stream holds a server's shutdown open."""
    contexts: list[Any] = []

    def _open(url: str, *, ready: bool = True, **options: Any) -> Any:
        context = browser.new_context(**options)
        contexts.append(context)
        # Every wait of the page (30 s by default) allows for a loaded machine.
        context.set_default_timeout(within(30) * 1000)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.errors = errors
        # Console errors include CSP violations and failed loads (a missing asset).
        console: list[str] = []
        page.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
        page.console_errors = console
        page.goto(url)
        if ready:
            page.wait_for_selector("body[data-ready=true]")
        return page

    yield _open
    for context in contexts:
        context.close()


def ms(seconds: float) -> float:
    """A page wait of ``seconds`` on a quiet machine, in Playwright's milliseconds,
    allowing for a loaded one."""
    return within(seconds) * 1000


def _new_chat(page: Any) -> str:
    if not page.is_visible("#new-chat"):  # a phone: the sessions are in a drawer
        page.click("#toggle-nav")
    page.click("#new-chat")
    page.wait_for_function("location.hash.startsWith('#s=web-')")
    page.wait_for_selector(".conversation .empty")
    return str(page.evaluate("location.hash.slice(3)"))


_DROP_JS = """
async ([b64, size, name, type, selector]) => {
  const bytes = b64 !== null
    ? Uint8Array.from(atob(b64), (c) => c.charCodeAt(0))
    : new Uint8Array(size);
  const file = new File([bytes], name, { type });
  const dt = new DataTransfer();
  dt.items.add(file);
  const target = document.querySelector(selector);
  for (const kind of ["dragenter", "dragover", "drop"]) {
    const init = { dataTransfer: dt, bubbles: true, cancelable: true };
    target.dispatchEvent(new DragEvent(kind, init));
  }
}
"""

_PASTE_JS = """
async ([b64, name, type]) => {
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const dt = new DataTransfer();
  dt.items.add(new File([bytes], name, { type }));
  const box = document.querySelector("#message");
  box.focus();
  const init = { clipboardData: dt, bubbles: true, cancelable: true };
  box.dispatchEvent(new ClipboardEvent("paste", init));
}
"""


def _drop(page: Any, data: bytes | None, name: str, mime: str, *, size: int = 0) -> None:
    b64 = None if data is None else base64.b64encode(data).decode()
    page.evaluate(_DROP_JS, [b64, size, name, mime, "#conversation"])


def _last_answer(page: Any, words: list[str]) -> str:
    """Wait until one assistant message holds every word; return its text."""
    page.wait_for_function(
        """(words) => [...document.querySelectorAll('.msg.assistant:not(.streaming)')]
             .some((m) => words.every((w) => m.innerText.includes(w)))""",
        arg=words,
        timeout=ANSWER_TIMEOUT_MS,
    )
    texts = page.locator(".msg.assistant:not(.streaming)").all_inner_texts()
    return next(t for t in reversed(texts) if all(w in t for w in words))


def _answers(page: Any, words: list[str]) -> int:
    return int(
        page.evaluate(
            """(words) => [...document.querySelectorAll('.msg.assistant:not(.streaming)')]
                 .filter((m) => words.every((w) => m.innerText.includes(w))).length""",
            words,
        )
    )


def test_drop_a_grid_ask_reload_and_restart(
    open_page: Any, tmp_path: Path, reference_url: str
) -> None:
    first = Served(tmp_path / "data", reference_url)
    try:
        page = open_page(first.url, viewport={"width": 1280, "height": 860})
        png, expected = make_grid(2, 2, seed=11)
        words = [w for w, *_ in expected]
        _drop(page, png, "grid.png", "image/png")
        assert page.locator("#tray .tray-item.image").count() == 1
        assert page.locator("#tray img").get_attribute("alt") == "grid.png"
        page.fill("#message", "Which words are in this grid?")
        page.screenshot(path=str(SHOTS / "01-dropped-image.png"))
        page.press("#message", "Enter")
        answer = _last_answer(page, words)
        for word in words:
            assert word in answer
        assert page.locator("#tray .tray-item").count() == 0
        assert page.input_value("#message") == ""
        # The user's image is shown from the blob store; the side panel knows it.
        page.wait_for_selector(".msg.user .thumb img[src^='blob:']")
        page.wait_for_selector("#image-list .image-item.live")
        assert page.locator("#usage tbody tr").count() == 1
        assert page.inner_text("#model-name") == "reference"
        page.screenshot(path=str(SHOTS / "02-answer.png"))

        # Openable full size: a modal dialog with the image, closed by Escape.
        page.click(".msg.user .thumb")
        page.wait_for_selector("#lightbox[open]")
        width = page.evaluate("document.querySelector('#lightbox-img').naturalWidth")
        assert width == Image.open(io.BytesIO(png)).width  # the full image, not a thumbnail
        page.screenshot(path=str(SHOTS / "03-lightbox.png"))
        page.keyboard.press("Escape")
        page.wait_for_selector("#lightbox:not([open])", state="attached")

        sid = page.evaluate("location.hash.slice(3)")
        page.reload()
        page.wait_for_selector("body[data-ready=true]")
        assert _last_answer(page, words)
        assert (
            page.locator("#session-list [aria-current=true]")
            .inner_text()
            .startswith("Which words are in this grid?")
        )
        assert page.errors == []
        assert page.console_errors == []
    finally:
        first.stop()  # the page stays open: its stream breaks and reconnects

    second = Served(tmp_path / "data", reference_url, port=first.port)
    try:
        # The open page finds the restarted server and goes on with the same session.
        page.wait_for_selector("body[data-stream=live]", timeout=ms(15))
        page.fill("#message", "And after the restart?")
        page.press("#message", "Enter")
        page.wait_for_function(
            """(words) => [...document.querySelectorAll('.msg.assistant:not(.streaming)')]
                 .filter((m) => words.every((w) => m.innerText.includes(w))).length === 2""",
            arg=words,
            timeout=ANSWER_TIMEOUT_MS,
        )
        assert page.locator("#usage tbody tr").count() == 2
        # A fresh visit lists the session and opens it from the list.
        fresh = open_page(second.url, viewport={"width": 1280, "height": 860})
        fresh.click(f"#session-list button[data-sid='{sid}']")
        assert _last_answer(fresh, words)
        assert _answers(fresh, words) == 2
        assert fresh.evaluate("location.hash") == f"#s={sid}"
        fresh.screenshot(path=str(SHOTS / "04-after-restart.png"))
        assert page.errors == []
        assert fresh.errors == []
        page.context.close()
        fresh.context.close()
    finally:
        second.stop()


def test_the_printed_url_signs_in_and_no_other_port_receives_the_token(
    open_page: Any, tmp_path: Path, reference_url: str
) -> None:
    """Issue 33, item 7: the page traded ``?token=`` for a cookie named for the port and
    holding the token; Chromium sent that cookie to every other server on 127.0.0.1,
    and replayed as a bearer token it worked. Now no cookie holds it: the page keeps it
    in its origin's own storage and sends it as a header, which nothing else gets."""
    served = Served(tmp_path / "data", reference_url, make_token=True)  # as visus serve
    token = served.app.state.token
    other_app = Recorder()
    try:
        page = open_page(f"{served.url}/?token={token}")
        assert "token" not in page.url  # gone from the address bar (and history)
        page.fill("#message", "hello")
        page.press("#message", "Enter")
        assert "I see no images" in _last_answer(page, ["I see no images"])
        page.reload()  # same browser: still in
        page.wait_for_selector("body[data-ready=true]")
        # The same browser visits another program on another port of this host.
        elsewhere = page.context.new_page()
        elsewhere.goto(other_app.url)
        assert other_app.seen, "the browser did not reach the other app"
        assert not any(token in " ".join(h.values()) for h in other_app.seen), other_app.seen
        assert token not in elsewhere.evaluate(
            "document.cookie + JSON.stringify(localStorage) + JSON.stringify(sessionStorage)"
        )
        assert page.context.cookies() == []  # no cookie at all
        # Another browser without the token is asked for it, and nothing is shown before.
        other = open_page(served.url, ready=False)
        other.wait_for_selector("#token-dialog[open]")
        assert other.locator("#session-list li").count() == 0
        other.fill("#token-input", token)
        other.press("#token-input", "Enter")
        other.wait_for_selector("body[data-ready=true]")
        assert other.locator("#session-list li").count() == 1
        # A wrong token in the address is dropped from it and said so.
        third = open_page(f"{served.url}/?token=wrong", ready=False)
        third.wait_for_selector("#token-dialog[open]")
        assert "token" not in third.url
        assert not third.is_hidden("#token-error")
        page.context.close()
        other.context.close()
        third.context.close()
    finally:
        other_app.__exit__()
        served.stop()


def test_paste_an_image_from_the_clipboard(open_page: Any, served: Served) -> None:
    page = open_page(served.url)
    _new_chat(page)
    png, expected = make_grid(1, 2, seed=21)
    page.evaluate(_PASTE_JS, [base64.b64encode(png).decode(), "image.png", "image/png"])
    page.wait_for_selector("#tray .tray-item.image")
    # Watch for the answer streaming in (deltas) before the final render replaces it.
    page.evaluate(
        """() => new MutationObserver(() => {
             const s = document.querySelector('.msg.assistant.streaming');
             if (s && s.innerText.includes('The image (')) window.sawStream = true;
           }).observe(document.body, { subtree: true, childList: true, characterData: true })"""
    )
    page.press("#message", "Enter")  # an image alone is a message
    answer = _last_answer(page, [w for w, *_ in expected])
    assert "The image (" in answer
    assert page.evaluate("window.sawStream === true")
    assert page.locator(".msg.assistant.streaming").count() == 0
    assert page.errors == []
    assert page.console_errors == []


@pytest.mark.parametrize("failure_first", [False, True], ids=["post-first", "failure-first"])
def test_a_turn_refused_for_its_image_gives_the_message_back(
    open_page: Any, served: Served, failure_first: bool
) -> None:
    page = open_page(served.url)
    _new_chat(page)
    if failure_first:
        # The turn fails at once; the stream says so before the POST's own answer.
        def slow_answer(route: Any) -> None:
            if route.request.method != "POST":
                route.continue_()
                return
            response = route.fetch()
            time.sleep(1.5)
            route.fulfill(response=response)

        page.route("**/tether", slow_answer)
    broken = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4  # a PNG in name only
    # The page checks every image as it is added (it would refuse this one then); here
    # the check passes and the model's side refuses it, as a provider may.
    page.route(
        "**/web/api/fit",
        lambda route: route.fulfill(status=200, content_type="image/png", body=broken),
    )
    page.fill("#message", "what is in this chart?")
    page.evaluate(_PASTE_JS, [base64.b64encode(broken).decode(), "chart.png", "image/png"])
    page.wait_for_selector("#tray .tray-item.image")
    page.press("#message", "Enter")
    page.wait_for_function(
        "() => document.querySelector('#notice-text').textContent.includes('back in the box')",
        timeout=ANSWER_TIMEOUT_MS,
    )
    # The reason, as a sentence the next one can follow.
    assert "image 1 cannot be used: not a raster image" in page.inner_text("#notice")
    assert "decode. Your message is back in the box" in page.inner_text("#notice")
    assert page.input_value("#message") == "what is in this chart?"
    assert page.locator("#tray .tray-item.image .name").inner_text() == "chart.png"
    assert page.evaluate("document.body.dataset.busy") == ""  # Send works again
    assert page.errors == []


def test_file_picker_attachment_is_grepped(open_page: Any, served: Served) -> None:
    page = open_page(served.url)
    sid = _new_chat(page)
    notes = b"first line\nthe zorblat is here\nlast line\n"
    page.set_input_files(
        "#file-input", files=[{"name": "notes.md", "mimeType": "text/markdown", "buffer": notes}]
    )
    # Stored at once (not held in the tray until Send): listed in the panel already.
    page.wait_for_selector("#attachment-list li:has-text('notes.md')")
    assert page.locator("#tray .tray-item").count() == 0
    page.fill("#message", 'call grep_attachment {"pattern": "zorblat"}')
    page.press("#message", "Enter")
    result = page.wait_for_selector(".msg.tool .tool-result", timeout=ANSWER_TIMEOUT_MS)
    assert "notes.md:2: the zorblat is here" in result.inner_text()
    assert "grep_attachment" in page.inner_text(".msg.tool .tool-name")
    # Stored with the browser's own MIME type, and listed in the side panel.
    [info] = AttachmentStore.for_session(served.instance_dir, sid).list()
    assert (info.name, info.mime_type, info.size) == ("notes.md", "text/markdown", len(notes))
    page.wait_for_selector("#attachment-list li:has-text('notes.md')")
    # The message told the agent about the file.
    assert "notes.md (text/markdown" in page.locator(".msg.user").first.inner_text()
    page.screenshot(path=str(SHOTS / "05-grep-attachment.png"))
    assert page.errors == []
    assert page.console_errors == []


def test_limits_are_checked_in_the_page_and_nothing_is_sent(open_page: Any, served: Served) -> None:
    page = open_page(served.url)
    _new_chat(page)
    posts: list[str] = []
    page.on("request", lambda r: posts.append(r.url) if r.method == "POST" else None)

    over = limits.WEB_FIT_MAX_BYTES + 1  # larger ones are fitted on the server
    _drop(page, None, "huge.png", "image/png", size=over)
    notice = page.locator("#notice")
    assert notice.is_visible()
    # Said in the user's words (no internal constant names), and dismissible.
    assert "the page takes images up to 67,108,864 bytes (64.0 MB)." in notice.inner_text()
    assert "_MAX_" not in notice.inner_text()
    assert page.locator("#tray .tray-item").count() == 0
    page.screenshot(path=str(SHOTS / "06-limit-message.png"))
    page.click("#send")  # nothing to send: the page says so
    assert "Write a message" in notice.inner_text()

    big = limits.ATTACHMENT_MAX_FILE_BYTES + 1
    _drop(page, None, "big.log", "text/plain", size=big)
    assert "an attached file may be at most" in notice.inner_text()
    assert "_MAX_" not in notice.inner_text()
    assert page.locator("#tray .tray-item").count() == 0
    page.click("#notice-dismiss")
    assert not notice.is_visible()
    assert page.evaluate("document.activeElement.id") == "message"

    png = make_grid(1, 1, seed=5)[0]
    for i in range(limits.TETHER_MAX_IMAGES_PER_MESSAGE + 1):
        _drop(page, png, f"g{i}.png", "image/png")
    assert page.locator("#tray .tray-item.image").count() == limits.TETHER_MAX_IMAGES_PER_MESSAGE
    assert f"at most {limits.TETHER_MAX_IMAGES_PER_MESSAGE} images" in notice.inner_text()
    assert "_MAX_" not in notice.inner_text()
    # Removable before sending, with the keyboard.
    page.focus("#tray .remove >> nth=0")
    page.keyboard.press("Enter")
    assert (
        page.locator("#tray .tray-item.image").count() == limits.TETHER_MAX_IMAGES_PER_MESSAGE - 1
    )
    assert page.evaluate("document.activeElement.classList.contains('remove')")
    page.wait_for_timeout(300)
    # Each image was checked (fitted) on the server as it was added; nothing was sent.
    assert [p for p in posts if not p.endswith("/web/api/fit")] == []
    assert page.errors == []
    assert page.console_errors == []


def test_images_the_agent_sends_are_shown_and_openable(open_page: Any, served: Served) -> None:
    files = served.files
    png = make_grid(1, 2, seed=31)[0]
    (files / "out.png").write_bytes(png)
    page = open_page(served.url)
    _new_chat(page)
    args = json.dumps({"path": str(files / "out.png")})
    page.fill("#message", f"call send_image {args}")
    page.press("#message", "Enter")
    sent = page.wait_for_selector(".msg.sent .thumb img[src^='blob:']", timeout=ANSWER_TIMEOUT_MS)
    assert sent.evaluate("img => img.naturalWidth") > 0
    page.click(".msg.sent .thumb")
    page.wait_for_selector("#lightbox[open]")
    assert page.evaluate("document.querySelector('#lightbox-img').naturalWidth") > 0
    page.keyboard.press("Escape")
    # The opener gets the focus back.
    assert page.evaluate("document.activeElement.classList.contains('thumb')")
    assert page.errors == []
    assert page.console_errors == []


def test_keyboard_and_phone_sized_screen(open_page: Any, served: Served) -> None:
    page = open_page(
        served.url, viewport={"width": 390, "height": 844}, is_mobile=True, color_scheme="dark"
    )
    # The first Tab reaches the skip link, which jumps to the message box.
    hash_before = page.evaluate("location.hash")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.className") == "skip-link"
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "message"
    assert page.evaluate("location.hash") == hash_before  # the session stays in the URL
    _new_chat(page)
    posts: list[str] = []
    page.on("request", lambda r: posts.append(r.url) if r.method == "POST" else None)
    # The side panels are drawers on a phone: hidden until asked for.
    assert not page.is_visible("#details")
    assert not page.is_visible("#nav")
    page.focus("#toggle-details")
    page.keyboard.press("Enter")
    assert page.is_visible("#details")
    assert page.get_attribute("#toggle-details", "aria-expanded") == "true"
    page.screenshot(path=str(SHOTS / "07-phone-details.png"))
    page.keyboard.press("Escape")
    assert not page.is_visible("#details")
    assert page.evaluate("document.activeElement.id") == "toggle-details"
    # Shift+Enter is a new line, not a send.
    page.focus("#message")
    page.keyboard.type("line one")
    page.keyboard.press("Shift+Enter")
    page.keyboard.type("line two")
    assert page.input_value("#message") == "line one\nline two"
    assert posts == []
    # Tab from the message box reaches the send button; every control is labelled.
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "send"
    for selector in ("#attach", "#toggle-nav", "#toggle-details", "#new-chat"):
        name = page.locator(selector).get_attribute("aria-label") or page.inner_text(selector)
        assert name.strip(), selector
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390  # nothing forces sideways scrolling
    page.screenshot(path=str(SHOTS / "08-phone.png"))
    assert page.errors == []
    assert page.console_errors == []


def test_side_panel_shows_live_and_elided_images(open_page: Any, served: Served) -> None:
    files = served.files
    for i in (1, 2):
        (files / f"seen{i}.png").write_bytes(make_grid(1, 1, seed=40 + i)[0])
    page = open_page(served.url, viewport={"width": 1280, "height": 860})
    _new_chat(page)
    for i in (1, 2):
        args = json.dumps({"path": str(files / f"seen{i}.png")})
        page.fill("#message", f"call view {args}")
        page.press("#message", "Enter")
        page.wait_for_function(
            "(n) => document.querySelectorAll('#usage tbody tr').length === n",
            arg=i,
            timeout=ANSWER_TIMEOUT_MS,
        )
    # The default policy keeps pixels for the current turn only: turn 1's view is elided.
    page.wait_for_selector("#image-list .image-item.elided")
    items = page.locator("#image-list .image-item").all_inner_texts()
    assert len(items) == 2
    assert "elided" in items[0]
    assert "turn 1" in items[0]
    assert "live" in items[1]
    assert "turn 2" in items[1]
    # The viewed images also appear in the conversation, inside the tool results.
    assert page.locator(".msg.tool .thumb").count() == 2
    assert page.locator(".msg.tool figure.elided .thumb").count() == 1
    assert page.locator("#usage tfoot tr").count() == 1
    page.screenshot(path=str(SHOTS / "09-live-and-elided.png"))
    assert page.errors == []
    assert page.console_errors == []


def test_sending_while_the_server_is_down_says_so(
    open_page: Any, tmp_path: Path, reference_url: str
) -> None:
    served = Served(tmp_path / "data", reference_url)
    page = open_page(served.url)
    served.stop()
    page.wait_for_selector("body[data-stream=reconnecting]", timeout=ms(15))
    page.fill("#message", "are you there?")
    page.press("#message", "Enter")
    page.wait_for_selector("#notice:not([hidden])")
    shown = page.inner_text("#notice")
    # Not the browser's bare "Failed to fetch": what happened and what to do.
    assert "Could not reach the visus server" in shown
    assert "Failed to fetch" not in shown
    assert page.input_value("#message") == "are you there?"  # nothing lost
    page.screenshot(path=str(SHOTS / "09-server-down.png"))
    assert page.errors == []


def test_an_image_that_loads_last_keeps_the_end_in_view(open_page: Any, served: Served) -> None:
    files = served.files
    (files / "tall.png").write_bytes(make_grid(3, 1, seed=41)[0])
    page = open_page(served.url, viewport={"width": 1280, "height": 700})
    _new_chat(page)
    for text in ["one", "two", "three"]:  # enough to make the conversation scroll
        page.fill("#message", text)
        page.press("#message", "Enter")
        page.wait_for_function(
            "(n) => document.querySelectorAll('.turn-usage').length === n",
            arg=["one", "two", "three"].index(text) + 1,
            timeout=ANSWER_TIMEOUT_MS,
        )
    args = json.dumps({"path": "tall.png"})
    page.fill("#message", f"call send_image {args}")
    page.press("#message", "Enter")
    page.wait_for_function(
        """() => [...document.querySelectorAll('.msg.sent .thumb img')]
             .some((img) => img.complete && img.naturalHeight > 0)""",
        timeout=ANSWER_TIMEOUT_MS,
    )
    page.wait_for_timeout(300)
    top, height, total = page.evaluate(
        """() => { const c = document.querySelector('#conversation');
                   return [c.scrollTop, c.clientHeight, c.scrollHeight]; }"""
    )
    assert total > height  # it does scroll
    assert top + height >= total - 2, (top, height, total)  # and the image is not cut off
    page.screenshot(path=str(SHOTS / "10-sent-image-in-view.png"))
    assert page.errors == []


def test_a_refused_token_is_said_so(open_page: Any, tmp_path: Path, reference_url: str) -> None:
    served = Served(tmp_path / "data", reference_url, token="right-token")
    try:
        page = open_page(served.url, ready=False)
        page.wait_for_selector("#token-dialog[open]")
        assert page.is_hidden("#token-error")  # nothing was refused yet
        page.fill("#token-input", "wrong-token")
        page.press("#token-input", "Enter")
        page.wait_for_selector("#token-error:not([hidden])")
        assert page.evaluate("document.querySelector('#token-dialog').open")
        assert "refused" in page.inner_text("#token-error")
        page.screenshot(path=str(SHOTS / "11-token-refused.png"))
        page.fill("#token-input", "right-token")
        page.press("#token-input", "Enter")
        page.wait_for_selector("body[data-ready=true]")
        assert not page.evaluate("document.querySelector('#token-dialog').open")
        assert page.inner_text("#model-badge") == "reference"
        assert page.errors == []
    finally:
        served.stop()


def test_an_answer_that_beats_its_post_response_is_not_left_waiting(
    open_page: Any, served: Served
) -> None:
    page = open_page(served.url)
    _new_chat(page)

    def slow_answer(route: Any) -> None:
        if route.request.method != "POST":
            route.continue_()
            return
        response = route.fetch()  # the turn starts now; its frames stream meanwhile
        time.sleep(1.5)  # the POST's own answer arrives after the turn's end
        route.fulfill(response=response)

    page.route("**/tether", slow_answer)
    page.fill("#message", "a fast turn")
    page.press("#message", "Enter")
    page.wait_for_function(
        """() => [...document.querySelectorAll('.msg.assistant')]
             .some((m) => m.innerText.includes('I see no images'))""",
        timeout=ANSWER_TIMEOUT_MS,
    )
    # The "…" bubble of that turn goes (it used to wait forever for a done it had missed).
    page.wait_for_selector(".msg.streaming", state="detached", timeout=ms(5))
    assert page.locator(".msg.user").count() == 1
    assert page.errors == []


AXE = Path(__file__).resolve().parents[1] / "node" / "node_modules" / "axe-core" / "axe.min.js"


def _axe_violations(page: Any) -> list[str]:
    if not page.evaluate("typeof window.axe === 'object'"):
        # Evaluated through the DevTools protocol: the page's CSP (script-src 'self')
        # rightly refuses an injected <script>, and is left as it is.
        page.evaluate(AXE.read_text(encoding="utf-8") + "\n;undefined")
    found = page.evaluate(
        """async () => (await axe.run(document)).violations
             .filter((v) => v.impact === 'serious' || v.impact === 'critical')
             .map((v) => `${v.id} (${v.impact}): ${v.nodes.map((n) => n.target).join(' ')}`)"""
    )
    return [str(v) for v in found]


@pytest.mark.skipif(not AXE.exists(), reason="axe-core missing (run: bash scripts/setup-node.sh)")
def test_axe_finds_no_serious_or_critical_violations(open_page: Any, served: Served) -> None:
    page = open_page(served.url)
    _new_chat(page)
    assert _axe_violations(page) == []  # the empty chat
    _drop(page, make_grid(1, 1, seed=7)[0], "g.png", "image/png")
    _drop(page, None, "huge.png", "image/png", size=limits.WEB_FIT_MAX_BYTES + 1)
    page.fill("#message", "wait 2")
    page.press("#message", "Enter")
    page.wait_for_selector(".working .stop")
    assert _axe_violations(page) == []  # tray, notice, a turn in flight with Stop
    _last_answer(page, ["The image ("])
    assert _axe_violations(page) == []  # an answer with an image
    # Every button has a name a screen reader can say (icon buttons included).
    unnamed = page.evaluate(
        """[...document.querySelectorAll('button')]
             .filter((b) => !(b.getAttribute('aria-label') || b.innerText.trim()))
             .map((b) => b.outerHTML.slice(0, 80))"""
    )
    assert unnamed == []


def test_a_turn_in_flight_shows_elapsed_time_and_stop_really_stops_it(
    open_page: Any, served: Served
) -> None:
    page = open_page(served.url)
    sid = _new_chat(page)
    page.fill("#message", "wait 30")
    page.press("#message", "Enter")
    # The empty-state text is gone at once; the turn shows it is working, and for how long.
    page.wait_for_selector(".working")
    assert page.locator(".conversation .empty").count() == 0
    assert page.is_disabled("#send")
    page.wait_for_function(
        "() => / · [1-9]\\d* s$/.test(document.querySelector('.working-text').textContent)",
        timeout=ms(5),
    )
    page.screenshot(path=str(SHOTS / "10-working-with-stop.png"))
    started = time.monotonic()
    page.click(".working .stop")
    page.wait_for_selector(".working", state="detached", timeout=ms(10))
    # Not the 30 s the model was asked to take (a quiet machine stops in under a second).
    assert time.monotonic() - started < min(within(10), 25)
    assert "Stopped" in page.locator("#notice").inner_text()
    # A stop the person asked for is news, not an error: a status in the text colour.
    assert page.get_attribute("#notice", "role") == "status"
    assert page.evaluate(
        "getComputedStyle(document.querySelector('#notice')).color"
        " === getComputedStyle(document.body).color"
    )
    assert page.is_enabled("#send")
    # The stored record is consistent: a reload shows the message, answered as stopped.
    page.reload()
    page.wait_for_selector("body[data-ready=true]")
    assert page.evaluate("location.hash.slice(3)") == sid
    texts = page.locator(".conversation .msg").all_inner_texts()
    assert any("wait 30" in t for t in texts[:1]), texts
    assert "(stopped by the user)" in texts[-1]
    # And the session goes on.
    page.fill("#message", "hello again")
    page.press("#message", "Enter")
    assert "I see no images" in _last_answer(page, ["I see no images"])
    assert page.errors == []


def test_an_image_the_agent_sends_shows_once_live_and_after_reload(
    open_page: Any, served: Served
) -> None:
    files = served.files
    (files / "once.png").write_bytes(make_grid(1, 1, seed=41)[0])
    page = open_page(served.url)
    _new_chat(page)
    page.fill("#message", "call send_image " + json.dumps({"path": str(files / "once.png")}))
    page.press("#message", "Enter")
    page.wait_for_selector(".msg.sent .thumb img[src^='blob:']", timeout=ANSWER_TIMEOUT_MS)
    page.wait_for_selector(".working", state="detached", timeout=ANSWER_TIMEOUT_MS)
    live = page.locator(".conversation .thumb").count()
    page.reload()
    page.wait_for_selector("body[data-ready=true]")
    page.wait_for_selector(".msg.sent .thumb img[src^='blob:']")
    assert live == page.locator(".conversation .thumb").count() == 1


def test_the_newest_message_stays_in_view_on_load_and_resize(
    open_page: Any, served: Served
) -> None:
    page = open_page(served.url, viewport={"width": 1100, "height": 900})
    _new_chat(page)
    for i in range(4):
        page.fill("#message", f"message {i}\n" + "line\n" * 12)
        page.press("#message", "Enter")
        page.wait_for_selector(".working", state="detached", timeout=ANSWER_TIMEOUT_MS)
    at_end = """() => { const b = document.querySelector('#conversation');
                        return b.scrollHeight > b.clientHeight
                          && b.scrollTop + b.clientHeight >= b.scrollHeight - 8; }"""
    page.reload()
    page.wait_for_selector("body[data-ready=true]")
    page.wait_for_function(at_end, timeout=ms(5))
    page.set_viewport_size({"width": 700, "height": 420})
    page.wait_for_function(at_end, timeout=ms(5))


def test_a_dropped_file_shows_in_attachments_at_once_with_upload_progress(
    open_page: Any, served: Served
) -> None:
    page = open_page(served.url)
    sid = _new_chat(page)
    size = limits.ATTACHMENT_MAX_FILE_BYTES - 1024  # near the limit: the upload takes a while
    # In the panel at once, with a progress bar: checked in the same task as the drop,
    # before the page starts encoding 25 MB (which keeps its main thread busy a while).
    shown = page.evaluate(
        "async (args) => { await (" + _DROP_JS + ")(args); const bar = document"
        ".querySelector('#attachment-list li.uploading progress');"
        " return bar && bar.getAttribute('aria-label'); }",
        [None, size, "big.log", "text/plain", "#conversation"],
    )
    assert shown == "Uploading big.log"
    page.wait_for_selector("#attachment-list li.uploading", state="detached", timeout=ms(30))
    page.wait_for_selector("#attachment-list li:has-text('big.log')")
    [info] = AttachmentStore.for_session(served.instance_dir, sid).list()
    assert (info.name, info.size) == ("big.log", size)
    assert page.errors == []


def test_a_page_reloaded_mid_turn_shows_it_working_and_can_stop_it(
    open_page: Any, served: Served
) -> None:
    page = open_page(served.url)
    _new_chat(page)
    page.fill("#message", "wait 30")
    page.press("#message", "Enter")
    page.wait_for_selector(".working .stop")
    page.reload()
    page.wait_for_selector("body[data-ready=true]")
    # The turn still runs on the server: the reloaded page says so, under its message.
    page.wait_for_selector(".working .stop")
    texts = page.locator(".conversation .msg").all_inner_texts()
    assert len(texts) == 2, texts
    assert "wait 30" in texts[0]
    assert page.is_disabled("#send")
    started = time.monotonic()
    page.click(".working .stop")
    page.wait_for_selector(".working", state="detached", timeout=ms(10))
    assert time.monotonic() - started < min(within(10), 25)
    assert "Stopped" in page.locator("#notice").inner_text()
    assert page.is_enabled("#send")
    assert "(stopped by the user)" in page.locator(".conversation .msg").all_inner_texts()[-1]
    # A turn that ended is not shown working after another reload.
    page.reload()
    page.wait_for_selector("body[data-ready=true]")
    assert page.locator(".working").count() == 0
    assert page.is_enabled("#send")
    assert page.errors == []
    assert page.console_errors == []


def test_send_during_an_upload_goes_when_the_file_is_stored(open_page: Any, served: Served) -> None:
    page = open_page(served.url)
    sid = _new_chat(page)
    held: list[Any] = []  # the upload's request, held until the message is typed and sent
    page.route("**/attachments", lambda route: held.append(route))
    page.fill("#message", "what did I attach?")
    page.evaluate(
        "async (args) => { await (" + _DROP_JS + ")(args); }",
        [base64.b64encode(b"late\n").decode(), 0, "late.log", "text/plain", "#conversation"],
    )
    page.wait_for_selector("#attachment-list li.uploading")
    page.press("#message", "Enter")
    page.wait_for_selector("#notice:not([hidden])")
    assert "Sending when the files have uploaded" in page.inner_text("#notice")
    page.wait_for_function("() => true")  # let the held request reach the route handler
    assert page.locator(".msg.user").count() == 0  # not sent yet: it would not name the file
    while not held:
        page.wait_for_timeout(20)
    held[0].continue_()
    user = page.wait_for_selector(".msg.user", timeout=ANSWER_TIMEOUT_MS)
    assert "what did I attach?" in user.inner_text()
    assert "late.log (text/plain, 5 bytes)" in user.inner_text()
    page.wait_for_selector(".working", state="detached", timeout=ANSWER_TIMEOUT_MS)
    [info] = AttachmentStore.for_session(served.instance_dir, sid).list()
    assert info.name == "late.log"
    assert page.errors == []
    assert page.console_errors == []


def test_a_failed_upload_keeps_the_message_it_was_to_go_with(
    open_page: Any, served: Served
) -> None:
    page = open_page(served.url)
    _new_chat(page)
    held: list[Any] = []
    page.route("**/attachments", lambda route: held.append(route))
    page.fill("#message", "read this")
    page.evaluate(
        "async (args) => { await (" + _DROP_JS + ")(args); }",
        [base64.b64encode(b"x").decode(), 0, "lost.log", "text/plain", "#conversation"],
    )
    page.wait_for_selector("#attachment-list li.uploading")
    page.press("#message", "Enter")
    while not held:
        page.wait_for_timeout(20)
    full = '{"error": {"message": "The disk is full."}}'
    held[0].fulfill(status=507, content_type="application/json", body=full)
    page.wait_for_selector("#attachment-list li.uploading", state="detached")
    page.wait_for_function(
        "() => document.querySelector('#notice-text').textContent.includes('not sent')"
    )
    assert "The disk is full. Your message was not sent" in page.inner_text("#notice")
    assert page.locator(".msg.user").count() == 0
    assert page.input_value("#message") == "read this"  # kept, to send again


def test_an_answer_cut_off_at_the_output_limit_is_said_so(open_page: Any, tmp_path: Path) -> None:
    from visus.reference.server import serve_in_background

    with serve_in_background(max_output_tokens=3) as cut_url:
        served = Served(tmp_path / "data", cut_url)
        try:
            page = open_page(served.url)
            page.fill("#message", "hello")
            page.press("#message", "Enter")
            page.wait_for_selector("#notice:not([hidden])", timeout=ms(30))
            assert "cut off at the model's output limit" in page.inner_text("#notice")
            assert page.errors == []
        finally:
            served.stop()


# --- the first hour (issue 27) ------------------------------------------------------------


def test_the_page_says_what_the_reference_model_is_and_how_to_switch(
    open_page: Any, served: Served
) -> None:
    page = open_page(served.url)
    if not page.is_visible("#model-note"):  # a phone: the details are in a drawer
        page.click("#toggle-details")
    note = page.inner_text("#model-note")
    assert "offline reference model" in note
    assert "OPENAI_API_KEY" in note
    assert "--model" in note
    href = page.get_attribute("#model-note a", "href")
    about = page.context.request.get(served.url + str(href))
    assert about.status == 200
    assert "Switching to a real model" in about.text()
    assert page.errors == []


def test_a_dropped_file_says_where_it_went_and_a_too_big_one_where_to_put_it(
    open_page: Any, served: Served
) -> None:
    from tests.media.media_corpus import pdf_bytes

    page = open_page(served.url)
    _new_chat(page)
    _drop(page, pdf_bytes(2), "report.pdf", "application/pdf")
    page.wait_for_function(
        "() => document.querySelector('#notice-text').textContent.includes('report.pdf is in')"
    )
    text = page.inner_text("#notice")
    assert "attached files" in text
    assert page.get_attribute("#notice", "role") == "status"
    files = str(served.files)
    too_big = limits.WEB_FIT_MAX_BYTES + 1
    _drop(page, None, "huge.png", "image/png", size=too_big)
    page.wait_for_function(
        "() => document.querySelector('#notice-text').textContent.includes('huge.png')"
    )
    text = page.inner_text("#notice")
    assert f"Put it in the files folder ({files})" in text
    _drop(page, None, "dump.log", "text/plain", size=limits.ATTACHMENT_MAX_FILE_BYTES + 1)
    page.wait_for_function(
        "() => document.querySelector('#notice-text').textContent.includes('dump.log')"
    )
    assert f"Put it in the files folder ({files})" in page.inner_text("#notice")
    assert page.errors == []


def test_an_image_over_the_message_bound_is_fitted_on_the_server_and_answered(
    open_page: Any, served: Served
) -> None:
    import os

    side = 1900  # random pixels: a PNG just over TETHER_MAX_IMAGE_BYTES
    buf = io.BytesIO()
    Image.frombytes("RGB", (side, side), os.urandom(side * side * 3)).save(
        buf, "PNG", compress_level=1
    )
    big = buf.getvalue()
    assert len(big) > limits.TETHER_MAX_IMAGE_BYTES
    page = open_page(served.url)
    _new_chat(page)
    _drop(page, big, "noise.png", "image/png")
    item = page.wait_for_selector("#tray .tray-item.image:has-text('fitted on the server')")
    assert "noise.png" in item.inner_text()
    page.fill("#message", "what is this?")
    page.press("#message", "Enter")
    answer = _last_answer(page, ["The image ("])
    assert "colours" in answer
    assert page.errors == []


def test_a_chat_is_renamed_and_deleted_from_the_session_list(
    open_page: Any, served: Served
) -> None:
    page = open_page(served.url)
    first = _new_chat(page)
    page.fill("#message", "first chat")
    page.press("#message", "Enter")
    _last_answer(page, ["I see no images"])
    second = _new_chat(page)
    page.fill("#message", "second chat")
    page.press("#message", "Enter")
    _last_answer(page, ["I see no images"])
    row = page.locator(f"#session-list li:has(button[data-sid='{first}'])")
    row.locator("button.rename").click()
    page.wait_for_selector("#rename-dialog[open]")
    page.fill("#rename-input", "Holiday receipts")
    page.click("#rename-form button[type=submit]")
    page.wait_for_selector(f"button[data-sid='{first}'] .title:has-text('Holiday receipts')")
    # Deleting the open chat moves to the most recent one left.
    page.locator(f"#session-list li:has(button[data-sid='{second}'])").locator(
        "button.delete"
    ).click()
    page.wait_for_selector("#delete-dialog[open]")
    page.click("#delete-confirm")
    page.wait_for_selector(f"button[data-sid='{second}']", state="detached")
    page.wait_for_function(f"location.hash === '#s={first}'")
    page.wait_for_function(
        "() => document.querySelector('#notice-text').textContent.includes('deleted')"
    )
    listed = page.context.request.get(served.url + "/web/api/sessions").json()["sessions"]
    assert [s["id"] for s in listed if s["id"] in (first, second)] == [first]
    assert page.errors == []


_WATCH_PHASES_JS = """() => {
  window.phases = [];
  window.toolLines = [];
  new MutationObserver(() => {
    const bubble = document.querySelector('.msg.assistant.streaming');
    if (!bubble) return;
    const text = bubble.querySelector('.working-text');
    const phase = text ? text.textContent.replace(/ · \\d+ s$/, '') : '';
    if (phase && window.phases[window.phases.length - 1] !== phase) window.phases.push(phase);
    for (const line of bubble.querySelectorAll('.tool-call')) {
      if (!window.toolLines.includes(line.textContent)) window.toolLines.push(line.textContent);
    }
  }).observe(document.body, { subtree: true, childList: true, characterData: true });
}"""


def test_the_bubble_names_each_phase_and_shows_a_tool_call_as_it_starts(
    open_page: Any, served: Served
) -> None:
    from tests.media.media_corpus import pdf_bytes

    files = served.files
    (files / "report.pdf").write_bytes(pdf_bytes(3))
    page = open_page(served.url)
    _new_chat(page)
    page.evaluate(_WATCH_PHASES_JS)
    page.fill("#message", "wait 2\nwhat's on page 2 of report.pdf?")
    page.press("#message", "Enter")
    _last_answer(page, ["report.pdf page 2"])
    phases = page.evaluate("window.phases")
    assert "waiting for reference" in phases, phases
    assert "viewing report.pdf page 2" in phases, phases
    # The call was on screen while the turn ran, before the record showed it.
    assert page.evaluate("window.toolLines") == ['→ view {"path":"report.pdf","page":2}']
    assert page.errors == []


def test_a_reload_keeps_the_turns_true_elapsed_time(open_page: Any, served: Served) -> None:
    page = open_page(served.url)
    _new_chat(page)
    page.fill("#message", "wait 60")
    page.press("#message", "Enter")
    page.wait_for_function(
        # The bubble may not be there yet on a loaded machine: no text until it is. Three
        # seconds or more (a slow page may first look at 10).
        "() => / · ([3-9]|\\d\\d+) s$/"
        ".test(document.querySelector('.working-text')?.textContent ?? '')",
        timeout=ms(15),
    )
    page.reload()
    page.wait_for_selector("body[data-ready=true]")
    page.wait_for_selector(".working .working-text")
    shown = page.inner_text(".working .working-text")
    seconds = int(shown.rsplit(" · ", 1)[1].split()[0])
    assert seconds >= 3, shown  # not counted again from the reload
    page.click(".working .stop")
    page.wait_for_selector(".working", state="detached", timeout=ms(10))
