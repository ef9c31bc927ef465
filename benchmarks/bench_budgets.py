"""Inputs that held a worker (issue 23): time and memory, this checkout against another.

Each scenario runs in a fresh child process (its peak RSS is its own), first against the
checkout named by ``VISUS_BENCH_BASELINE_SRC`` (a ``src`` folder: the code as it was,
measured in the same run) when that is set, then against this one:

- ``pngs``: six interlaced 100 MP PNGs (300 KB each, built by ``tests/media/bombs.py``)
  fitted at once, each on its own thread, as six pastes reach a server. What each call
  ended in, the wall time, the peak RSS of the process (``VmHWM`` minus the RSS
  before) and of its render workers (sampled every 20 ms).
- ``scans``: six 10000 x 10000 progressive JPEGs of 600 scans (700 KB each), likewise.
- ``tiny``: a 20 x 20 SVG fitted while four filter bombs (each past the render budget)
  are queued: how long the tiny one waits.
- ``proxy``: one 250 MB request body (one text block) through ``visus proxy`` to an
  upstream that answers at once: the proxy process's peak RSS during the request and
  its RSS once the answer is back. The upstream and the client live in this process.

Issue 33's, each in a fresh child process too:

- ``pdf``: a probe (page count) of a 2 MB PDF whose object stream inflates to 2 GB:
  what it ended in, the wall time, the process's peak RSS.
- ``ztxt``: one fit of a 9.5 MB PNG of 9,000 zTXt chunks each inflating to just under
  Pillow's 1 MB chunk bound: CPU seconds of the process, and what it ended in.
- ``gifs``: twelve fits of a 27 KB 6000 x 6000 palette GIF at once (Claude's profile):
  the process's peak RSS, its RSS after, and the memory budget's own peak.
- ``video``: sixteen keyframes of a 20 MB MJPEG of 9000 x 9000 frames: the wall time,
  the process's peak RSS and the render workers'.
- ``sse`` and ``body``: against a real `visus serve` (``benchmarks/_attacks.py``): forty
  slow SSE readers of a 26 MB frame; eight sign-ins declaring 128 MB beside an
  authenticated post, and a body trickled a byte at a time; eight instances' rings
  full of 26 MB messages (``rings``); four 128 MB gzip bodies through `visus proxy`
  held by the upstream (``gzip``).

``VISUS_BENCH_BASELINE_SRC=/old/checkout/src python -m benchmarks budgets``
(``VISUS_BENCH_ONLY=pngs`` runs one scenario).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks import _attacks

_ROOT = Path(__file__).resolve().parents[1]

_COMMON = r"""
import json, os, sys, threading, time
sys.path.insert(0, ROOT)

def status(pid, field):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0

