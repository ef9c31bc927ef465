"""Stop over tether: a ``turn.cancel`` frame ends a turn in flight of `visus serve`'s
app (real agent, reference model), the record stays consistent and the next turn works."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from tests.served import auth
from tests.timing import within
from visus.app import create_main_app
from visus.providers import ProviderSettings
from visus.record.sessions import SessionStore
from visus.reference.server import serve_in_background


@pytest.fixture(scope="module")
def reference_url() -> object:
    with serve_in_background() as url:
        yield url


@pytest.fixture
async def client(
    tmp_path: Path, reference_url: str
) -> AsyncIterator[tuple[httpx.AsyncClient, FastAPI]]:
    app = create_main_app(
        data=tmp_path / "data",
        model="reference",
        settings=ProviderSettings(reference_url=reference_url, env={}),
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


async def frames_until(
    c: httpx.AsyncClient, iid: str, after: int, done: set[str]
) -> tuple[list[dict[str, Any]], int]:
    frames: list[dict[str, Any]] = []
    for _ in range(30):
        body = (
            await c.get(f"/v1/instances/{iid}/tether/poll", params={"after_seq": after, "wait": 2})
        ).json()
        frames += body["frames"]
        after = body["next_seq"]
        if any(f["type"] in done for f in frames):
            return frames, after
    raise AssertionError(f"no end of turn: {frames}")


async def test_stop_ends_the_turn_and_the_session_goes_on(
    client: tuple[httpx.AsyncClient, FastAPI],
) -> None:
    c, app = client
    iid = app.state.default_instance
    url = f"/v1/instances/{iid}/tether"
    sent = await c.post(url, json={"type": "user.message", "payload": {"text": "wait 30"}})
    assert sent.status_code == 202, sent.text
    target = sent.json()["msg_id"]
    # The agent has stored the message and waits on the model once it says so.
    frames, after = await frames_until(c, iid, 0, {"assistant.status"})
    started = time.monotonic()
    stop = await c.post(url, json={"type": "turn.cancel", "payload": {"target": target}})
    assert stop.status_code == 202, stop.text
    rest, after = await frames_until(c, iid, after, {"assistant.done", "error"})
    frames += rest
    # Not the 30 s the model was asked to take (a quiet machine stops in under 1 s).
    assert time.monotonic() - started < min(within(10), 25)
    # The turn said what it was doing ("waiting for reference") before it was stopped.
    status = [f for f in frames if f["type"] == "assistant.status"]
    assert [f["payload"]["text"] for f in status] == ["waiting for reference"]
    frames = [f for f in frames if f["type"] != "assistant.status"]
    assert [f["type"] for f in frames] == ["user.message", "turn.cancel", "error"]
    assert frames[1]["payload"] == {"target": target}
    assert frames[2]["payload"]["code"] == "cancelled"
    assert frames[2]["reply_to"] == target

    # The stored record loads and holds the message, answered.
    sessions = SessionStore(Path(app.state.registry.get(iid).config.data_dir) / "sessions")
    loaded = sessions.load("default")
    assert loaded.problems == ()
    assert [m.kind for m in loaded.messages] == ["user", "assistant"]

    sent = await c.post(url, json={"type": "user.message", "payload": {"text": "hello"}})
    frames, _ = await frames_until(c, iid, after, {"assistant.done", "error"})
    assert frames[-1]["type"] == "assistant.done", frames
    assert "I see no images" in frames[-1]["payload"]["text"]


async def test_stopping_no_turn_in_flight_is_404(
    client: tuple[httpx.AsyncClient, FastAPI],
) -> None:
    c, app = client
    url = f"/v1/instances/{app.state.default_instance}/tether"
    r = await c.post(url, json={"type": "turn.cancel", "payload": {"target": "nothing"}})
    assert r.status_code == 404
    assert "no turn in flight" in r.json()["error"]["message"]
    r = await c.post(url, json={"type": "turn.cancel", "payload": {}})
    assert r.status_code == 400
    assert "payload.target" in r.text
