from __future__ import annotations

import signal
import socket
import threading
import time
from pathlib import Path

import httpx

from visus.tether.client import TetherClient
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
        assert [e[1] for e in first] == (
            ["user.message"] + ["assistant.delta"] * 3 + ["assistant.done"]
        )
        assert [e[0] for e in first] == [1, 2, 3, 4, 5]
        # The client drops after the second event and comes back with Last-Event-ID.
        resumed = read_events(url, {"Last-Event-ID": "2"}, "assistant.done")
        assert resumed == first[2:]
        # Frames that arrive while connected are pushed, not only the backlog.
        httpx.post(
            f"{base}/v1/instances/{iid}/tether",
            json={"type": "user.message", "payload": {"text": "four"}},
        )
        more = read_events(url, {"Last-Event-ID": "5"}, "assistant.done")
        assert [e[0] for e in more] == [6, 7, 8]
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
            assert [f.seq for f in got] == [2, 3, 4]
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
    server.handle_exit(signal.SIGTERM, None)  # what Ctrl-C / SIGTERM call
    thread.join(5)
    client.join(5)
    sock.close()
    assert not thread.is_alive()
    assert not client.is_alive()
    assert time.monotonic() - t0 < 5
    assert lines[0] == "retry: 1000"
