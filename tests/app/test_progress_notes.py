"""The notes a newer model writes between tool calls reach `visus serve`'s phase line:
an ``assistant.status`` frame over tether (what the web chat shows under "Working"), not
only the CLI's ``on_status``.

Against the reference server as ``claude-opus-5-5``, which returns such notes in thinking
blocks when the request asks for ``display: "updates"`` (visus asks for them)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from PIL import Image

from tests.app.test_cancel import frames_until
from tests.served import auth
from visus.app import create_main_app
from visus.providers import ProviderSettings
from visus.reference.server import serve_in_background


@pytest.fixture(scope="module")
def reference_url() -> Iterator[str]:
    with serve_in_background() as url:
        yield url


@pytest.fixture
async def client(
    tmp_path: Path, reference_url: str
) -> AsyncIterator[tuple[httpx.AsyncClient, FastAPI]]:
    files = tmp_path / "files"
    files.mkdir()
    Image.new("RGB", (64, 48), "red").save(files / "a.png")
    app = create_main_app(
        data=tmp_path / "data",
        model="anthropic:claude-opus-5-5",
        settings=ProviderSettings(
            api_keys={"anthropic": "k"}, base_urls={"anthropic": reference_url}, env={}
        ),
        roots=[files],
        web=False,
        mcp=False,
    )
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=transport, base_url="http://127.0.0.1", headers=auth(app), timeout=60
        ) as c,
    ):
        yield c, app


async def test_a_note_between_tool_calls_is_a_status_frame(
    client: tuple[httpx.AsyncClient, FastAPI],
) -> None:
    c, app = client
    iid = app.state.default_instance
    text = 'say Opening the red screen.\ncall view {"path": "a.png"}'
    sent = await c.post(
        f"/v1/instances/{iid}/tether", json={"type": "user.message", "payload": {"text": text}}
    )
    assert sent.status_code == 202, sent.text
    frames, _ = await frames_until(c, iid, 0, {"assistant.done", "error"})
    assert not [f for f in frames if f["type"] == "error"], frames
    said: list[Any] = [f["payload"]["text"] for f in frames if f["type"] == "assistant.status"]
    assert "Opening the red screen." in said, said
    # Said after the model was asked and before the view it announced ran.
    note = said.index("Opening the red screen.")
    assert said.index("waiting for claude-opus-5-5") < note, said
    assert any("a.png" in s for s in said[note + 1 :]), said
