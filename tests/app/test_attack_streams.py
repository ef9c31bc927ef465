"""Issue 33, items 4, 5 and 6, against a real `visus serve` process.

- **SSE readers multiplied memory**: with one 25 MB frame in a ring each slow reader held
  a copy (~32 MB): forty took a server from 0.4 to 1.7 GB, 1.4 GB kept after they left.
  Now an event leaves in pieces cut from the frame's own data, each handed to the
  client once it took the one before; streams are bounded per instance and per server.
- **A body reserved the budget before it arrived**: eight sockets posting to
  ``/web/login`` with ``Content-Length: 134217728`` and one byte held the whole memory
  budget: every authenticated request with a body answered 503 ``busy`` after 10 s, for
  as long as they stayed open, and no token was needed. Now a route served without the
  token takes 16 KB at most, a body is reserved as it arrives, and one that trickles is
  cut (408).
- **The ring lock wedged an instance**: SSE readers cancelled while frames arrived left
  the ring's lock held; every POST to the instance hung and SIGTERM no longer stopped
  the server.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import os
import socket
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from PIL import Image

from tests import hostile
from tests.timing import within
from visus.reference.server import serve_in_background

pytestmark = pytest.mark.slow

MB = hostile.MB


@pytest.fixture(scope="module")
def reference_url() -> Iterator[str]:
    with serve_in_background() as url:
        yield url


def _port(server: hostile.Server) -> int:
    return int(server.url.rsplit(":", 1)[1])


def _request(server: hostile.Server, method: str, path: str, headers: dict[str, str]) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{_port(server)}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _slow_reader(server: hostile.Server, path: str) -> socket.socket:
    """A socket that asks for ``path`` and never reads the answer (a small receive
    buffer, as a client on a slow link)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", _port(server)))
    auth = {"Authorization": f"Bearer {hostile.TOKEN}", "Accept": "text/event-stream"}
    sock.sendall(_request(server, "GET", path, auth))
    return sock


async def _iid(http: httpx.AsyncClient) -> str:
    return str((await http.get("/web/api/config")).json()["instance"])


async def test_slow_sse_readers_of_a_large_frame_do_not_grow_the_server(
    tmp_path: Path, reference_url: str
) -> None:
    with hostile.serve(tmp_path, reference_url=reference_url) as server:
        async with server.async_client(timeout=120) as http:
            iid = await _iid(http)
            # A frame of two 9.5 MB images (26 MB as sent), first in the ring.
            images = [
                {
                    "media_type": "image/png",
                    "data": base64.b64encode(os.urandom(9_500_000)).decode(),
                }
                for _ in range(2)
            ]
            frame = {
                "type": "user.message",
                "session": "big",
                "payload": {"text": "x", "images": images},
            }
            sent = await http.post(f"/v1/instances/{iid}/tether", json=frame)
            assert sent.status_code == 202, sent.text
            del images, frame
            await asyncio.sleep(2.0)
            server.reset_peak()
            before = server.rss()
            path = f"/v1/instances/{iid}/tether/stream?after_seq=0"
            readers = [_slow_reader(server, path) for _ in range(40)]
            try:
                await asyncio.sleep(5.0)  # the server writes what it can to each
                grew = server.peak() - before
                # A fast client is still served at once, and more readers are refused.
                start = time.monotonic()
                assert (await http.get("/web/api/sessions")).status_code == 200
                assert time.monotonic() - start < within(5)
                extra = [_slow_reader(server, path) for _ in range(40)]
                await asyncio.sleep(1.0)
                statuses = [s.recv(64) for s in extra]
                for s in extra:
                    s.close()
            finally:
                for s in readers:
                    s.close()
            await asyncio.sleep(2.0)
            kept = server.rss() - before
            print(f"40 slow readers: peak +{grew / MB:.0f} MB, kept +{kept / MB:.0f} MB")
            assert grew < 200 * MB, f"grew by {grew / MB:.0f} MB"  # it grew by 1.3 GB
            assert kept < 100 * MB, f"kept {kept / MB:.0f} MB"
            refused = [s for s in statuses if s.startswith(b"HTTP/1.1 429")]
            assert refused, statuses  # past SSE_MAX_STREAMS_PER_INSTANCE


async def _body(server: hostile.Server, path: str, headers: dict[str, str]) -> socket.socket:
    sock = socket.socket()
    sock.connect(("127.0.0.1", _port(server)))
    sock.sendall(_request(server, "POST", path, headers) + b"{")
    return sock


