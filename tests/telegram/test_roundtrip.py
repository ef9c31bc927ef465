"""End to end through the real agent and the offline reference model: a grid photo
sent in a chat is read word by word, and an image the agent sends comes back as a
photo."""

from __future__ import annotations

import html
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from PIL import Image

from tests.telegram.conftest import CHAT, bridge, until
from tests.telegram.fake_bot import FakeBotAPI, photo_update, text_update
from visus.app import create_main_app
from visus.providers import ProviderSettings
from visus.reference.grid import make_grid
from visus.reference.server import serve_in_background


@pytest.fixture(scope="module")
def reference_url() -> Iterator[str]:
    with serve_in_background() as url:
        yield url


def _main_app(tmp_path: Path, url: str) -> FastAPI:
    return create_main_app(
        data=tmp_path / "data",
        model="reference",
        settings=ProviderSettings(reference_url=url, env={}),
        web=False,
        mcp=False,
    )


async def test_grid_photo_is_read_by_the_reference_model(
    fake: FakeBotAPI, tmp_path: Path, reference_url: str
) -> None:
    png, expected = make_grid(2, 3, seed=11)
    with Image.open(io.BytesIO(png)) as im:
        buf = io.BytesIO()
        im.convert("RGB").save(buf, format="JPEG", quality=95)  # Telegram photos are JPEG
    photo = buf.getvalue()
    w, h = Image.open(io.BytesIO(photo)).size
    fake.add_file("grid-s", b"tiny")
    fake.add_file("grid", photo)
    app = _main_app(tmp_path, reference_url)
    async with bridge(fake, app, instance=app.state.default_instance) as b:
        fake.push(
            photo_update(
                CHAT,
                [("grid-s", 90, 60, 4), ("grid", w, h, len(photo))],
                caption="Which words are in this picture?",
            )
        )
        await until(lambda: b.gateway.finished(CHAT), timeout=120, what="the reply")
    assert [c.params["file_id"] for c in fake.sent("getFile")] == ["grid"]
    final = "\n".join(fake.chat_view(CHAT))
    for word, _row, _col, _colour in expected:
        assert word in final, (word, final[:500])
    # The words come from the model's perception of the image, not from our caption;
    # its ```json block arrives as a Telegram code block.
    raw = "\n".join(fake.chat_view(CHAT, raw=True))
    match = re.search(r'<pre><code class="language-json">(.*?)</code></pre>', raw, re.DOTALL)
    assert match, raw[-500:]
    block = html.unescape(match.group(1))
    seen = {w["text"] for w in json.loads(block)["images"][0]["words"]}
    assert {e[0] for e in expected} <= seen


async def test_image_sent_by_the_agent_arrives_as_a_photo(
    fake: FakeBotAPI, tmp_path: Path, reference_url: str
) -> None:
    chart = Image.new("RGB", (240, 160), (255, 255, 255))
    for x in range(0, 240, 40):
        chart.paste((x, 80, 200 - x // 2), (x, 40, x + 30, 160))
    buf = io.BytesIO()
    chart.save(buf, format="PNG")
    app = _main_app(tmp_path, reference_url)
    iid = app.state.default_instance
    files = app.state.policy.roots[0]  # the data folder's files folder, made at start
    (files / "chart.png").write_bytes(buf.getvalue())
    async with bridge(fake, app, instance=iid) as b:
        call = json.dumps({"path": str(files / "chart.png")})
        fake.push(text_update(CHAT, f"call send_image {call}"))
        await until(lambda: b.gateway.finished(CHAT), timeout=120, what="the reply")
    (sent,) = fake.sent("sendPhoto")
    data = next(iter(sent.files.values()))[1]
    with Image.open(io.BytesIO(data)) as got:
        assert got.size == chart.size
        assert got.convert("RGB").tobytes() == chart.tobytes()
    # Images first, then (or as its caption) the agent's text. A streamed preview sent
    # before the image is never deleted: it ends as a pointer to what follows.
    assert not fake.sent("deleteMessage")
    calls = fake.sent("sendPhoto", "sendMessage")
    photo_at = calls.index(sent)
    before = {str(c.result["message_id"]) for c in calls[:photo_at]}
    last_text = {e.params["message_id"]: e.params["text"] for e in fake.sent("editMessageText")}
    assert all(last_text.get(m, "").startswith("⬇ 1 image") for m in before)
    visible = [i for i, c in enumerate(calls) if c.method == "sendMessage" and i > photo_at]
    assert sent.params.get("caption") or visible
