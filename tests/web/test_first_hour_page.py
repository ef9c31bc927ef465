"""The web chat as a newcomer meets it (issue 36), in real Chromium against the real app
and the offline reference model: images refused or fitted when they are added, each bad
one named at once; what was dropped reachable by its name, its original kept so a
region reads the source's pixels; a reloaded page naming the step a turn is in; no usage
line above a running turn; the first turn counted while it runs; two files uploaded
together both named."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import pytest
from PIL import Image, ImageDraw, ImageFont

from tests.web.test_browser import (  # the same browser, app and helpers
    _PASTE_JS,
    ANSWER_TIMEOUT_MS,
    CHROMIUM,
    SHOTS,
    Served,
    _drop,
    _last_answer,
    _new_chat,
    browser,
    open_page,
    served,
)
from visus.attachments import AttachmentStore
from visus.reference.grid import make_grid

__all__ = ["browser", "open_page", "served"]  # fixtures, used by name

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium is not installed"),
]


def _png(width: int, height: int, mode: str = "L") -> bytes:
    Image.MAX_IMAGE_PIXELS = None  # drawing a bomb for the test, not decoding one
    buf = io.BytesIO()
    Image.new(mode, (width, height), 255).save(buf, "PNG")
    return buf.getvalue()


def _drop_many(page: Any, files: list[tuple[bytes, str, str]]) -> None:
    """One drop carrying several files, as a file manager's multi-selection does."""
    page.evaluate(
        """async (files) => {
             const dt = new DataTransfer();
             for (const [b64, name, type] of files) {
               const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
               dt.items.add(new File([bytes], name, { type }));
             }
             const target = document.querySelector("#conversation");
             for (const kind of ["dragenter", "dragover", "drop"]) {
               target.dispatchEvent(new DragEvent(kind,
                 { dataTransfer: dt, bubbles: true, cancelable: true }));
             }
           }""",
        [[base64.b64encode(d).decode(), n, t] for d, n, t in files],
    )


def test_images_the_model_cannot_take_are_refused_when_added_all_named(
    open_page: Any, served: Served
) -> None:
    page = open_page(served.url)
    _new_chat(page)
    posts: list[str] = []
    page.on("request", lambda r: posts.append(r.url) if r.method == "POST" else None)
    bomb = _png(20000, 20000)  # 400 megapixels in a few hundred KB
    good = make_grid(1, 1, seed=3)[0]
    _drop_many(
        page,
        [
            (bomb, "huge.png", "image/png"),
            (b"\x89PNG\r\n\x1a\n" + bytes(range(256)), "broken.png", "image/png"),
            (good, "fine.png", "image/png"),
        ],
    )
    page.wait_for_function(
        """() => { const t = document.querySelector('#notice-text').textContent;
                   return t.includes('huge.png') && t.includes('broken.png'); }""",
        timeout=ANSWER_TIMEOUT_MS,
    )
    notice = page.inner_text("#notice")
    assert '"huge.png" was not added: ' in notice
    assert "pixels" in notice  # why: the decode bound it is past
    assert '"broken.png" was not added: ' in notice
    assert "fine.png" not in notice
    names = page.locator("#tray .tray-item .name").all_inner_texts()
    assert names == ["fine.png"]
    page.wait_for_selector("#tray .tray-item:has-text('in message')")
    assert [p for p in posts if not p.endswith("/web/api/fit")] == []  # nothing sent
    page.screenshot(path=str(SHOTS / "20-refused-when-added.png"))
    assert page.errors == []


