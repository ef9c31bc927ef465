"""Stop (``turn.cancel``) on a shared store: the stop may reach any replica, while the
turn runs on another or still waits in the queue. Two real replicas on one throwaway
PostgreSQL cluster, real agents answering through the offline reference model."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.app.replicas import replica_apps
from tests.tether.doubles import live_server
from tests.timing import within
from visus.store.postgres import PostgresStore

pytestmark = pytest.mark.slow


@pytest.fixture
def replicas(pg_url: str, tmp_path: Path) -> Iterator[tuple[list[str], list[PostgresStore]]]:
    apps, stores = replica_apps(pg_url, tmp_path, 2)
    with live_server(apps[0]) as u0, live_server(apps[1]) as u1:
        yield [u0, u1], stores


def turn_row(pg_url: str, msg_id: str) -> tuple[str, str | None]:
    with psycopg.connect(pg_url) as conn:
        row = conn.execute(
            "SELECT state, owner FROM visus_turns WHERE msg_id = %s", (msg_id,)
        ).fetchone()
    assert row is not None, f"no turn for {msg_id}"
    return str(row[0]), row[1]


async def answers(
    http: httpx.AsyncClient, url: str, inst: str, want: set[str]
) -> dict[str, dict[str, Any]]:
    """The terminal frame answering each msg_id in ``want``, long-polled from ``url``."""
    after, out = 0, {}
    while not want <= set(out):
        page = (
            await http.get(
                f"{url}/v1/instances/{inst}/tether/poll", params={"after_seq": after, "wait": 5}
            )
        ).json()
        for f in page["frames"]:
            if f["type"] in ("assistant.done", "error"):
                out[f["reply_to"]] = f
        after = page["next_seq"]
    return out


async def test_a_stop_on_any_replica_ends_a_running_and_a_queued_turn(
    replicas: tuple[list[str], list[PostgresStore]], pg_url: str
) -> None:
    urls, stores = replicas
    async with httpx.AsyncClient(timeout=60) as http:
        inst = (await http.post(f"{urls[0]}/v1/instances", json={"model": "reference"})).json()[
            "id"
        ]

        async def send(url: str, msg_id: str, payload: dict[str, Any], kind: str) -> int:
            body = {"type": kind, "session": "s", "msg_id": msg_id, "payload": payload}
            r = await http.post(f"{url}/v1/instances/{inst}/tether", json=body)
            return r.status_code

        assert await send(urls[0], "slow", {"text": "wait 30"}, "user.message") == 202
        assert await send(urls[1], "next", {"text": "hello"}, "user.message") == 202
        deadline = time.monotonic() + within(10)
        while time.monotonic() < deadline:  # until a replica's worker claims the slow turn
            state, owner = turn_row(pg_url, "slow")
            if state == "running":
                break
            await asyncio.sleep(0.05)
        assert state == "running"
        assert owner is not None
        assert turn_row(pg_url, "next")[0] == "queued"  # behind "slow" in its session
        # Any replica lists both as open, oldest first (a reloaded web page shows them).
        assert await stores[1].open_turns(inst, "s") == ["slow", "next"]
        assert await stores[0].open_turns(inst, "other-session") == []
        # Each stop goes to the replica that does NOT run the slow turn.
        other = urls[1] if owner == "r0" else urls[0]
        started = time.monotonic()
        assert await send(other, "stop-next", {"target": "next"}, "turn.cancel") == 202
        assert await send(other, "stop-slow", {"target": "slow"}, "turn.cancel") == 202
        ends = await asyncio.wait_for(answers(http, urls[0], inst, {"slow", "next"}), within(20))
        # Not the 30 s the model was asked to take.
        assert time.monotonic() - started < min(within(10), 25)
        assert ends["slow"]["payload"]["code"] == "cancelled"
        assert ends["next"]["payload"]["code"] == "cancelled"
        assert await stores[0].open_turns(inst, "s") == []
        # A stop of a turn no longer in flight is a 404 and leaves no frame.
        assert await send(urls[0], "stop-again", {"target": "slow"}, "turn.cancel") == 404
        # The session goes on, on either replica.
        assert await send(urls[1], "after", {"text": "hello again"}, "user.message") == 202
        done = await asyncio.wait_for(answers(http, urls[1], inst, {"after"}), within(30))
        assert done["after"]["type"] == "assistant.done"
        page = (
            await http.get(f"{urls[1]}/v1/instances/{inst}/tether/poll", params={"limit": 1000})
        ).json()

    assert [f["msg_id"] for f in page["frames"] if f["type"] == "turn.cancel"] == [
        "stop-next",
        "stop-slow",
    ]
    # The stopped turn stays in the record (the model was called); the queued one never ran.
    loaded = stores[0].sessions(f"instances/{inst}").load("s")
    texts = [m.parts[0].text for m in loaded.messages if m.kind == "user"]  # type: ignore[union-attr]
    assert texts == ["wait 30", "hello again"]
    assert {turn_row(pg_url, m)[0] for m in ("slow", "next", "after")} == {"done"}
