"""Renders and large decodes in separate processes that can really be stopped.

A render can hold a core for minutes (an SVG filter over a huge canvas, a text page of
48k tiny tokens) and so can a raster decode (a progressive JPEG of many scans: 600 of
them over 10000 x 10000 held libvips for a minute); no thread can be interrupted inside
librsvg, PDFium, FreeType or libjpeg. So every render, and every raster decode too
large for the calling process (:mod:`visus.media._cost`), runs in a warm worker process
(started once, reused; its side is :mod:`visus.media._child`) under two bounds from
:mod:`visus.limits`:

- ``RENDER_TIME_BUDGET_SECONDS`` of wall-clock time: past it the worker is killed
  (SIGKILL) and the call raises :class:`TooLargeError` naming the budget;
- ``RENDER_MAX_MEMORY_BYTES`` of address space (``RLIMIT_AS``, set in the child): an
  allocation past it fails there (``MemoryError``, or the renderer aborts and the
  worker dies), which also ends as :class:`TooLargeError` naming the cap.

**Two lanes.** Cheap work must not queue behind expensive work, and the cost of an SVG
cannot be known before it is drawn (a 1.5 KB filter can take minutes). So every render
starts in the *light* lane (``RENDER_LIGHT_WORKERS`` processes) and may run there for
``RENDER_LIGHT_SLICE_SECONDS``. Still running then, it moves to the *heavy* lane
(``RENDER_HEAVY_WORKERS``) with its worker, or, when that lane is full, is stopped and
waits for it, to start again there. A raster decode known to be large from its header
goes to the heavy lane at once. So a cheap render waits at most a slice per light
worker ahead of it, whatever is queued in the heavy lane.

**Bounded queues.** At most ``RENDER_MAX_QUEUED`` callers wait for one lane, each at
most ``RENDER_QUEUE_WAIT_SECONDS``; past either a caller gets :class:`BusyError` (a
``too_large`` refusal saying to try again), never a hang. A process that forks gets a
pool of its own.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Literal

from visus import limits
from visus.errors import (
    BusyError,
    InvalidInputError,
    TooLargeError,
    UndecodableError,
    UnsupportedTypeError,
    VisusError,
)
from visus.media._child import ENTRY, FRAME, READY, fitted_from_reply
from visus.media.types import Fitted, Probe, Profile, Region

__all__ = [
    "Lane",
    "decode_in_worker",
    "probe_in_worker",
    "render_in_worker",
    "shutdown",
    "video_in_worker",
]

Lane = Literal["light", "heavy"]

# Starting a worker (interpreter + Pillow, libvips, PDFium, Pygments) is not rendering:
# it has its own, generous bound.
_START_TIMEOUT_SECONDS = 60.0
_ERRORS: dict[str, type[VisusError]] = {
    "TooLargeError": TooLargeError,
    "UndecodableError": UndecodableError,
    "UnsupportedTypeError": UnsupportedTypeError,
    "InvalidInputError": InvalidInputError,
}


class _WorkerDied(Exception):
    """The worker exited (or closed its pipe) before it answered."""


def _bounds() -> dict[str, int | float]:
    """The parent's numeric bounds, as they are now (tests and hosts may lower them)."""
    return {
        k: v
        for k, v in vars(limits).items()
        if k.isupper() and isinstance(v, int | float) and not isinstance(v, bool)
    }


def _mb(n: int) -> str:
    return f"{n / limits.MB:,.0f} MB"