async def test_declared_bodies_on_the_sign_in_hold_nothing(tmp_path: Path) -> None:
    with hostile.serve(tmp_path) as server:
        async with server.async_client(timeout=120) as http:
            iid = await _iid(http)
            huge = {"Content-Type": "application/json", "Content-Length": str(128 * MB)}
            held = [await _body(server, "/web/login", huge) for _ in range(8)]
            try:
                await asyncio.sleep(1.0)
                frame = {"type": "user.message", "session": "s", "payload": {"text": "call wait 0"}}
                start = time.monotonic()
                r = await http.post(f"/v1/instances/{iid}/tether", json=frame)
                took = time.monotonic() - start
                print(f"a post beside 8 held sign-ins: {r.status_code} in {took:.1f} s")
                assert r.status_code == 202, r.text  # it was 503 busy after 10 s
                answers = [s.recv(200) for s in held]
                assert all(a.startswith(b"HTTP/1.1 413") for a in answers), answers
            finally:
                for s in held:
                    s.close()
            # With the token: eight 28 MB bodies declared, one byte sent, hold nothing
            # either: another body is taken at once.
            auth = {**huge, "Authorization": f"Bearer {hostile.TOKEN}"}
            auth["Content-Length"] = str(27 * MB)
            path = f"/v1/instances/{iid}/tether"
            held = [await _body(server, path, auth) for _ in range(8)]
            try:
                await asyncio.sleep(1.0)
                r = await http.post(path, json={**frame, "session": "t"})
                assert r.status_code == 202, r.text
            finally:
                for s in held:
                    s.close()


async def test_a_trickled_body_is_cut_and_the_sign_in_is_rate_limited(tmp_path: Path) -> None:
    bounds = {"HTTP_BODY_SECONDS": 2.0}
    with hostile.serve(tmp_path, bounds=bounds) as server:
        async with server.async_client(timeout=120) as http:
            iid = await _iid(http)
            headers = {
                "Content-Type": "application/json",
                "Content-Length": "10000",  # at two bytes a second: an hour and more
                "Authorization": f"Bearer {hostile.TOKEN}",
            }
            sock = await _body(server, f"/v1/instances/{iid}/tether", headers)
            sock.settimeout(0.5)
            answer = b""
            deadline = time.monotonic() + within(60)
            while not answer and time.monotonic() < deadline:
                with contextlib.suppress(TimeoutError):
                    sock.sendall(b" ")  # a byte now and then, for ever
                    answer = sock.recv(200)
            sock.close()
            assert answer.startswith(b"HTTP/1.1 408"), answer
            # The sign-in: past AUTH_MAX_FAILURES wrong tokens, 429 for a while.
            codes = [
                (await http.post("/web/login", json={"token": f"guess-{i}"})).status_code
                for i in range(25)
            ]
            assert codes[0] == 401, codes
            assert codes[-1] == 429, codes