def children():
    me = os.getpid()
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                fields = open(f"/proc/{name}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == me:
                out.append(int(name))
    return out

def at_once(call, n):
    # n calls on n threads; worker peak RSS sampled meanwhile.
    open("/proc/self/clear_refs", "w").write("5")
    before = status("self", "VmRSS")
    results, peaks, done = [], {}, threading.Event()
    def sample():
        while not done.is_set():
            for pid in children():
                peaks[pid] = max(peaks.get(pid, 0), status(pid, "VmRSS"))
            time.sleep(0.02)
    def one():
        t = time.monotonic()
        try:
            out = call()
        except Exception as e:
            out = f"{type(e).__name__}: {str(e)[:90]}"
        results.append((round(time.monotonic() - t, 2), out))
    sampler = threading.Thread(target=sample)
    sampler.start()
    start = time.monotonic()
    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - start
    done.set()
    sampler.join()
    return {
        "wall": round(wall, 2),
        "results": sorted(results),
        "peak_mb": round((status("self", "VmHWM") - before) / 1e6, 1),
        "workers_peak_mb": round(sum(peaks.values()) / 1e6, 1),
    }
"""

# Six fits of one source at once; {make} builds it (tests/media/bombs.py).
_SIX = r"""
from tests.media import bombs
from visus.media import Profile, load
data = bombs.{make}
profile = Profile(1568, 1_150_000, 5 * 2**20)
def call():
    f = load(data, profile=profile)
    return f"fitted {{f.width}}x{{f.height}}"
print(json.dumps(at_once(call, 6)))
"""
_PNGS = _SIX.format(make="interlaced_png(10000, 10000)")
_SCANS = _SIX.format(make="progressive_jpeg(10000, 10000, 600)")

_TINY = r"""
from visus.media import Profile, load
profile = Profile(1568, 1_150_000, 5 * 2**20)
load(b"warm\n", profile=profile)
passes = "".join(
    f'<feMorphology in="{"SourceGraphic" if i == 0 else f"m{i - 1}"}" operator="dilate" '
    f'radius="200" result="m{i}"/>' for i in range(10)
)
bomb = (
    '<svg xmlns="http://www.w3.org/2000/svg" width="1500" height="1500">'
    f'<filter id="f" x="0" y="0" width="1" height="1">{passes}</filter>'
    '<g filter="url(#f)"><rect width="4000" height="4000" fill="teal"/></g></svg>'
).encode()
tiny = (
    b'<svg xmlns="http://www.w3.org/2000/svg" width="20" height="20">'
    b'<rect width="9" height="9"/></svg>'
)
outcomes = []
def bombs():
    try:
        load(bomb, profile=profile)
        outcomes.append("rendered")
    except Exception as e:
        outcomes.append(type(e).__name__)
threads = [threading.Thread(target=bombs) for _ in range(4)]
for t in threads:
    t.start()
time.sleep(0.5)
start = time.monotonic()
load(tiny, profile=profile)
waited = time.monotonic() - start
for t in threads:
    t.join()
print(json.dumps({"tiny_wait": round(waited, 2), "bombs": sorted(outcomes)}))
"""

_PROXY = r"""
import uvicorn
from visus.proxy import ProxyConfig, create_proxy_app
app = create_proxy_app(ProxyConfig(upstream=sys.argv[2]))
config = uvicorn.Config(app, host="127.0.0.1", port=int(sys.argv[3]), log_level="warning")
server = uvicorn.Server(config)
threading.Thread(target=server.run, daemon=True).start()
while not server.started:
    time.sleep(0.01)
print("ready", flush=True)
sys.stdin.readline()
server.should_exit = True
"""

_PDF = r"""
from tests.media import bombs
from visus.media import probe
data = bombs.objstm_pdf(2048 * 2**20)
open("/proc/self/clear_refs", "w").write("5")
before = status("self", "VmRSS")
start = time.monotonic()
try:
    outcome = f"probed: {probe(data).page_count} page"
except Exception as e:
    outcome = f"{type(e).__name__}: {str(e)[:90]}"
print(json.dumps({
    "wall": round(time.monotonic() - start, 2),
    "outcome": outcome,
    "peak_mb": round((status("self", "VmHWM") - before) / 1e6, 1),
}))
"""

_ZTXT = r"""
from tests.media import bombs
from visus.media import Profile, load
data = bombs.ztxt_png(9000)
start = time.process_time()
try:
    f = load(data, profile=Profile(1568, 1_150_000, 5 * 2**20))
    outcome = f"fitted {f.width}x{f.height}"
except Exception as e:
    outcome = f"{type(e).__name__}: {str(e)[:90]}"
print(json.dumps({"cpu_s": round(time.process_time() - start, 2), "outcome": outcome}))
"""

_GIFS = r"""
from tests.media import bombs
from visus.budget import MEMORY
from visus.media import Profile, load
data = bombs.palette_gif(6000)
profile = Profile(1568, 1_150_000, 5 * 2**20)
def call():
    f = load(data, profile=profile)
    return f"fitted {f.width}x{f.height}"
before = status("self", "VmRSS")
out = at_once(call, 12)
time.sleep(1.0)
out["after_mb"] = round((status("self", "VmRSS") - before) / 1e6, 1)
out["budget_peak_mb"] = round(MEMORY.peak / 1e6, 1)
out["results"] = sorted({r for _, r in out["results"]})
print(json.dumps(out))
"""

_VIDEO = r"""
from tests.media import bombs
from visus.media import video
data = bombs.encoded_video("mjpeg", "avi", 9000, 9000, 16, "yuvj420p")
def call():
    frames, _ = video.keyframes(data, max_frames=16)
    return f"{len(frames)} keyframes"
print(json.dumps(at_once(call, 1)))
"""

_SCENARIOS = {
    "pngs": _PNGS,
    "scans": _SCANS,
    "tiny": _TINY,
    "pdf": _PDF,
    "ztxt": _ZTXT,
    "gifs": _GIFS,
    "video": _VIDEO,
}


def _env(src: str | None) -> dict[str, str]:
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    return env


def _child(code: str, src: str | None) -> dict[str, Any]:
    program = f"ROOT = {str(_ROOT)!r}\n" + _COMMON + code
    proc = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        env=_env(src),
        cwd=str(_ROOT),
        check=False,
    )
    if proc.returncode:
        raise RuntimeError(proc.stderr[-3000:])
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _status(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _upstream() -> str:
    """An upstream that reads the body and answers at once (in this process)."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def messages(request: Request) -> JSONResponse:
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
        return JSONResponse({"type": "message", "received": size, "content": []})

    app = Starlette(routes=[Route("/v1/messages", messages, methods=["POST"])])
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.01)
    return f"http://127.0.0.1:{port}"