class _Worker:
    """One child process and its pipes."""

    def __init__(self, memory_cap: int) -> None:
        self.memory_cap = memory_cap
        # The worker imports the same visus as we do, wherever that came from.
        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        # The memory cap bounds address space, and glibc reserves a 64 MB malloc arena
        # for every thread that allocates (libvips's PNG writer runs on threads): two
        # arenas keep ~200 MB of reservations that are never used off the budget.
        env.setdefault("MALLOC_ARENA_MAX", "2")
        env.setdefault("VIPS_CONCURRENCY", "1")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", ENTRY, str(memory_cap)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
            env=env,
            close_fds=True,
        )
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.stdin = self.proc.stdin.fileno()
        self.stdout = self.proc.stdout.fileno()
        deadline = time.monotonic() + _START_TIMEOUT_SECONDS
        try:
            ready = self._read(len(READY), deadline)
        except (TimeoutError, _WorkerDied) as e:
            self.kill()
            raise UndecodableError(f"the render worker did not start: {e}") from e
        if ready != READY:
            self.kill()
            raise UndecodableError(f"the render worker did not start (it said {ready[:80]!r})")

    def _read(self, n: int, deadline: float) -> bytes:
        chunks: list[bytes] = []
        while n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            readable, _, _ = select.select([self.stdout], [], [], remaining)
            if not readable:
                raise TimeoutError
            chunk = os.read(self.stdout, min(n, 1 << 20))
            if not chunk:
                raise _WorkerDied(self._exit_status())
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self.stdin, view) :]
        except (BrokenPipeError, ConnectionResetError) as e:
            raise _WorkerDied(self._exit_status()) from e

    def _exit_status(self) -> str:
        try:
            code = self.proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            return "closed its pipe"
        return f"exited with status {code}"

    def send(self, header: dict[str, Any], payload: bytes) -> None:
        raw = json.dumps(header).encode()
        self._write(FRAME.pack(len(raw), len(payload)) + raw)
        self._write(payload)

    def answered_within(self, seconds: float) -> bool:
        """Whether the reply has started within ``seconds`` (nothing is read)."""
        readable, _, _ = select.select([self.stdout], [], [], max(0.0, seconds))
        return bool(readable)

    def receive(self, deadline: float) -> tuple[dict[str, Any], bytes]:
        head_len, body_len = FRAME.unpack(self._read(FRAME.size, deadline))
        reply = json.loads(self._read(head_len, deadline))
        body = self._read(body_len, deadline) if body_len else b""
        if not isinstance(reply, dict):
            raise _WorkerDied("sent a malformed reply")
        return reply, body

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5.0)
        for f in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                if f is not None:
                    f.close()


def _cap(lane: Lane) -> int:
    cap = limits.RENDER_LIGHT_WORKERS if lane == "light" else limits.RENDER_HEAVY_WORKERS
    return max(1, int(cap))


class _Pool:
    """Warm workers by lane: how many each lane runs, keeps idle, and has waiting.

    Each lane keeps its own idle workers (heavy work never takes the light lane's warm
    processes), so at most ``RENDER_LIGHT_WORKERS + RENDER_HEAVY_WORKERS`` processes
    exist. When a running render leaves the light lane (moved on, or stopped), a warm
    replacement is started for the light lane in the background: the next cheap render
    does not wait for an interpreter to start.
    """

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.cond = threading.Condition()
        self.idle: dict[Lane, list[_Worker]] = {"light": [], "heavy": []}
        self.busy: dict[Lane, int] = {"light": 0, "heavy": 0}
        self.waiting: dict[Lane, int] = {"light": 0, "heavy": 0}
        # Light-lane workers being started in the background.
        self.starting = 0
        #: Workers stopped in the middle of a render (a budget ran out, a lane change).
        self.restarts = 0

    @property
    def count(self) -> int:
        """Worker processes alive or being started."""
        return sum(self.busy.values()) + sum(map(len, self.idle.values())) + self.starting

    def _room(self, lane: Lane) -> int:
        held = self.busy[lane] + len(self.idle[lane]) + (self.starting if lane == "light" else 0)
        return _cap(lane) - held

    def acquire(self, lane: Lane, deadline: float) -> _Worker:
        """A worker of ``lane``, waiting until ``deadline`` at most (then BusyError)."""
        cap = int(limits.RENDER_MAX_MEMORY_BYTES)
        stale: list[_Worker] = []
        try:
            with self.cond:
                self._wait_turn(lane, deadline)
                self.busy[lane] += 1
                while True:
                    while self.idle[lane]:
                        worker = self.idle[lane].pop()
                        if worker.alive() and worker.memory_cap == cap:
                            return worker
                        stale.append(worker)
                    # A replacement already on its way is sooner than a start of our own.
                    if lane != "light" or not self.starting or time.monotonic() >= deadline:
                        break
                    self.cond.wait(deadline - time.monotonic())
        finally:
            for worker in stale:
                worker.kill()
        try:
            return _Worker(cap)
        except BaseException:
            self.discard(lane, None)
            raise

    def _wait_turn(self, lane: Lane, deadline: float) -> None:
        if self.busy[lane] < _cap(lane):
            return
        if self.waiting[lane] >= int(limits.RENDER_MAX_QUEUED):
            raise BusyError(
                f"the render workers are busy: {self.waiting[lane]} calls already wait for "
                f"the {lane} lane (limits.RENDER_MAX_QUEUED); try again shortly"
            )
        self.waiting[lane] += 1
        start = time.monotonic()
        try:
            while self.busy[lane] >= _cap(lane):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BusyError(
                        f"waited {time.monotonic() - start:.1f} s for a render worker of the "
                        f"{lane} lane (limits.RENDER_QUEUE_WAIT_SECONDS); the server is busy, "
                        "try again shortly"
                    )
                self.cond.wait(left)
        finally:
            self.waiting[lane] -= 1

    def promote(self) -> bool:
        """Move a running light-lane worker to the heavy lane, if that lane has room."""
        with self.cond:
            if self.busy["heavy"] >= _cap("heavy"):
                return False
            self.busy["light"] -= 1
            self.busy["heavy"] += 1
            # The heavy lane keeps no more processes than its cap.
            surplus = [self.idle["heavy"].pop() for _ in range(max(0, -self._room("heavy")))]
            self.cond.notify_all()
        for worker in surplus:
            worker.kill()
        self._replace_light()
        return True

    def release(self, lane: Lane, worker: _Worker) -> None:
        with self.cond:
            self.busy[lane] -= 1
            keep = self._room(lane) > 0
            if keep:
                self.idle[lane].append(worker)
            self.cond.notify_all()
        if not keep:
            worker.kill()

    def discard(self, lane: Lane, worker: _Worker | None, *, replace: bool = False) -> None:
        """Stop ``worker``; ``replace``: start a warm light-lane one in the background
        (a render stopped to change lanes leaves its lane a worker short)."""
        if worker is not None:
            worker.kill()
        with self.cond:
            self.busy[lane] -= 1
            self.restarts += worker is not None
            self.cond.notify_all()
        if replace:
            self._replace_light()

    def _replace_light(self) -> None:
        with self.cond:
            if self._room("light") <= 0:
                return
            self.starting += 1
        cap = int(limits.RENDER_MAX_MEMORY_BYTES)
        threading.Thread(target=self._start_spare, args=(cap,), daemon=True).start()

    def _start_spare(self, cap: int) -> None:
        try:
            worker: _Worker | None = _Worker(cap)
        except VisusError:
            worker = None
        with self.cond:
            self.starting -= 1
            keep = worker is not None and self._room("light") > 0
            if keep and worker is not None:
                self.idle["light"].append(worker)
            self.cond.notify_all()
        if worker is not None and not keep:
            worker.kill()

    def close(self) -> None:
        with self.cond:
            idle = [w for lane in self.idle.values() for w in lane]
            self.idle = {"light": [], "heavy": []}
        for worker in idle:
            worker.kill()


