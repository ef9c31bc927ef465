"""Three replicas of the tether server on one PostgreSQL database (a throwaway cluster
the tests start), each a real app with real agents answering through the offline
reference model: messages posted round-robin, answers read on other replicas."""

from __future__ import annotations

import asyncio
import base64
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from PIL import Image

from tests.app.replicas import replica_apps
from tests.tether.doubles import live_server
from visus.store.postgres import PostgresStore

pytestmark = pytest.mark.slow

TERMINAL = ("assistant.done", "error")


def png(i: int) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (24, 24), (i % 256, (i * 7) % 256, (i * 13) % 256)).save(buf, "PNG")
    return base64.b64encode(buf.getvalue()).decode()


@pytest.fixture
def replicas(pg_url: str, tmp_path: Path) -> Iterator[tuple[list[str], list[PostgresStore]]]:
    apps, stores = replica_apps(pg_url, tmp_path, 3)
    with live_server(apps[0]) as u0, live_server(apps[1]) as u1, live_server(apps[2]) as u2:
        yield [u0, u1, u2], stores


async def post(http: httpx.AsyncClient, url: str, inst: str, body: dict[str, Any]) -> Any:
    while True:
        r = await http.post(f"{url}/v1/instances/{inst}/tether", json=body)
        if r.status_code != 429:  # turns in flight on every replica count; wait for one
            assert r.status_code == 202, r.text
            return r.json()
        await asyncio.sleep(0.05)


async def read_all(
    http: httpx.AsyncClient, url: str, inst: str, want: set[str], out: list[dict[str, Any]]
) -> None:
    """Long-poll ``url`` until a terminal frame answered every msg_id in ``want``."""
    after, answered = 0, set()
    while not want <= answered:
        r = await http.get(
            f"{url}/v1/instances/{inst}/tether/poll", params={"after_seq": after, "wait": 5}
        )
        page = r.json()
        assert page["gap"] is False, "a reader fell behind the ring"
        for f in page["frames"]:
            out.append(f)
            if f["type"] in TERMINAL:
                answered.add(f["reply_to"])
        after = page["next_seq"]


async def sse_seqs(url: str, inst: str, last_event_id: int | None, stop: int) -> list[int]:
    """Seqs an SSE stream on ``url`` delivers (resuming after ``last_event_id``) up to ``stop``."""
    seqs: list[int] = []
    headers = {} if last_event_id is None else {"Last-Event-ID": str(last_event_id)}
    async with (
        httpx.AsyncClient(timeout=30) as http,
        http.stream("GET", f"{url}/v1/instances/{inst}/tether/stream", headers=headers) as r,
    ):
        async for line in r.aiter_lines():
            if line.startswith("id: "):
                seqs.append(int(line[4:]))
                if seqs[-1] >= stop:
                    break
    return seqs


async def test_three_replicas_90_messages_every_frame_once_and_in_order(
    replicas: tuple[list[str], list[PostgresStore]], pg_url: str
) -> None:
    urls, stores = replicas
    # 90 messages in 30 sessions of three turns: every property below shows at this size
    # (300 took a minute of the suite and asserted nothing more).
    n, sessions = 90, 30
    async with httpx.AsyncClient(timeout=60) as http:
        created = await http.post(f"{urls[0]}/v1/instances", json={"model": "reference"})
        inst = created.json()["id"]
        posted: list[tuple[int, dict[str, Any]]] = []
        want: set[str] = set()
        streams: list[list[dict[str, Any]]] = [[], [], []]
        msg_ids = [f"m{i:03d}" for i in range(n)]
        readers = [
            asyncio.create_task(read_all(http, u, inst, set(msg_ids), streams[k]))
            for k, u in enumerate(urls)
        ]

        # An SSE client on replica 1 for the first frames, then resuming on replica 2.
        async def resumed() -> tuple[list[int], list[int]]:
            head = await sse_seqs(urls[1], inst, None, 40)
            return head, await sse_seqs(urls[2], inst, head[-1], 80)

        sse = asyncio.create_task(resumed())
        for i in range(n):
            body = {
                "type": "user.message",
                "session": f"s{i % sessions}",
                "msg_id": msg_ids[i],
                "payload": {
                    "text": f"message {i}",
                    "images": [{"media_type": "image/png", "data": png(i)}],
                },
            }
            posted.append((i % 3, await post(http, urls[i % 3], inst, body)))
            want.add(msg_ids[i])
        await asyncio.wait_for(asyncio.gather(*readers), 240)
        head, tail = await sse

    assert head == list(range(1, 41))
    assert tail == list(range(41, 81))
    # Every reader saw every frame exactly once, seqs 1..last without a hole, same bytes.
    for frames in streams:
        seqs = [f["seq"] for f in frames]
        assert seqs == list(range(1, len(seqs) + 1))
    assert (
        streams[0] == streams[1][: len(streams[0])] or streams[1] == streams[0][: len(streams[1])]
    )
    frames = max(streams, key=len)
    # One answer per message, read on the replicas it was not posted to.
    for k, ack in posted:
        answers = [
            f for f in frames if f.get("reply_to") == ack["msg_id"] and f["type"] in TERMINAL
        ]
        assert [a["type"] for a in answers] == ["assistant.done"], answers
        other = streams[(k + 1) % 3]
        assert any(f.get("reply_to") == ack["msg_id"] for f in other)
    # A session's turns ran in the order they were posted, across replicas.
    for s in range(sessions):
        loaded = stores[0].sessions(f"instances/{inst}").load(f"s{s}")
        texts = [m.parts[0].text for m in loaded.messages if m.kind == "user"]  # type: ignore[union-attr]
        assert texts == [f"message {i}" for i in range(s, n, sessions)]
    with psycopg.connect(pg_url) as conn:
        owners = conn.execute(
            "SELECT owner, count(*) FROM visus_turns WHERE instance_id = %s GROUP BY owner",
            (inst,),
        ).fetchall()
        states = conn.execute(
            "SELECT DISTINCT state FROM visus_turns WHERE instance_id = %s", (inst,)
        ).fetchall()
    assert len(owners) >= 2, owners  # the turns were shared out, not all run on one replica
    assert sum(c for _, c in owners) == n
    assert states == [("done",)]
