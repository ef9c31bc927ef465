"""kill -9 of one ``visus serve`` replica (a real process) in the middle of a burst
and in the middle of turns, two others on the same PostgreSQL database: no committed
frame is lost, the turns it was running are finished by a survivor (one
``assistant.done`` each), the other replicas keep answering.

The replicas' model is the offline reference server behind a proxy that holds each
request for a moment, so that turns are surely in flight when the replica dies.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from PIL import Image
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.tether.doubles import live_server
from tests.timing import within
from visus.reference.server import serve_in_background

pytestmark = pytest.mark.slow

MODEL_DELAY = 1.0  # seconds each model call is held
LEASE = 2.0
TERMINAL = ("assistant.done", "error")


def slow_proxy(target: str) -> Starlette:
    """Forwards every request to ``target`` after MODEL_DELAY seconds."""

    async def forward(request: Request) -> Response:
        await asyncio.sleep(MODEL_DELAY)
        async with httpx.AsyncClient(timeout=60) as http:
            r = await http.request(
                request.method,
                target + request.url.path,
                params=request.query_params,
                content=await request.body(),
                headers={k: v for k, v in request.headers.items() if k.lower() != "host"},
            )
        drop = {"content-length", "transfer-encoding", "content-encoding", "connection"}
        headers = {k: v for k, v in r.headers.items() if k.lower() not in drop}
        return Response(r.content, r.status_code, headers=headers)

    return Starlette(routes=[Route("/{path:path}", forward, methods=["GET", "POST"])])


TOKEN = "replica-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def cluster(pg_url: str, tmp_path: Path) -> Iterator[list[tuple[str, subprocess.Popen[bytes]]]]:
    with serve_in_background() as reference, live_server(slow_proxy(reference)) as proxy:
        procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        (tmp_path / "visus.toml").write_text("")  # not the user's configuration
        for k in range(3):
            port = free_port()
            env = {
                **os.environ,
                "VISUS_DATA": str(tmp_path / f"r{k}"),
                "VISUS_STORE": pg_url,
                "VISUS_STORE__LEASE_SECONDS": str(LEASE),
                "VISUS_REFERENCE_URL": proxy,
                "VISUS_CONFIG": str(tmp_path / "visus.toml"),
                "VISUS_TOKEN": TOKEN,  # replicas share one token, as the README says
            }
            log = open(tmp_path / f"r{k}.log", "wb")  # noqa: SIM115
            cli = "from visus.cli import main; main()"
            cmd = [sys.executable, "-c", cli, "serve", "--port", str(port), "--no-mcp"]
            proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
            procs.append((f"http://127.0.0.1:{port}", proc))
        try:
            deadline = time.monotonic() + within(90)
            for url, proc in procs:
                while True:
                    try:
                        r = httpx.get(f"{url}/v1/instances", headers=AUTH, timeout=2)
                        if r.status_code == 200:
                            break
                    except httpx.HTTPError:
                        pass
                    assert proc.poll() is None, (tmp_path / "r0.log").read_text()[-3000:]
                    assert time.monotonic() < deadline, "replicas did not start"
                    time.sleep(0.2)
            yield procs
        finally:
            for _, proc in procs:
                if proc.poll() is None:
                    proc.terminate()
            for _, proc in procs:
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def png(i: int) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), (i * 5 % 256, 90, 200)).save(buf, "PNG")
    return base64.b64encode(buf.getvalue()).decode()


async def post(http: httpx.AsyncClient, url: str, inst: str, i: int) -> dict[str, Any]:
    body = {
        "type": "user.message",
        "session": f"s{i % 12}",
        "msg_id": f"m{i:03d}",
        "payload": {"text": f"m{i}", "images": [{"media_type": "image/png", "data": png(i)}]},
    }
    while True:
        r = await http.post(f"{url}/v1/instances/{inst}/tether", json=body)
        if r.status_code != 429:
            assert r.status_code == 202, r.text
            return dict(r.json())
        await asyncio.sleep(0.1)


async def poll_until(
    http: httpx.AsyncClient, url: str, inst: str, want: set[str], deadline: float
) -> list[dict[str, Any]]:
    frames: list[dict[str, Any]] = []
    after, answered = 0, set()
    while not want <= answered:
        assert time.monotonic() < deadline, f"unanswered: {sorted(want - answered)}"
        page = (
            await http.get(
                f"{url}/v1/instances/{inst}/tether/poll", params={"after_seq": after, "wait": 2}
            )
        ).json()
        assert page["gap"] is False
        frames += page["frames"]
        answered |= {f["reply_to"] for f in page["frames"] if f["type"] in TERMINAL}
        after = page["next_seq"]
    return frames


def running_owners(pg_url: str) -> dict[str, int]:
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(
            "SELECT owner, count(*) FROM visus_turns WHERE state = 'running' GROUP BY owner"
        ).fetchall()
    return {str(o): int(c) for o, c in rows}


async def test_kill_9_mid_burst_and_mid_turn_loses_nothing(
    cluster: list[tuple[str, subprocess.Popen[bytes]]], pg_url: str
) -> None:
    urls = [u for u, _ in cluster]
    async with httpx.AsyncClient(headers=AUTH, timeout=30) as http:
        inst = (await http.post(f"{urls[0]}/v1/instances", json={"model": "reference"})).json()[
            "id"
        ]
        acks: dict[str, tuple[int, dict[str, Any]]] = {}
        # The first half of the burst round-robin over all three replicas.
        for i in range(24):
            acks[f"m{i:03d}"] = (i % 3, await post(http, urls[i % 3], inst, i))
        # Pick a replica that is running turns right now and kill it.
        deadline = time.monotonic() + within(30)
        while True:
            owners = running_owners(pg_url)
            pids = {int(o.split(":")[1]): o for o in owners}
            victims = [k for k, (_, p) in enumerate(cluster) if p.pid in pids]
            if victims:
                break
            assert time.monotonic() < deadline, "no turn ever ran"
            await asyncio.sleep(0.02)
        victim = victims[0]
        seen_on_victim = (
            await http.get(
                f"{urls[victim]}/v1/instances/{inst}/tether/poll", params={"limit": 1000}
            )
        ).json()["frames"]
        os.kill(cluster[victim][1].pid, signal.SIGKILL)
        cluster[victim][1].wait(10)
        lost_owner = pids[cluster[victim][1].pid]
        with psycopg.connect(pg_url) as conn:  # the dead replica can change nothing now
            rows = conn.execute(
                "SELECT f.body FROM visus_frames f JOIN visus_turns t USING (instance_id, seq) "
                "WHERE t.state = 'running' AND t.owner = %s",
                (lost_owner,),
            ).fetchall()
        interrupted = {json.loads(bytes(r[0]))["msg_id"] for r in rows}
        assert interrupted, "the replica died between turns; nothing was interrupted"
        # The rest of the burst goes to the survivors (as a load balancer would).
        survivors = [u for k, u in enumerate(urls) if k != victim]
        for i in range(24, 48):
            acks[f"m{i:03d}"] = (-1, await post(http, survivors[i % 2], inst, i))
        want = set(acks)
        end = time.monotonic() + within(90)
        views = await asyncio.gather(*(poll_until(http, u, inst, want, end) for u in survivors))

    for frames in views:
        seqs = [f["seq"] for f in frames]
        assert seqs == list(range(1, len(seqs) + 1))  # gap-free, each once, in order
    frames = max(views, key=len)
    by_seq = {f["seq"]: f for f in frames}
    # Zero committed frames lost: all the dead replica served, and every acknowledged post.
    for f in seen_on_victim:
        assert by_seq[f["seq"]] == f
    for msg_id, (_, ack) in acks.items():
        assert by_seq[ack["seq"]]["msg_id"] == msg_id
    # Every message has exactly one ending, an answer: the turns the dead replica was
    # running were finished by a survivor from their last recorded step.
    for msg_id in acks:
        ends = [f for f in frames if f["type"] in TERMINAL and f.get("reply_to") == msg_id]
        assert [e["type"] for e in ends] == ["assistant.done"], (msg_id, ends)
        if msg_id in interrupted:  # one answer: every frame of it under one msg_id
            answer = {f["msg_id"] for f in frames if f.get("reply_to") == msg_id}
            assert len(answer) == 1, (msg_id, answer)
    for _, proc in (c for k, c in enumerate(cluster) if k != victim):
        assert proc.poll() is None  # the survivors are still up