async def _open_stream(port: int, path: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
    head += f"Authorization: Bearer {hostile.TOKEN}\r\nAccept: text/event-stream\r\n\r\n"
    writer.write(head.encode())
    await writer.drain()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(reader.readline(), 5)
    return reader, writer


@contextlib.asynccontextmanager
async def _streams(port: int, path: str, n: int) -> AsyncIterator[None]:
    opened = await asyncio.gather(*(_open_stream(port, path) for _ in range(n)))
    try:
        yield
    finally:
        for _, writer in opened:
            writer.close()


async def test_readers_cancelled_as_frames_arrive_never_wedge_the_instance(
    tmp_path: Path, reference_url: str
) -> None:
    with hostile.serve(tmp_path, reference_url=reference_url) as server:
        async with server.async_client(timeout=30) as http:
            iid = await _iid(http)
            path = f"/v1/instances/{iid}/tether/stream"
            for round_ in range(10):
                async with _streams(_port(server), path, 100):
                    frame = {
                        "type": "user.message",
                        "session": f"r{round_}",
                        "payload": {"text": "hello"},
                    }
                    await http.post(f"/v1/instances/{iid}/tether", json=frame)
                await asyncio.sleep(0.2)
            # The instance still takes work at once, and answers it.
            done = await hostile.turn(http, iid, "after", "hello", seconds=60)
            assert done["type"] == "assistant.done", done
        # Readers open and a body half sent: SIGTERM still stops the server.
        async with _streams(_port(server), path, 10):
            held = await _body(server, f"/v1/instances/{iid}/tether", {"Content-Length": "1000"})
            assert server.terminate(within(60)), server.tail()
            held.close()


async def test_many_instances_full_of_large_messages_share_one_ring_budget(
    tmp_path: Path, reference_url: str
) -> None:
    """Hostile pass: each instance's ring held up to RING_MAX_BYTES (128 MB) of frames
    and a client creates any number of instances: eight, each sent six 26 MB messages,
    kept 1083 MB of the server. The rings of a server now share RINGS_MAX_BYTES (64 MB
    here): the oldest frames anywhere go first."""
    image = {"media_type": "image/png", "data": base64.b64encode(os.urandom(9_500_000)).decode()}
    payload = {"text": "x", "images": [image, image]}
    with hostile.serve(
        tmp_path, reference_url=reference_url, bounds={"RINGS_MAX_BYTES": 64 * MB}
    ) as server:
        async with server.async_client(timeout=120) as http:
            before = server.rss()
            iids = []
            for _ in range(8):
                created = await http.post("/v1/instances", json={"model": "reference"})
                assert created.status_code == 201, created.text
                iids.append(created.json()["id"])
            for iid in iids:
                for k in range(6):
                    frame = {"type": "user.message", "session": f"s{k}", "payload": payload}
                    sent = await http.post(f"/v1/instances/{iid}/tether", json=frame)
                    assert sent.status_code == 202, sent.text
            deadline = time.monotonic() + within(120)
            while any(i["pending"] for i in (await http.get("/v1/instances")).json()["instances"]):
                assert time.monotonic() < deadline, "the turns did not end"
                await asyncio.sleep(0.5)
            await asyncio.sleep(1.0)
            kept = server.rss() - before
            print(f"8 instances x 6 messages of 26 MB: kept +{kept / MB:.0f} MB")
            assert kept < 300 * MB, f"kept {kept / MB:.0f} MB"
            # The newest message of the last instance is still there to read.
            last = await http.get(f"/v1/instances/{iids[-1]}/tether/poll", params={"after_seq": 0})
            assert last.status_code == 200, last.text
            assert last.json()["frames"], last.text


async def test_queued_turns_of_many_instances_hold_the_memory_budget_only(
    tmp_path: Path, reference_url: str
) -> None:
    """Hostile pass: a queued turn holds its message and decoded images until it runs;
    TETHER_MAX_PENDING_TURNS bounded them per instance only, and a client creates
    instances. Three instances, four 26 MB messages each to a model still thinking
    (each turn then holds about 120 MB): the turns in flight now count their messages
    twice against TETHER_TURNS_MAX_BYTES (200 MB here), past it 429 busy; and past
    TETHER_MAX_INSTANCES a create is refused until one is deleted."""
    noise = Image.frombytes("RGB", (1770, 1770), os.urandom(1770 * 1770 * 3))
    png = io.BytesIO()
    noise.save(png, "PNG", compress_level=1)  # 9.4 MB: noise does not compress
    image = {"media_type": "image/png", "data": base64.b64encode(png.getvalue()).decode()}
    payload = {"text": "wait 40", "images": [image, image]}
    bounds = {
        "TETHER_TURNS_MAX_BYTES": 200 * MB,
        "RINGS_MAX_BYTES": 32 * MB,
        "TETHER_MAX_INSTANCES": 4,
    }
    with hostile.serve(tmp_path, reference_url=reference_url, bounds=bounds) as server:
        async with server.async_client(timeout=120) as http:
            before = server.rss()
            iids = []
            for _ in range(3):  # with the web chat's, four
                created = await http.post("/v1/instances", json={"model": "reference"})
                assert created.status_code == 201, created.text
                iids.append(created.json()["id"])
            extra = await http.post("/v1/instances", json={"model": "reference"})
            assert extra.status_code == 403, extra.text
            assert "TETHER_MAX_INSTANCES" in extra.text, extra.text
            codes = []
            for iid in iids:
                for k in range(4):
                    frame = {"type": "user.message", "session": f"s{k}", "payload": payload}
                    sent = await http.post(f"/v1/instances/{iid}/tether", json=frame)
                    codes.append(sent.status_code)
            await asyncio.sleep(1.0)
            held = server.rss() - before
            print(f"12 turns of 26 MB messages sent: {sorted(codes)}, held +{held / MB:.0f} MB")
            assert 202 in codes, codes
            assert 429 in codes, codes  # it took all 12
            assert set(codes) <= {202, 429}, codes
            assert held < 500 * MB, f"held {held / MB:.0f} MB"
            assert (await http.delete(f"/v1/instances/{iids[0]}")).status_code == 204
            again = await http.post("/v1/instances", json={"model": "reference"})
            assert again.status_code == 201, again.text


async def test_small_turns_in_flight_are_bounded_over_the_server(tmp_path: Path) -> None:
    """Hostile pass: text-only turns cost TETHER_TURNS_MAX_BYTES almost nothing, so up
    to TETHER_MAX_INSTANCES x TETHER_MAX_PENDING_TURNS (512) ran at once, each with its
    context and the operator's MCP servers. Each counts TETHER_TURN_MIN_BYTES at least
    (twice): with room for three here, six turns to a model still thinking: three run,
    three are refused 429 busy naming the limit."""
    bounds = {"TETHER_TURNS_MAX_BYTES": 3 * 8 * MB}
    with hostile.serve(tmp_path, bounds=bounds) as server:
        async with server.async_client(timeout=120) as http:
            iid = await _iid(http)
            answers = []
            for k in range(6):
                frame = {"type": "user.message", "session": f"s{k}", "payload": {"text": "wait 30"}}
                answers.append(await http.post(f"/v1/instances/{iid}/tether", json=frame))
            codes = [a.status_code for a in answers]
            assert codes == [202, 202, 202, 429, 429, 429], codes  # six 202 before
            assert answers[-1].json()["error"]["limit"] == "TETHER_TURNS_MAX_BYTES", answers[
                -1
            ].text
