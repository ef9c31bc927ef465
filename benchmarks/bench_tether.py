"""Tether costs, against a tether server running in its own process on loopback.

1. Ingress: frames carrying one 1 MB image each, POSTed over loopback HTTP, in MB
   of image per second; baseline in the same run: base64-decoding and sha256-hashing
   the same bytes in-process (the least work a server must do per image). Ratio.
2. Memory: a burst of 300 frames of 5 MB images (1.5 GB decoded, 2 GB on the wire;
   the runner echoes each image back, so 600 image frames pass the ring). The
   server's peak RSS (VmHWM) must stay under its idle RSS + the ring budget
   (RING_MAX_BYTES) + a bounded overhead.
4. Concurrent polls of a full ring: right after (2), 10 clients poll from seq 0 at
   once with the default ``max_bytes`` (TETHER_POLL_DEFAULT_MAX_BYTES), then, as the
   baseline in the same run, 10 with ``max_bytes`` = RING_MAX_BYTES (what every poll
   was before: the whole ring in one answer). Server peak RSS (VmHWM) after each.
3. ``tether_read`` latency (p50, p99) through the MCP server (official client,
   in-process streams) over HTTP to the tether server: an empty read, and a read
   returning one ``assistant.done`` frame with a 1 MB image.

Run: ``.venv/bin/python -m benchmarks tether``
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from visus import limits
from visus.tether.runner import ImageIn, InstanceConfig, TurnOutput

MB = limits.MB
ROOT = Path(__file__).resolve().parent.parent


class _Echo:
    """Answers every turn with its own text and images (keeps nothing)."""

    async def run_turn(
        self,
        *,
        session: str,
        text: str,
        images: Sequence[ImageIn],
        user: Mapping[str, Any] | None,
        emit_delta: Callable[[str], Awaitable[None]],
    ) -> TurnOutput:
        return TurnOutput(text, tuple(images))


def _factory(config: InstanceConfig) -> _Echo:
    return _Echo()


def serve_for_bench(port: int, data_dir: str) -> None:
    """Entry point of the server process."""
    import uvicorn

    from visus.tether.server import create_app

    app = create_app(data_dir=Path(data_dir), runner_factory=_factory)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _rss(pid: int) -> tuple[int, int]:
    """(current RSS, peak RSS) of a process in bytes, from /proc."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024


def _frame(data: bytes, text: str = "") -> bytes:
    body = {
        "type": "user.message",
        "payload": {"text": text, "images": [{"media_type": "image/png", "data": ""}]},
    }
    head, tail = json.dumps(body, separators=(",", ":")).split('"data":""')
    return head.encode() + b'"data":"' + base64.b64encode(data) + b'"' + tail.encode()


