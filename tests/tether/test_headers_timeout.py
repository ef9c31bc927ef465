"""visus serve closes a connection whose request headers do not come (redteam, issue 23):
thousands of half-sent requests held sockets, and file descriptors, for ever. A request
that is being answered, a long poll past the deadline, is not cut."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.timing import within
from visus import limits
from visus.tether.server import create_app, tether_server

from .doubles import Factory


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setattr(limits, "HTTP_HEADERS_TIMEOUT_SECONDS", 0.5)
    app = create_app(data_dir=tmp_path, runner_factory=Factory(), token="tok")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = tether_server(app, host="127.0.0.1", port=port, log_level="warning")
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + within(10)
    while not server.started:
        assert time.monotonic() < deadline, "server did not start"
        assert thread.is_alive(), "server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def _closed_within(conn: socket.socket, seconds: float) -> bool:
    conn.settimeout(seconds)
    try:
        return conn.recv(1024) == b""
    except TimeoutError:
        return False


def test_a_half_sent_request_is_closed_and_a_long_answer_is_not(served: str) -> None:
    port = int(served.rsplit(":", 1)[1])
    half = socket.create_connection(("127.0.0.1", port))
    silent = socket.create_connection(("127.0.0.1", port))
    try:
        half.sendall(b"GET /v1/instances HTTP/1.1\r\nHost: x\r\n")  # never the blank line
        assert _closed_within(half, within(5)), "a half-sent request kept its connection"
        assert _closed_within(silent, within(5)), "a connection that sent nothing stayed open"
    finally:
        half.close()
        silent.close()
    auth = {"Authorization": "Bearer tok"}
    with httpx.Client(base_url=served, headers=auth, timeout=within(10)) as client:
        iid = client.post("/v1/instances", json={"model": "m"}).json()["id"]
        start = time.monotonic()
        # A long poll answered after 2 s, four times the headers deadline: not cut.
        r = client.get(f"/v1/instances/{iid}/tether/poll", params={"after_seq": 0, "wait": 2})
        assert r.status_code == 200, r.text
        assert time.monotonic() - start >= 1.5
        # The same keep-alive connection serves another request after it.
        assert client.get("/v1/instances").status_code == 200