def test_a_dropped_image_is_reachable_by_its_name_afterwards(
    open_page: Any, served: Served
) -> None:
    page = open_page(served.url)
    sid = _new_chat(page)
    png, expected = make_grid(1, 2, seed=61)
    words = [w for w, *_ in expected]
    _drop(page, png, "sign.png", "image/png")
    page.fill("#message", "what is this?")
    page.press("#message", "Enter")
    _last_answer(page, words)
    page.fill("#message", "look at sign.png")
    page.press("#message", "Enter")
    page.wait_for_selector(".msg.tool:has-text('view_attachment')", timeout=ANSWER_TIMEOUT_MS)
    answers = page.locator(".msg.assistant:not(.streaming)")
    page.wait_for_function(
        "(n) => document.querySelectorAll('.msg.assistant:not(.streaming)').length >= n",
        arg=3,
        timeout=ANSWER_TIMEOUT_MS,
    )
    last = answers.all_inner_texts()[-1]
    assert all(w in last for w in words), last
    assert "not_found" not in page.inner_text("#conversation")
    stored = [a.name for a in AttachmentStore.for_session(served.instance_dir, sid).list()]
    assert stored == ["sign.png"]
    assert page.errors == []


def _screen_with_small_words() -> tuple[bytes, list[str]]:
    """A 3840 x 2160 screen, small words in its bottom-right corner."""
    from visus.media import font_path

    im = Image.new("RGB", (3840, 2160), "white")
    font = ImageFont.truetype(font_path("DejaVuSans.ttf"), 22)
    words = ["QUARTZ", "MEADOW"]
    ImageDraw.Draw(im).text((3400, 2000), " ".join(words), fill="black", font=font)
    buf = io.BytesIO()
    im.save(buf, "PNG")
    return buf.getvalue(), words


def test_a_pasted_4k_image_keeps_its_original_for_regions(open_page: Any, served: Served) -> None:
    page = open_page(served.url)
    sid = _new_chat(page)
    screen, words = _screen_with_small_words()
    page.evaluate(_PASTE_JS, [base64.b64encode(screen).decode(), "image.png", "image/png"])
    page.wait_for_selector("#tray .tray-item:has-text('fitted on the server')")
    page.press("#message", "Enter")
    _last_answer(page, ["The image ("])
    [kept] = AttachmentStore.for_session(served.instance_dir, sid).list()
    assert (kept.name, kept.size) == ("image.png", len(screen))  # the original bytes
    args = json.dumps({"filename": "image.png", "region": [3300, 1950, 3840, 2100]})
    page.fill("#message", f"call view_attachment {args}")
    page.press("#message", "Enter")
    result = page.wait_for_selector(
        ".msg.tool:has-text('view_attachment') .tool-result", timeout=ANSWER_TIMEOUT_MS
    )
    text = result.inner_text()
    # The source's own pixels, 1:1, not the 2576 px copy the message carried.
    assert "region=[3300,1950,3840,2100] of 3840x2160, sent 540x150 (1:1)" in text
    answer = _last_answer(page, words)
    assert all(w in answer for w in words)
    assert page.errors == []


def test_a_reload_mid_turn_names_the_step_and_no_usage_line_sits_above_it(
    open_page: Any, served: Served
) -> None:
    (served.files / "dot.png").write_bytes(make_grid(1, 1, seed=71)[0])
    page = open_page(served.url)
    _new_chat(page)
    steps = json.dumps([{"path": "dot.png", "region": [0, 0, 1 + i % 50, 1]} for i in range(150)])
    page.fill("#message", f"each view {steps}")
    page.press("#message", "Enter")
    # The first turn of a new chat counts while it runs (it said "0 turns").
    page.wait_for_selector("#session-list [aria-current=true]:has-text('1 turn')")
    page.wait_for_selector(".msg.assistant.streaming .tool-call")  # steps are recorded
    page.reload()
    page.wait_for_selector("body[data-ready=true]")
    page.wait_for_selector(".working .stop")
    shown = page.inner_text(".working .working-text")
    assert not shown.startswith("Working"), shown
    assert shown.startswith(("viewing dot.png", "waiting for reference")), shown
    # The record holds this turn's steps; its usage line waits for its answer.
    assert page.locator(".turn-usage").count() == 0
    order = page.evaluate(
        """() => [...document.querySelectorAll('#conversation > *')].map((e) => e.className)"""
    )
    assert order[-1].startswith("msg assistant streaming"), order
    page.click(".working .stop")
    page.wait_for_selector(".working", state="detached", timeout=ANSWER_TIMEOUT_MS)
    page.wait_for_selector(".turn-usage")
    assert page.errors == []