def _wait_up(base: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("tether server exited")
        try:
            httpx.get(f"{base}/openapi.json", timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.05)
    raise RuntimeError("tether server did not start")


def _post(http: httpx.Client, url: str, body: bytes) -> int:
    """POST a frame, waiting out 429 (turns in flight) as a client should; 429s seen."""
    busy = 0
    while True:
        r = http.post(url, content=body, headers={"Content-Type": "application/json"})
        if r.status_code != 429:
            r.raise_for_status()
            return busy
        busy += 1
        time.sleep(0.01)


def bench_ingress(http: httpx.Client, base: str) -> None:
    iid = http.post(f"{base}/v1/instances", json={"model": "bench"}).json()["id"]
    n = 60
    images = [os.urandom(MB) for _ in range(n)]
    bodies = [_frame(im) for im in images]

    t0 = time.perf_counter()
    for im in images:
        hashlib.sha256(base64.b64decode(base64.b64encode(im))).digest()
    baseline = time.perf_counter() - t0
    # The in-process figure above includes encoding; time decoding+hashing alone too.
    encoded = [base64.b64encode(im) for im in images]
    t0 = time.perf_counter()
    for e in encoded:
        hashlib.sha256(base64.b64decode(e)).digest()
    decode_hash = time.perf_counter() - t0

    url = f"{base}/v1/instances/{iid}/tether"
    for body in bodies[:5]:  # warm up the connection and code paths
        _post(http, url, body)
    t0 = time.perf_counter()
    busy = sum(_post(http, url, body) for body in bodies)
    ingress = time.perf_counter() - t0
    mb = n * len(images[0]) / MB
    print(f"ingress over loopback HTTP: {n} frames x 1 MB image: {mb / ingress:8.1f} MB/s")
    print(f"in-process base64-decode + sha256 of the same bytes: {mb / decode_hash:8.1f} MB/s")
    print(f"(encode + decode + sha256 in-process: {mb / baseline:8.1f} MB/s)")
    print(f"ratio ingress / in-process decode+hash: {decode_hash / ingress:6.3f}")
    print(f"(429 answers waited out during ingress: {busy})")
    http.delete(f"{base}/v1/instances/{iid}")


def bench_memory(http: httpx.Client, base: str, pid: int) -> None:
    iid = http.post(f"{base}/v1/instances", json={"model": "bench"}).json()["id"]
    url = f"{base}/v1/instances/{iid}/tether"
    idle, idle_peak = _rss(pid)
    image = os.urandom(5 * MB)
    body = _frame(image)
    t0 = time.perf_counter()
    busy = sum(_post(http, url, body) for _ in range(300))
    while (info := http.get(f"{base}/v1/instances/{iid}").json())["last_seq"] < 600:
        time.sleep(0.05)  # every turn done: 300 user.message + 300 assistant.done frames
    elapsed = time.perf_counter() - t0
    now, peak = _rss(pid)
    overhead = peak - idle - limits.RING_MAX_BYTES
    print(
        f"burst: 300 frames x 5 MB image ({300 * len(body) / MB:.0f} MB on the wire) "
        f"in {elapsed:.1f}s; ring holds {info['frames']} frames, last seq {info['last_seq']}; "
        f"{busy} answers of 429 waited out"
    )
    print(
        f"server RSS: idle {idle / MB:.0f} MB (peak before {idle_peak / MB:.0f} MB), "
        f"after burst {now / MB:.0f} MB, peak {peak / MB:.0f} MB"
    )
    print(
        f"peak - idle = {(peak - idle) / MB:.0f} MB against the ring budget of "
        f"{limits.RING_MAX_BYTES / MB:.0f} MB: overhead beyond the budget {overhead / MB:.0f} MB"
    )
    bench_concurrent_polls(base, pid, iid)
    http.delete(f"{base}/v1/instances/{iid}")


def bench_concurrent_polls(base: str, pid: int, iid: str) -> None:
    """10 simultaneous polls from seq 0 of a full ring: bounded pages, then whole-ring ones."""

    async def ten(max_bytes: int | None) -> int:
        params: dict[str, Any] = {"after_seq": 0}
        if max_bytes is not None:
            params["max_bytes"] = max_bytes
        async with httpx.AsyncClient(timeout=120) as client:
            url = f"{base}/v1/instances/{iid}/tether/poll"
            answers = await asyncio.gather(*(client.get(url, params=params) for _ in range(10)))
        return max(len(a.content) for a in answers)

    before, before_peak = _rss(pid)
    largest = asyncio.run(ten(None))
    _, bounded_peak = _rss(pid)
    whole = asyncio.run(ten(limits.RING_MAX_BYTES))
    _, unbounded_peak = _rss(pid)
    print(
        f"10 concurrent polls of the full ring from seq 0: RSS before {before / MB:.0f} MB "
        f"(peak so far {before_peak / MB:.0f} MB)"
    )
    print(
        f"  default max_bytes ({limits.TETHER_POLL_DEFAULT_MAX_BYTES / MB:.0f} MB): answers "
        f"<= {largest / MB:.1f} MB, peak RSS {bounded_peak / MB:.0f} MB "
        f"(+{(bounded_peak - max(before_peak, before)) / MB:.0f} MB)"
    )
    print(
        f"  baseline, max_bytes = the whole ring: answers {whole / MB:.1f} MB, peak RSS "
        f"{unbounded_peak / MB:.0f} MB (+{(unbounded_peak - bounded_peak) / MB:.0f} MB more)"
    )


async def bench_read(base: str) -> None:
    from mcp import Client

    from visus.mcp_server import build_server
    from visus.tether.client import TetherClient

    async with TetherClient(base) as tc:
        iid = (await tc.create_instance("bench"))["id"]
        await tc.send(iid, "x", [ImageIn("image/png", os.urandom(MB))])
        last = 0
        while True:
            page = await tc.poll_raw(iid, 0, wait=5)
            if any(f["type"] == "assistant.done" for f in page["frames"]):
                last = page["next_seq"]
                break
        server = build_server(tc)
        async with Client(server, mode="legacy") as client:
            for label, after in (("empty read", last), ("one done frame, 1 MB image", last - 1)):
                times = []
                for i in range(220):
                    t0 = time.perf_counter()
                    r = await client.call_tool("tether_read", {"instance": iid, "after_seq": after})
                    if i >= 20:  # warm-up
                        times.append(time.perf_counter() - t0)
                    assert not r.is_error
                times.sort()
                p50 = statistics.median(times) * 1000
                p99 = times[int(len(times) * 0.99) - 1] * 1000
                print(f"tether_read {label}: p50 {p50:.2f} ms, p99 {p99:.2f} ms (200 calls)")


@contextmanager
def _server() -> Iterator[tuple[str, int]]:
    """A tether server in its own process: (base URL, pid)."""
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as data:
        code = (
            "from benchmarks.bench_tether import serve_for_bench; "
            f"serve_for_bench({port}, {data!r})"
        )
        proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT)
        try:
            _wait_up(base, proc)
            yield base, proc.pid
        finally:
            proc.terminate()
            proc.wait(10)


def main() -> None:
    with _server() as (base, _), httpx.Client(timeout=60) as http:
        bench_ingress(http, base)
        asyncio.run(bench_read(base))
    # A fresh process, so its peak RSS is the burst's alone.
    with _server() as (base, pid), httpx.Client(timeout=60) as http:
        bench_memory(http, base, pid)


if __name__ == "__main__":
    main()