_POOL_LOCK = threading.Lock()
_POOL: _Pool | None = None


def _pool() -> _Pool:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL.pid != os.getpid():
            # A forked child must not share its parent's pipes.
            _POOL = _Pool()
        return _POOL


def shutdown() -> None:
    """Stop the idle render workers (they are started again on the next render)."""
    with _POOL_LOCK:
        pool = _POOL
    if pool is not None and pool.pid == os.getpid():
        pool.close()


atexit.register(shutdown)


def render_lanes() -> dict[str, dict[str, int]]:
    """What the render lanes hold now, for a server's metrics: per lane its ``cap``
    and the workers ``busy``, ``idle`` and callers ``waiting``; under ``pool``, the
    workers ``restarts`` (stopped mid-render: over a budget, or moved to the heavy lane).

    Example:
        >>> sorted(render_lanes())
        ['heavy', 'light', 'pool']
    """
    with _POOL_LOCK:
        pool = _POOL if _POOL is not None and _POOL.pid == os.getpid() else None
    lanes: dict[str, dict[str, int]] = {}
    for lane in ("light", "heavy"):
        held = (pool.busy[lane], len(pool.idle[lane]), pool.waiting[lane]) if pool else (0, 0, 0)
        lanes[lane] = dict(zip(("busy", "idle", "waiting"), held, strict=True), cap=_cap(lane))
    lanes["pool"] = {"restarts": pool.restarts if pool else 0}
    return lanes


def _region(region: Region | None) -> list[int] | None:
    return None if region is None else region.as_list()


def _profile(profile: Profile) -> dict[str, Any]:
    return {
        "max_edge": profile.max_edge,
        "max_pixels": profile.max_pixels,
        "max_bytes": profile.max_bytes,
        "media_types": sorted(profile.media_types),
    }


