"""Rendering (svg, text, pdf) in a separate process that can really be stopped.

A render can hold a core for minutes (an SVG filter over a huge canvas, a text page of
48k tiny tokens) and no thread can be interrupted inside librsvg, PDFium or FreeType. So
every render runs in a warm worker process (started once, reused) under two bounds
from :mod:`visus.limits`:

- ``RENDER_TIME_BUDGET_SECONDS`` of wall-clock time: past it the worker is killed
  (SIGKILL) and the call raises :class:`TooLargeError` naming the budget;
- ``RENDER_MAX_MEMORY_BYTES`` of address space (``RLIMIT_AS``, set in the child): an
  allocation past it fails there (``MemoryError``, or the renderer aborts and the
  worker dies), which also ends as :class:`TooLargeError` naming the cap.

The protocol is ours and carries no pickles (a worker that handled hostile bytes is not
trusted to hand objects back): a request is a JSON header plus the source bytes, a
reply is a JSON header plus the encoded image. The parent's current bounds travel with
every request, so the worker enforces the same :mod:`visus.limits` values as its parent.

Up to ``RENDER_MAX_WORKERS`` workers run at once; a caller beyond that waits for one to
come free. A process that forks gets a pool of its own.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from visus import limits
from visus.errors import (
    InvalidInputError,
    MediaError,
    TooLargeError,
    UndecodableError,
    UnsupportedTypeError,
    VisusError,
)
from visus.media.types import Fitted, Profile, Region

__all__ = ["render_in_worker", "shutdown"]

# Two big-endian u64: header length, payload length.
_FRAME = struct.Struct(">QQ")
_ENTRY = "import sys; from visus.media._worker import serve; serve(int(sys.argv[1]))"
_READY = b"visus-render-worker-ready\n"
# Starting a worker (interpreter + Pillow, libvips, PDFium, Pygments) is not rendering:
# it has its own, generous bound.
_START_TIMEOUT_SECONDS = 60.0
_ERRORS: dict[str, type[VisusError]] = {
    "TooLargeError": TooLargeError,
    "UndecodableError": UndecodableError,
    "UnsupportedTypeError": UnsupportedTypeError,
    "InvalidInputError": InvalidInputError,
}
_ORPHAN_CHECK_SECONDS = 1.0
_WARM_SVG = (
    b'<svg xmlns="http://www.w3.org/2000/svg" width="8" height="8"><text y="8">w</text></svg>'
)
_FITTED_FIELDS = tuple(f for f in Fitted.__dataclass_fields__ if f != "data")


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


# --- the parent side ---------------------------------------------------------------


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
            [sys.executable, "-c", _ENTRY, str(memory_cap)],
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
            ready = self._read(len(_READY), deadline)
        except (TimeoutError, _WorkerDied) as e:
            self.kill()
            raise UndecodableError(f"the render worker did not start: {e}") from e
        if ready != _READY:
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

    def call(
        self, header: dict[str, Any], payload: bytes, budget: float
    ) -> tuple[dict[str, Any], bytes]:
        raw = json.dumps(header).encode()
        self._write(_FRAME.pack(len(raw), len(payload)) + raw)
        self._write(payload)
        deadline = time.monotonic() + budget
        head_len, body_len = _FRAME.unpack(self._read(_FRAME.size, deadline))
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


class _Pool:
    """Idle warm workers, and how many exist; at most ``RENDER_MAX_WORKERS``."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.cond = threading.Condition()
        self.idle: list[_Worker] = []
        self.count = 0

    def acquire(self) -> _Worker:
        cap = int(limits.RENDER_MAX_MEMORY_BYTES)
        with self.cond:
            while True:
                while self.idle:
                    worker = self.idle.pop()
                    if worker.alive() and worker.memory_cap == cap:
                        return worker
                    worker.kill()
                    self.count -= 1
                if self.count < max(1, int(limits.RENDER_MAX_WORKERS)):
                    self.count += 1
                    break
                self.cond.wait()
        try:
            return _Worker(cap)
        except BaseException:
            self.discard()
            raise

    def release(self, worker: _Worker) -> None:
        with self.cond:
            self.idle.append(worker)
            self.cond.notify()

    def discard(self, worker: _Worker | None = None) -> None:
        if worker is not None:
            worker.kill()
        with self.cond:
            self.count -= 1
            self.cond.notify()

    def close(self) -> None:
        with self.cond:
            idle, self.idle = self.idle, []
            self.count -= len(idle)
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