def test_files_uploaded_together_are_all_named(open_page: Any, served: Served) -> None:
    from tests.media.media_corpus import pdf_bytes

    page = open_page(served.url)
    _new_chat(page)
    _drop_many(
        page,
        [(pdf_bytes(2), "report.pdf", "application/pdf"), (b"a\nb\n", "notes.txt", "text/plain")],
    )
    page.wait_for_function(
        """() => { const t = document.querySelector('#notice-text').textContent;
                   return t.includes('report.pdf') && t.includes('notes.txt'); }""",
        timeout=ANSWER_TIMEOUT_MS,
    )
    text = page.inner_text("#notice")
    assert "are in this chat's attached files" in text, text
    assert page.errors == []


def test_a_turn_found_running_after_a_reload_has_no_usage_row(
    open_page: Any, served: Served
) -> None:
    """The usage table, like the conversation, shows a turn's usage when it ends: a page
    reloaded mid-turn showed a row of zeros for the running turn (seen from outside)."""
    page = open_page(served.url)
    _new_chat(page)
    page.fill("#message", "hello")
    page.press("#message", "Enter")
    page.wait_for_selector(".turn-usage")
    first = page.locator("#usage tbody tr").all_inner_texts()
    assert [r.split("\t")[0] for r in first] == ["1"], first
    page.fill("#message", "wait 60")
    page.press("#message", "Enter")
    page.wait_for_selector(".working .stop")
    page.reload()
    page.wait_for_selector("body[data-ready=true]")
    page.wait_for_selector(".working .stop")
    assert page.locator("#usage tbody tr").all_inner_texts() == first
    total = page.inner_text("#usage tfoot").split("\t")
    assert total[0] == "All", total
    assert total[1:] == first[0].split("\t")[1:], (total, first)
    page.click(".working .stop")
    page.wait_for_selector(".working", state="detached", timeout=ANSWER_TIMEOUT_MS)
    # The stopped turn's record comes back: its row with it.
    page.wait_for_function("document.querySelectorAll('#usage tbody tr').length === 2")
    assert page.errors == []


def test_the_note_naming_kept_files_is_not_shown_as_typed_text(
    open_page: Any, served: Served
) -> None:
    """The page tells the model which files it kept ("[attached to this session: ...]");
    the person sees what they typed and a quiet note, live and after a reload (every
    dropped image showed the bracketed line in its bubble, unlike docs/web-chat.png)."""
    page = open_page(served.url)
    _new_chat(page)
    png, expected = make_grid(1, 1, seed=83)
    _drop(page, png, "sign.png", "image/png")
    page.fill("#message", "what is this?")
    page.press("#message", "Enter")
    _last_answer(page, [w for w, *_ in expected])
    for when in ("live", "reloaded"):
        bubble = page.locator(".msg.user").last
        assert bubble.locator(".text").all_inner_texts() == ["what is this?"], when
        note = bubble.locator(".attached-note").inner_text()
        assert note.startswith("In this chat's attachments: sign.png ("), (when, note)
        assert "[attached to this session" not in page.inner_text("#conversation"), when
        page.reload()
        page.wait_for_selector("body[data-ready=true]")
        page.wait_for_selector(".msg.user .attached-note")
    assert page.errors == []


def test_a_new_chat_is_listed_by_its_first_message_while_it_runs(
    open_page: Any, served: Served
) -> None:
    """The server titles a chat by its first message's first line; the list said "New
    chat" until that first turn ended (a minute, on a large image and a loaded machine)."""
    page = open_page(served.url)
    _new_chat(page)
    page.fill("#message", "wait 60\nand then hello")
    page.press("#message", "Enter")
    page.wait_for_selector(".working .stop")
    current = page.locator("#session-list [aria-current=true] .title")
    assert current.inner_text() == "wait 60"
    page.click(".working .stop")
    page.wait_for_selector(".working", state="detached", timeout=ANSWER_TIMEOUT_MS)
    page.wait_for_selector("#session-list [aria-current=true]:has-text('wait 60')")
    assert page.errors == []
