"""A slow query never stalls a replica: every database call of a turn (sessions, blobs,
attachments, instances) runs off the serving event loop, so while one instance's turn
waits on a row lock, another instance's stream on the same replica goes on.

The suite runs with ``pg_conn.ON_LOOP = "raise"`` (tests/pgcluster.py): a synchronous
query made on a serving loop fails the turn that makes it, so every replica test also
checks that no call site was forgotten.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.app.replicas import replica_apps
from tests.tether.doubles import live_server
from tests.timing import within

pytestmark = pytest.mark.slow


async def answered(http: httpx.AsyncClient, url: str, inst: str, msg_id: str) -> dict[str, Any]:
    """Long-poll until the frame ending the turn that answers ``msg_id``."""
    after = 0
    while True:
        page = (
            await http.get(
                f"{url}/v1/instances/{inst}/tether/poll", params={"after_seq": after, "wait": 5}
            )
        ).json()
        for f in page["frames"]:
            if f["type"] in ("assistant.done", "error") and f["reply_to"] == msg_id:
                return dict(f)
        after = page["next_seq"]


async def send(http: httpx.AsyncClient, url: str, inst: str, msg_id: str) -> None:
    body = {"type": "user.message", "session": "s", "msg_id": msg_id, "payload": {"text": "hi"}}
    r = await http.post(f"{url}/v1/instances/{inst}/tether", json=body)
    assert r.status_code == 202, r.text


async def test_a_slow_query_does_not_stall_another_instances_stream(
    pg_url: str, tmp_path: Path
) -> None:
    (app,), _ = replica_apps(pg_url, tmp_path, 1)
    with live_server(app) as url:
        async with httpx.AsyncClient(timeout=30) as http:
            slow, quick = [
                (await http.post(f"{url}/v1/instances", json={"model": "reference"})).json()["id"]
                for _ in range(2)
            ]
            await send(http, url, slow, "warm")  # the session's row exists from here
            assert (await answered(http, url, slow, "warm"))["type"] == "assistant.done"
            with psycopg.connect(pg_url) as locker:
                # Hold the slow instance's session row: its next turn's first write waits.
                locker.execute(
                    "SELECT 1 FROM visus_sessions WHERE namespace = %s AND id = 's' FOR UPDATE",
                    (f"instances/{slow}",),
                )
                await send(http, url, slow, "stuck")
                stuck = asyncio.create_task(answered(http, url, slow, "stuck"))
                await _waits_on_a_lock(pg_url)
                await send(http, url, quick, "free")
                done = await asyncio.wait_for(answered(http, url, quick, "free"), within(20))
                assert done["type"] == "assistant.done"
                assert not stuck.done()  # still held: the other answer came meanwhile
                locker.rollback()
            assert (await asyncio.wait_for(stuck, within(20)))["type"] == "assistant.done"


async def _waits_on_a_lock(pg_url: str) -> None:
    """Return once a query of the database waits for a lock (the stuck turn's write)."""
    deadline = time.monotonic() + within(20)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        while True:
            row = conn.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()
            if row and row[0]:
                return
            assert time.monotonic() < deadline, "the turn never waited on the held row"
            await asyncio.sleep(0.05)


async def test_a_replicas_budget_comes_from_the_store_settings(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``[store] pool_size`` and ``max_turns`` (here by environment) reach the replica:
    its pools and how many turns its worker runs at once."""
    from visus.app import create_main_app
    from visus.tether.shared import TurnWorker

    (tmp_path / "visus.toml").write_text("")
    monkeypatch.setenv("VISUS_CONFIG", str(tmp_path / "visus.toml"))
    monkeypatch.setenv("VISUS_STORE__POOL_SIZE", "2")
    monkeypatch.setenv("VISUS_STORE__MAX_TURNS", "3")
    app = create_main_app(data=tmp_path, store=pg_url, mcp=False, web=False)
    registry = app.state.registry
    try:
        assert registry.store.db.pool_size == 2
        assert TurnWorker(registry, registry.store).concurrency == 3
    finally:
        await registry.aclose()
        registry.store.close()
