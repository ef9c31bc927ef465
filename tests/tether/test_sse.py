from __future__ import annotations

import json
import signal
import socket
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from tests.timing import within
from visus.tether.client import TetherClient
from visus.tether.frames import AssistantDelta
from visus.tether.server import create_app, tether_server

from .doubles import Factory, live_server


def read_events(
    url: str, headers: dict[str, str], until_type: str, count: int = 1
) -> list[tuple[int | None, str, str]]:
    """Read SSE events (id, event, data) until ``count`` events of ``until_type``."""
    events: list[tuple[int | None, str, str]] = []
    seen = 0
    with httpx.stream("GET", url, headers=headers, timeout=10) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        ev: dict[str, str] = {}
        for line in resp.iter_lines():
            if line == "":
                if "data" in ev:
                    eid = int(ev["id"]) if "id" in ev else None
                    events.append((eid, ev.get("event", ""), ev["data"]))
                    if ev.get("event") == until_type:
                        seen += 1
                        if seen == count:
                            return events
                ev = {}
                continue
            if line.startswith(":"):
                continue
            key, _, value = line.partition(":")
            ev[key] = value.lstrip()
    raise AssertionError(f"stream ended early: {events}")


def test_sse_streams_frames_and_resumes_with_last_event_id(tmp_path: Path) -> None:
    app = create_app(data_dir=tmp_path, runner_factory=Factory(delay=0.01))
    with live_server(app) as base:
        iid = httpx.post(f"{base}/v1/instances", json={"model": "m"}).json()["id"]
        url = f"{base}/v1/instances/{iid}/tether/stream"
        httpx.post(
            f"{base}/v1/instances/{iid}/tether",
            json={"type": "user.message", "payload": {"text": "one two three"}},
        )
        first = read_events(url, {}, "assistant.done")
        kinds = [e[1] for e in first]
        # Words 10 ms apart: joined into one delta or more, as the window falls.
        assert kinds[0] == "user.message"
        assert kinds[-1] == "assistant.done"
        assert set(kinds[1:-1]) == {"assistant.delta"}
        said = "".join(json.loads(e[2])["payload"]["text"] for e in first[1:-1])
        assert said == "one two three "
        last = len(first)
        assert [e[0] for e in first] == list(range(1, last + 1))
        # The client drops after the first event and comes back with Last-Event-ID.
        resumed = read_events(url, {"Last-Event-ID": "1"}, "assistant.done")
        assert resumed == first[1:]
        # Frames that arrive while connected are pushed, not only the backlog.
        httpx.post(
            f"{base}/v1/instances/{iid}/tether",
            json={"type": "user.message", "payload": {"text": "four"}},
        )
        more = read_events(url, {"Last-Event-ID": str(last)}, "assistant.done")
        assert [e[0] for e in more] == [last + 1, last + 2, last + 3]
        assert '"text":"echo: four"' in more[-1][2]
        bad = httpx.get(url, headers={"Last-Event-ID": "abc"})
        assert bad.status_code == 400
        assert bad.json()["error"]["field"] == "Last-Event-ID"


async def test_client_stream_yields_frames(tmp_path: Path) -> None:
    app = create_app(data_dir=tmp_path, runner_factory=Factory())
    with live_server(app) as base:
        async with TetherClient(base) as tc:
            iid = (await tc.create_instance("m"))["id"]
            await tc.send(iid, "hi there")
            got = []
            async for frame in tc.stream(iid, last_event_id=1):
                got.append(frame)
                if frame.type == "assistant.done":
                    break
            assert [f.seq for f in got] == [2, 3]  # "hi there " in one delta, then done
            assert got[-1].payload.text == "echo: hi there"  # type: ignore[union-attr]


def test_exit_ends_open_streams_so_shutdown_does_not_hang(tmp_path: Path) -> None:
    app = create_app(data_dir=tmp_path, runner_factory=Factory())
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = tether_server(app, log_level="warning")
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    iid = httpx.post(f"{base}/v1/instances", json={"model": "m"}).json()["id"]
    lines: list[str] = []

    def reader() -> None:
        with httpx.stream("GET", f"{base}/v1/instances/{iid}/tether/stream", timeout=None) as r:
            lines.extend(r.iter_lines())  # returns only when the server ends the stream

    client = threading.Thread(target=reader, daemon=True)
    client.start()
    while not lines:
        time.sleep(0.01)
    t0 = time.monotonic()
    # Ctrl-C (a SIGTERM drains first: tests/tether/test_ops.py)
    server.handle_exit(signal.SIGINT, None)
    thread.join(within(5))
    client.join(within(5))
    sock.close()
    assert not thread.is_alive()
    assert not client.is_alive()
    assert time.monotonic() - t0 < within(5)
    assert lines[0] == "retry: 1000"


def _sse_peer(seen: list[str | None]) -> Any:
    """A stream that sends one event as multi-line data, then breaks the connection;
    the next connection must come back with Last-Event-ID and gets the rest."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    def frame(seq: int, text: str) -> dict[str, Any]:
        return {
            "v": 1,
            "type": "assistant.delta",
            "ts": "t",
            "session": "s",
            "seq": seq,
            "msg_id": "m",
            "payload": {"text": text},
        }

    async def stream(request: Request) -> StreamingResponse:
        seen.append(request.headers.get("last-event-id"))
        first = len(seen) == 1

        async def body() -> AsyncIterator[bytes]:
            if first:
                lines = json.dumps(frame(5, "a")).replace(', "seq"', ',\n"seq"').split("\n")
                yield b"id: 5\nevent: assistant.delta\n"
                yield "".join(f"data: {line}\n" for line in lines).encode() + b"\n"
                raise RuntimeError("connection lost")  # uvicorn cuts the response short
            yield b"id: 6\nevent: assistant.delta\ndata:" + json.dumps(frame(6, "b")).encode()
            yield b"\n\n"

        return StreamingResponse(body(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/instances/i/tether/stream", stream)])


async def test_client_joins_multiline_data_and_resumes_with_the_last_id() -> None:
    seen: list[str | None] = []
    with live_server(_sse_peer(seen)) as base:
        async with TetherClient(base) as tc:
            frames = [f async for f in tc.stream("i")]
    assert [(f.seq, f.payload) for f in frames] == [
        (5, AssistantDelta("a")),
        (6, AssistantDelta("b")),
    ]
    assert seen == [None, "5"]  # the second connection resumed after id 5
