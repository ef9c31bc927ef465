"""Issue 33's budgets measured against a real `visus serve` (``bench_budgets``' rows
``sse`` and ``body``), from outside as ``tests/hostile.py`` reads a server: its RSS and
peak RSS in ``/proc``, what a client is answered and how soon.

- ``sse``: a ring holding one 26 MB user message (two 9.5 MB images); forty SSE readers
  that never read open its stream: the server's peak growth over five seconds, what it
  keeps once they left, and what a forty-first and more are answered.
- ``body``: eight sockets post to ``/web/login`` declaring 128 MB and send one byte; an
  authenticated post beside them: its status and time. Then a body trickled a byte at a
  time on an authenticated route: what it is answered, and when.

- ``rings``: eight instances, each sent six 26 MB user messages (the reference model
  answers at once): what the server keeps once their turns ended.
- ``gzip``: four gzip bodies of 130 KB, each 128 MB decoded, through `visus proxy` to an
  upstream that holds them: what the proxy holds while it does.

``src`` (another checkout's ``src``) runs the server from that code (``VISUS_ATTACK_SRC``).
"""

from __future__ import annotations

import base64
import contextlib
import gzip as gzip_
import json
import os
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from tests import hostile
from visus.reference.server import serve_in_background

MB = hostile.MB


@contextlib.contextmanager
def _src(src: str | None) -> Iterator[None]:
    """``VISUS_ATTACK_SRC`` set to ``src`` (the servers started run that code)."""
    old = os.environ.pop("VISUS_ATTACK_SRC", None)
    if src:
        os.environ["VISUS_ATTACK_SRC"] = src
    try:
        yield
    finally:
        os.environ.pop("VISUS_ATTACK_SRC", None)
        if old is not None:
            os.environ["VISUS_ATTACK_SRC"] = old


@contextlib.contextmanager
def _server(src: str | None, *, reference: bool, **kw: Any) -> Iterator[hostile.Server]:
    with (
        _src(src),
        tempfile.TemporaryDirectory(prefix="visus-bench-") as tmp,
        contextlib.ExitStack() as stack,
    ):
        url = stack.enter_context(serve_in_background()) if reference else None
        yield stack.enter_context(hostile.serve(Path(tmp), reference_url=url, **kw))


def _port(server: hostile.Server) -> int:
    return int(server.url.rsplit(":", 1)[1])


def _open(server: hostile.Server, head: str, *, small_buffer: bool = False) -> socket.socket:
    sock = socket.socket()
    if small_buffer:  # a client on a slow link: it takes 4 KB and no more
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", _port(server)))
    sock.sendall(head.encode())
    return sock


def _head(server: hostile.Server, method: str, path: str, headers: dict[str, str]) -> str:
    lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{_port(server)}"]
    return "\r\n".join([*lines, *(f"{k}: {v}" for k, v in headers.items())]) + "\r\n\r\n"


def sse(src: str | None) -> dict[str, Any]:
    """Forty slow readers of a ring holding a 26 MB frame."""
    with _server(src, reference=True) as server, server.client(timeout=120) as http:
        iid = http.get("/web/api/config").json()["instance"]
        images = [
            {"media_type": "image/png", "data": base64.b64encode(os.urandom(9_500_000)).decode()}
            for _ in range(2)
        ]
        frame = {
            "type": "user.message",
            "session": "big",
            "payload": {"text": "x", "images": images},
        }
        http.post(f"/v1/instances/{iid}/tether", json=frame).raise_for_status()
        del images, frame
        time.sleep(2.0)
        server.reset_peak()
        before = server.rss()
        auth = {"Authorization": f"Bearer {hostile.TOKEN}", "Accept": "text/event-stream"}
        head = _head(server, "GET", f"/v1/instances/{iid}/tether/stream?after_seq=0", auth)
        readers = [_open(server, head, small_buffer=True) for _ in range(40)]
        try:
            time.sleep(5.0)
            grew = server.peak() - before
            extra = [_open(server, head, small_buffer=True) for _ in range(40)]
            time.sleep(1.0)
            refused = sum(s.recv(64).startswith(b"HTTP/1.1 429") for s in extra)
            for s in extra:
                s.close()
        finally:
            for s in readers:
                s.close()
        time.sleep(2.0)
        return {
            "peak_mb": round(grew / MB),
            "kept_mb": round((server.rss() - before) / MB),
            "refused_of_40_more": refused,
        }