def render_in_worker(
    data: bytes,
    *,
    profile: Profile,
    page: int | None,
    offset: int | None,
    limit: int | None,
    name: str | None,
    region: Region | None = None,
    lane: Lane = "light",
    render: bool = True,
) -> Fitted | None:
    """:func:`visus.media.render.render_source` of ``data`` in a worker, under the budget,
    starting in ``lane``. ``render=False`` only decides the type (a recognised document
    is refused as withheld), which opens a PDF: that too is a parse of hostile bytes.

    Returns ``None`` when ``data`` is not a PDF, SVG or text. Raises the same errors as
    the render itself, :class:`TooLargeError` when the render runs past
    ``limits.RENDER_TIME_BUDGET_SECONDS`` or ``limits.RENDER_MAX_MEMORY_BYTES``, and
    :class:`BusyError` when no worker came free in time.
    """
    header: dict[str, Any] = {"kind": "render", "profile": _profile(profile), "page": page}
    header |= {"offset": offset, "limit": limit, "name": name, "region": _region(region)}
    header["render"] = render
    return _result(*_run(header, data, lane, "rendering" if render else "reading the document"))


def probe_in_worker(data: bytes) -> Probe | None:
    """:func:`visus.media.render.probe_document` of ``data`` in a light-lane worker,
    under the same budget and errors as a render (``None``: no PDF, SVG or text)."""
    reply, _ = _run({"kind": "probe"}, data, "light", "reading the document")
    _raise(reply)
    found = reply.get("probe")
    return None if found is None else Probe(**found)


def video_in_worker(data: bytes, request: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
    """A ``video`` request (:mod:`visus.media._child`) in a heavy-lane worker, under
    ``limits.VIDEO_DECODE_SECONDS`` and the workers' memory cap: FFmpeg's demuxing and
    decoding never run in the calling process."""
    header = {"kind": "video", **request}
    budget = float(limits.VIDEO_DECODE_SECONDS)
    reply, body = _run(header, data, "heavy", "decoding the video", budget=budget)
    _raise(reply)
    return reply, body


def decode_in_worker(data: bytes, profile: Profile, region: Region | None = None) -> Fitted:
    """:func:`visus.media.raster.load_raster` of ``data`` (a raster Pillow identified)
    in a heavy-lane worker, under the same budget and errors as a render."""
    request = {"kind": "raster", "profile": _profile(profile), "region": _region(region)}
    fitted = _result(*_run(request, data, "heavy", "decoding the image"))
    if fitted is None:
        raise UndecodableError("the render worker could not identify the image")
    return fitted


def _run(
    header: dict[str, Any], data: bytes, lane: Lane, what: str, *, budget: float | None = None
) -> tuple[dict[str, Any], bytes]:
    """Send one request to a worker of ``lane`` and wait for its reply, moving it to
    the heavy lane after the light lane's slice; ``budget``: its time budget (default
    ``limits.RENDER_TIME_BUDGET_SECONDS``)."""
    pool = _pool()
    header["bounds"] = _bounds()
    limit = "VIDEO_DECODE_SECONDS" if budget is not None else "RENDER_TIME_BUDGET_SECONDS"
    budget = float(limits.RENDER_TIME_BUDGET_SECONDS if budget is None else budget)
    while True:
        worker = pool.acquire(lane, time.monotonic() + float(limits.RENDER_QUEUE_WAIT_SECONDS))
        try:
            worker.send(header, data)
            start = time.monotonic()
            if lane == "light":
                slice_ = min(budget, float(limits.RENDER_LIGHT_SLICE_SECONDS))
                if not worker.answered_within(slice_):
                    if not pool.promote():
                        # The heavy lane is full: stop this render and queue it there.
                        pool.discard(lane, worker, replace=True)
                        lane = "heavy"
                        continue
                    lane = "heavy"
            reply = worker.receive(start + budget)
        except TimeoutError:
            pool.discard(lane, worker)
            raise TooLargeError(
                f"{what} took longer than the {budget:g} s budget (limits.{limit}) and was stopped"
            ) from None
        except _WorkerDied as e:
            pool.discard(lane, worker)
            raise TooLargeError(
                f"the renderer ran out of its {_mb(worker.memory_cap)} memory cap "
                f"(limits.RENDER_MAX_MEMORY_BYTES) or crashed: the render worker {e}"
            ) from None
        except BaseException:
            pool.discard(lane, worker)
            raise
        pool.release(lane, worker)
        return reply


def _raise(reply: dict[str, Any]) -> None:
    if "error" in reply:
        cls = _ERRORS.get(str(reply["error"]), UndecodableError)
        raise cls(str(reply.get("message", "")))


def _result(reply: dict[str, Any], body: bytes) -> Fitted | None:
    _raise(reply)
    fitted = reply.get("fitted")
    if fitted is None:
        return None
    return fitted_from_reply(fitted, body)
