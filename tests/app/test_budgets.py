"""Inputs that held a worker, against `visus serve`'s app (issue 23).

Six pasted progressive JPEGs of many scans held the server's thread pool for about 90 s:
a session list took 86.8 s. Now a JPEG past the scan limit is refused at once, and one
under it decodes in the render worker (stopped at its budget) while the caller waits on
media's own threads, never on the ones the rest of the server needs.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from tests import served
from tests.media.bombs import progressive_jpeg, scan_bomb_past_any_budget
from tests.timing import within
from visus import limits
from visus.app import create_main_app
from visus.media import _worker as worker_mod
from visus.providers import ProviderSettings


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, FastAPI]]:
    # The model is never reached: every turn ends on its pasted image.
    app = create_main_app(
        data=tmp_path / "data",
        model="reference",
        settings=ProviderSettings(reference_url="http://127.0.0.1:9", env={}),
        mcp=False,
    )
    async with app.router.lifespan_context(app), served.client(app, timeout=60) as c:
        yield c, app


async def _turn_ends(c: httpx.AsyncClient, iid: str, sessions: int) -> list[dict[str, Any]]:
    """The end frame of each of ``sessions`` turns."""
    ends: list[dict[str, Any]] = []
    after = 0
    deadline = time.monotonic() + within(60)
    while len(ends) < sessions:
        assert time.monotonic() < deadline, ends
        body = (
            await c.get(f"/v1/instances/{iid}/tether/poll", params={"after_seq": after, "wait": 2})
        ).json()
        after = body["next_seq"]
        ends += [f for f in body["frames"] if f["type"] in ("assistant.done", "error")]
    return ends


@pytest.mark.parametrize(
    ("scans", "refused_by"),
    [(600, "RASTER_MAX_JPEG_SCANS"), (None, "RENDER_TIME_BUDGET_SECONDS")],
    ids=["past the scan limit", "stopped in the worker"],
)
async def test_six_pasted_scan_bombs_leave_the_session_list_fast(
    client: tuple[httpx.AsyncClient, FastAPI],
    monkeypatch: pytest.MonkeyPatch,
    scans: int | None,
    refused_by: str,
) -> None:
    c, app = client
    monkeypatch.setattr(limits, "RENDER_TIME_BUDGET_SECONDS", 1.0)
    monkeypatch.setattr(limits, "RENDER_QUEUE_WAIT_SECONDS", 4.0)
    iid = app.state.default_instance
    # Under the limit: a bomb whose decode certainly outlasts the 1 s budget (99 scans
    # decoded inside it on a quiet machine).
    jpeg = (
        progressive_jpeg(10000, 10000, scans) if scans else scan_bomb_past_any_budget(monkeypatch)
    )
    bomb = base64.b64encode(jpeg).decode()
    image = {"media_type": "image/jpeg", "data": bomb}
    for i in range(6):
        frame = {"type": "user.message", "session": f"paste-{i}"}
        frame["payload"] = {"text": "what is this?", "images": [image]}  # type: ignore[assignment]
        sent = await c.post(f"/v1/instances/{iid}/tether", json=frame)
        assert sent.status_code == 202, sent.text
    if scans is None:  # a decode holds the worker (the others wait for it) by now
        busy = worker_mod._pool().busy
        deadline = time.monotonic() + within(30)
        while not busy["heavy"] and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
    start = time.monotonic()
    listed = await c.get("/web/api/sessions")
    assert listed.status_code == 200
    assert time.monotonic() - start < within(2.0)  # it took 86.8 s
    ends = await _turn_ends(c, iid, 6)
    messages = [e["payload"]["message"] for e in ends]
    assert all(e["type"] == "error" for e in ends), ends
    # Each image refused in words: the bound that stopped it, or the busy worker lane.
    assert any(refused_by in m for m in messages), messages
    assert all(refused_by in m or "try again" in m for m in messages), messages