def _proxy(src: str | None, upstream: str, body: bytes) -> dict[str, Any]:
    import httpx

    port = _free_port()
    program = f"ROOT = {str(_ROOT)!r}\n" + _COMMON + _PROXY
    proc = subprocess.Popen(
        [sys.executable, "-c", program, "proxy", upstream, str(port)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=_env(src),
        cwd=str(_ROOT),
    )
    assert proc.stdout is not None
    assert proc.stdin is not None
    try:
        assert proc.stdout.readline().strip() == "ready"
        before = _status(proc.pid, "VmRSS")
        Path(f"/proc/{proc.pid}/clear_refs").write_text("5")
        start = time.monotonic()
        reply = httpx.post(
            f"http://127.0.0.1:{port}/v1/messages",
            content=body,
            headers={"content-type": "application/json", "x-api-key": "k"},
            timeout=300,
        )
        took = time.monotonic() - start
        time.sleep(1.0)
        return {
            "status": reply.status_code,
            "took": round(took, 2),
            "peak_mb": round((_status(proc.pid, "VmHWM") - before) / 1e6, 1),
            "after_mb": round((_status(proc.pid, "VmRSS") - before) / 1e6, 1),
        }
    finally:
        proc.stdin.write("\n")
        proc.stdin.flush()
        proc.wait(timeout=30)


def _proxy_body() -> bytes:
    text = "x" * (250 * 10**6)
    message = {"role": "user", "content": [{"type": "text", "text": text}]}
    return json.dumps(
        {"model": "claude-sonnet-4-6", "max_tokens": 8, "messages": [message]}
    ).encode()


def main() -> None:
    baseline = os.environ.get("VISUS_BENCH_BASELINE_SRC") or None
    only = os.environ.get("VISUS_BENCH_ONLY", "")
    runs = [("before", baseline), ("now", None)] if baseline else [("now", None)]
    for name, code in _SCENARIOS.items():
        if only and only != name:
            continue
        for label, src in runs:
            print(f"{name:6} {label:6} {json.dumps(_child(code, src))}", flush=True)
    served = {"sse": _attacks.sse, "body": _attacks.body, "rings": _attacks.rings}
    for name, scenario in {**served, "gzip": _attacks.gzip}.items():
        if not only or only == name:
            for label, src in runs:
                print(f"{name:6} {label:6} {json.dumps(scenario(src))}", flush=True)
    if not only or only == "proxy":
        upstream, body = _upstream(), _proxy_body()
        for label, src in runs:
            print(f"proxy  {label:6} {json.dumps(_proxy(src, upstream, body))}", flush=True)


if __name__ == "__main__":
    main()
