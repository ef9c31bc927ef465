"""A loopback HTTP server answering canned provider responses, recording each request.

Each test scripts the replies (status, headers, a JSON body or a list of chunks to
stream) and then inspects what the SDK actually sent.
"""

from __future__ import annotations

import json
import struct
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

T = TypeVar("T")

#: Clients made by tests; the conftest closes them before the test's event loop ends.
OPEN: list[Any] = []


def track(client: T) -> T:
    OPEN.append(client)
    return client


@dataclass
class Reply:
    status: int = 200
    body: Any = None
    chunks: list[bytes] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    raw: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.raw)


class StubServer:
    """``url`` is ``http://127.0.0.1:<port>``; ``replies`` are used in order, the last repeats."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.requests: list[Seen] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._answer()

            def do_POST(self) -> None:
                self._answer()

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                stub.requests.append(
                    Seen(
                        self.command,
                        self.path,
                        {k.lower(): v for k, v in self.headers.items()},
                        raw,
                    )
                )
                index = min(len(stub.requests), len(stub.replies)) - 1
                reply = stub.replies[index]
                self.send_response(reply.status)
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                if reply.chunks is not None:
                    self.send_header("Content-Type", reply.content_type)
                    self.send_header("Connection", "close")
                    self.end_headers()
                    for chunk in reply.chunks:
                        self.wfile.write(chunk)
                        self.wfile.flush()
                    self.close_connection = True
                    return
                body = (
                    reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
                )
                self.send_header("Content-Type", reply.content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    def script(self, *replies: Reply) -> StubServer:
        self.replies = list(replies)
        self.requests = []
        return self

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def serve() -> Iterator[StubServer]:
    server = StubServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def sse(*events: Any, event_names: bool = False, done: bool = False) -> list[bytes]:
    """Server-sent events, one ``data:`` line per JSON event (named by its ``type``)."""
    out = []
    for e in events:
        head = f"event: {e['type']}\n" if event_names else ""
        out.append(f"{head}data: {json.dumps(e)}\n\n".encode())
    if done:
        out.append(b"data: [DONE]\n\n")
    return out


def ndjson(*objs: Any) -> list[bytes]:
    return [json.dumps(o).encode() + b"\n" for o in objs]


def aws_event(event_type: str, payload: Any) -> bytes:
    """One AWS event-stream frame (as Bedrock's ConverseStream sends) with a JSON payload."""
    body = json.dumps(payload).encode()
    headers = b""
    for name, value in (
        (":event-type", event_type),
        (":content-type", "application/json"),
        (":message-type", "event"),
    ):
        n, v = name.encode(), value.encode()
        headers += bytes([len(n)]) + n + b"\x07" + struct.pack(">H", len(v)) + v
    total = 12 + len(headers) + len(body) + 4
    prelude = struct.pack(">II", total, len(headers))
    prelude += struct.pack(">I", zlib.crc32(prelude) & 0xFFFFFFFF)
    message = prelude + headers + body
    return message + struct.pack(">I", zlib.crc32(message) & 0xFFFFFFFF)