def body(src: str | None) -> dict[str, Any]:
    """Eight sign-ins declaring 128 MB, then an authenticated post; then a trickle."""
    out: dict[str, Any] = {}
    with _server(src, reference=False, bounds={"HTTP_BODY_SECONDS": 2.0}) as server:
        with server.client(timeout=120) as http:
            iid = http.get("/web/api/config").json()["instance"]
            huge = {"Content-Type": "application/json", "Content-Length": str(128 * MB)}
            held = [
                _open(server, _head(server, "POST", "/web/login", huge) + "{") for _ in range(8)
            ]
            try:
                time.sleep(1.0)
                frame = {"type": "user.message", "session": "s", "payload": {"text": "hi"}}
                start = time.monotonic()
                r = http.post(f"/v1/instances/{iid}/tether", json=frame)
                out["post_beside_8_signins"] = (
                    f"{r.status_code} in {time.monotonic() - start:.1f} s"
                )
            finally:
                for s in held:
                    s.close()
        out["trickle"] = _trickle(server, iid)
    return out


def _trickle(server: hostile.Server, iid: str, seconds: float = 60.0) -> str:
    """A byte every half second of a 10,000-byte body: the answer, and when."""
    headers = {
        "Content-Type": "application/json",
        "Content-Length": "10000",
        "Authorization": f"Bearer {hostile.TOKEN}",
    }
    sock = _open(server, _head(server, "POST", f"/v1/instances/{iid}/tether", headers) + "{")
    sock.settimeout(0.5)
    start = time.monotonic()
    answer = b""
    with sock:
        while not answer and time.monotonic() - start < seconds:
            with contextlib.suppress(TimeoutError, OSError):
                sock.sendall(b" ")
                answer = sock.recv(200)
    took = time.monotonic() - start
    if not answer:
        return f"no answer in {seconds:.0f} s (still open)"
    status = answer.split(b"\r\n", 1)[0].decode(errors="replace")
    return f"{status} after {took:.1f} s"


def rings(src: str | None) -> dict[str, Any]:
    """Eight instances, six 26 MB messages each: what the server keeps."""
    image = {"media_type": "image/png", "data": base64.b64encode(os.urandom(9_500_000)).decode()}
    payload = {"text": "x", "images": [image, image]}
    with _server(src, reference=True) as server, server.client(timeout=120) as http:
        before = server.rss()
        iids = [
            http.post("/v1/instances", json={"model": "reference"}).json()["id"] for _ in range(8)
        ]
        for iid in iids:
            for k in range(6):
                frame = {"type": "user.message", "session": f"s{k}", "payload": payload}
                http.post(f"/v1/instances/{iid}/tether", json=frame).raise_for_status()
        deadline = time.monotonic() + 300
        while any(i["pending"] for i in http.get("/v1/instances").json()["instances"]):
            if time.monotonic() > deadline:
                break
            time.sleep(0.5)
        time.sleep(1.0)
        return {"kept_mb": round((server.rss() - before) / MB)}


def gzip(src: str | None) -> dict[str, Any]:
    """Four 128 MB gzip bodies through the proxy to an upstream that holds them."""
    text = "x" * (128 * MB - 200)
    body = {
        "model": "claude-sonnet-4-6",
        "max_tokens": 8,
        "messages": [{"role": "user", "content": text}],
    }
    bomb = gzip_.compress(json.dumps(body).encode(), compresslevel=9)
    del text, body
    hold = threading.Event()
    headers = {"x-api-key": "k", "anthropic-version": "2023-06-01", "content-encoding": "gzip"}
    headers["content-type"] = "application/json"
    statuses: list[int] = []
    with (
        _src(src),
        tempfile.TemporaryDirectory(prefix="visus-bench-") as tmp,
        hostile.Recorder(b"{}", hold=hold) as upstream,
        hostile.proxy(Path(tmp), upstream.url) as proxy,
    ):
        before = proxy.rss()

        def post() -> None:
            with httpx.Client(base_url=proxy.url, timeout=300) as http:
                statuses.append(
                    http.post("/v1/messages", content=bomb, headers=headers).status_code
                )

        posts = [threading.Thread(target=post) for _ in range(4)]
        for t in posts:
            t.start()
        deadline = time.monotonic() + 120
        while len(upstream.seen) + len(statuses) < 4 and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(0.5)
        held = proxy.rss() - before
        hold.set()
        for t in posts:
            t.join()
    return {
        "compressed_kb": len(bomb) // 1024,
        "held_mb": round(held / MB),
        "statuses": sorted(statuses),
    }