def render_in_worker(
    data: bytes,
    *,
    profile: Profile,
    page: int | None,
    offset: int | None,
    limit: int | None,
    name: str | None,
    region: Region | None = None,
) -> Fitted | None:
    """:func:`visus.media.render.render_source` of ``data`` in a worker, under the budget.

    Returns ``None`` when ``data`` is not a PDF, SVG or text. Raises the same errors as
    the render itself, and :class:`TooLargeError` when the render runs past
    ``limits.RENDER_TIME_BUDGET_SECONDS`` or ``limits.RENDER_MAX_MEMORY_BYTES``.
    """
    budget = float(limits.RENDER_TIME_BUDGET_SECONDS)
    header = {
        "profile": {
            "max_edge": profile.max_edge,
            "max_pixels": profile.max_pixels,
            "max_bytes": profile.max_bytes,
            "media_types": sorted(profile.media_types),
        },
        "page": page,
        "offset": offset,
        "limit": limit,
        "name": name,
        "region": None if region is None else region.as_list(),
        "bounds": _bounds(),
    }
    pool = _pool()
    worker = pool.acquire()
    try:
        reply, body = worker.call(header, data, budget)
    except TimeoutError:
        pool.discard(worker)
        raise TooLargeError(
            f"rendering took longer than the {budget:g} s budget "
            "(limits.RENDER_TIME_BUDGET_SECONDS) and was stopped"
        ) from None
    except _WorkerDied as e:
        pool.discard(worker)
        raise TooLargeError(
            f"the renderer ran out of its {_mb(worker.memory_cap)} memory cap "
            f"(limits.RENDER_MAX_MEMORY_BYTES) or crashed: the render worker {e}"
        ) from None
    except BaseException:
        pool.discard(worker)
        raise
    pool.release(worker)
    return _result(reply, body)


def _result(reply: dict[str, Any], body: bytes) -> Fitted | None:
    if "error" in reply:
        cls = _ERRORS.get(str(reply["error"]), UndecodableError)
        raise cls(str(reply.get("message", "")))
    fitted = reply.get("fitted")
    if fitted is None:
        return None
    fields = {k: fitted[k] for k in _FITTED_FIELDS}
    if fields["region"] is not None:
        fields["region"] = Region(*fields["region"])
    return Fitted(data=body, **fields)


# --- the child side ----------------------------------------------------------------


def _limit_memory(cap: int) -> None:
    import resource

    # Soft and hard: the render cannot raise its own cap back.
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def _die_with_parent() -> None:
    """Exit when the parent dies mid-render, so no orphan spins on.

    (``PR_SET_PDEATHSIG`` would fire when the *thread* that started us ends, which
    in a thread pool is any time.)
    """
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(_ORPHAN_CHECK_SECONDS)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="visus-render-orphan-watch", daemon=True).start()


def _read_exact(stream: Any, n: int) -> bytes | None:
    data = stream.read(n)
    return data if len(data) == n else None


def serve(memory_cap: int) -> None:
    """The worker's main loop (run by the parent as ``python -c``): one request at a time."""
    # The protocol owns the real stdout; anything a library prints goes to stderr.
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    inp = sys.stdin.buffer
    # Ctrl-C in a terminal reaches the whole process group: the parent handles it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    from visus.media import _vips
    from visus.media._guard import translated
    from visus.media.render import render_source

    # libvips with librsvg allowed and fontconfig fenced to visus's fonts, before
    # anything could start fontconfig (and before the cap: loading it is not a render).
    # Without the shipped fonts it fails again, in words, on the first SVG render.
    with contextlib.suppress(VisusError):
        _vips.svg_engine()
    _limit_memory(memory_cap)
    # Load the fonts and lexers once, before the first budgeted render.
    warm = Profile(64, 64 * 64, 1 << 20)
    with contextlib.suppress(VisusError):
        render_source(
            _WARM_SVG, profile=warm, render=True, page=None, offset=None, limit=None, name=None
        )
        for name in ("w.py", None):  # a lexer by name, and the guess over all lexers
            render_source(
                b"x = 1\n", profile=warm, render=True, page=None, offset=None, limit=None, name=name
            )
    out.write(_READY)  # a few bytes: one write on a pipe
    while True:
        frame = _read_exact(inp, _FRAME.size)
        if frame is None:
            return  # the parent closed the pipe: its process is done with us
        head_len, body_len = _FRAME.unpack(frame)
        raw = _read_exact(inp, head_len)
        data = _read_exact(inp, body_len)
        if raw is None or data is None:
            return
        request = json.loads(raw)
        for key, value in request["bounds"].items():
            if hasattr(limits, key):
                setattr(limits, key, value)
        p = request["profile"]
        profile = Profile(
            p["max_edge"], p["max_pixels"], p["max_bytes"], frozenset(p["media_types"])
        )
        body = b""
        try:
            with translated("source"):
                fitted = render_source(
                    data,
                    profile=profile,
                    render=True,
                    page=request["page"],
                    offset=request["offset"],
                    limit=request["limit"],
                    name=request["name"],
                    region=None if request["region"] is None else Region(*request["region"]),
                )
        except (MediaError, InvalidInputError) as e:
            reply: dict[str, Any] = {"error": type(e).__name__, "message": str(e)}
        except MemoryError:
            reply = {
                "error": "TooLargeError",
                "message": f"the render needs more than its {_mb(memory_cap)} memory cap "
                "(limits.RENDER_MAX_MEMORY_BYTES)",
            }
        else:
            if fitted is None:
                reply = {"fitted": None}
            else:
                reply = {"fitted": {k: getattr(fitted, k) for k in _FITTED_FIELDS}}
                if fitted.region is not None:
                    reply["fitted"]["region"] = fitted.region.as_list()
                body = fitted.data
        raw_reply = json.dumps(reply).encode()
        view = memoryview(_FRAME.pack(len(raw_reply), len(body)) + raw_reply + body)
        while view:
            view = view[out.write(view) or 0 :]
