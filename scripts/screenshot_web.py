"""Take the README's screenshot: the real web chat answering a dropped image.

Starts the main app (tether, the agent, the web chat) on a loopback port with the
offline reference model and a throwaway data folder, opens the page in Debian's
Chromium through Playwright, drops ``docs/examples/sign.png`` into the chat, waits for
the answer and writes ``docs/web-chat.png``. Run it from the checkout after changing the
page:

    .venv/bin/python scripts/screenshot_web.py [OUT.png]

Needs the dev install (``bash scripts/setup.sh dev``: Playwright) and ``chromium``
(``bash scripts/setup-system.sh``); nothing is downloaded.
"""

from __future__ import annotations

import base64
import sys
import tempfile
import threading
import time
from pathlib import Path

import uvicorn
from playwright.sync_api import sync_playwright

from visus.app import create_main_app
from visus.providers import ProviderSettings
from visus.reference.server import serve_in_background

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
IMAGE = ROOT / "docs" / "examples" / "sign.png"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]

_DROP_JS = """
async ([b64, name]) => {
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const dt = new DataTransfer();
  dt.items.add(new File([bytes], name, { type: "image/png" }));
  const target = document.querySelector("#conversation");
  for (const kind of ["dragenter", "dragover", "drop"]) {
    const init = { dataTransfer: dt, bubbles: true, cancelable: true };
    target.dispatchEvent(new DragEvent(kind, init));
  }
}
"""


def _serve(data: Path, reference_url: str) -> tuple[uvicorn.Server, threading.Thread, str]:
    app = create_main_app(
        data=data,
        model="reference",
        settings=ProviderSettings(reference_url=reference_url, env={}),
    )
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=0,
            log_level="warning",
            ws="none",
            timeout_graceful_shutdown=2,
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise SystemExit("the web app did not start")
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    # The URL visus serve prints: the page trades the token for its cookie.
    return server, thread, f"http://127.0.0.1:{port}/?token={app.state.token}"


def shoot(out: Path) -> None:
    """Drop the sign into a new chat, ask, and screenshot the answered page to ``out``."""
    with tempfile.TemporaryDirectory() as tmp, serve_in_background() as reference_url:
        server, thread, url = _serve(Path(tmp) / "data", reference_url)
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
                page = browser.new_page(viewport={"width": 1200, "height": 720})
                page.goto(url)
                page.wait_for_selector("body[data-ready=true]")
                page.evaluate(_DROP_JS, [base64.b64encode(IMAGE.read_bytes()).decode(), IMAGE.name])
                page.wait_for_selector("#tray .tray-item.image")
                page.fill("#message", "What does the sign say?")
                page.press("#message", "Enter")
                page.wait_for_function(
                    "() => [...document.querySelectorAll('.msg.assistant:not(.streaming)')]"
                    ".some((m) => m.innerText.includes('LANTERN'))",
                    timeout=120_000,
                )
                page.evaluate("document.activeElement.blur()")  # no focus ring in the picture
                page.wait_for_timeout(300)  # the thumbnail and usage table settle
                page.screenshot(path=str(out))
                browser.close()
        finally:
            server.should_exit = True
            thread.join(timeout=15)


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "web-chat.png"
    shoot(target)
    print(f"wrote {target}")
