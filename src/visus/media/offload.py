"""Media work off the event loop, on threads of media's own.

A decode or a render may wait: for a render worker (up to
``limits.RENDER_QUEUE_WAIT_SECONDS``, then its budget) or for room in the process's
memory budget. On the event loop's default executor (``min(32, cores + 4)`` threads: 6
on a 2-core server) six such waits took every thread, and everything else a server runs
in threads (listing sessions, reading a blob) waited behind them: six pasted scan bombs
made a session list take 86.8 s. So async callers hand media work to :func:`offload`: a
pool of ``limits.MEDIA_THREADS`` threads that runs nothing else. Every wait in there has
its own deadline, so its threads come back.

Example:
    >>> import asyncio
    >>> from visus.media import Profile, load
    >>> p = Profile(max_edge=64, max_pixels=64 * 64, max_bytes=100_000)
    >>> asyncio.run(offload(load, b"hi\\n", profile=p)).source_kind
    'text'
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from visus import limits

__all__ = ["offload"]

P = ParamSpec("P")
T = TypeVar("T")

_LOCK = threading.Lock()
_EXECUTOR: tuple[int, ThreadPoolExecutor] | None = None


def _executor() -> ThreadPoolExecutor:
    global _EXECUTOR
    with _LOCK:
        if _EXECUTOR is None or _EXECUTOR[0] != os.getpid():
            # A forked child gets threads of its own.
            pool = ThreadPoolExecutor(
                max_workers=int(limits.MEDIA_THREADS), thread_name_prefix="visus-media"
            )
            _EXECUTOR = (os.getpid(), pool)
        return _EXECUTOR[1]


async def offload(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)`` on media's threads, awaited (``asyncio.to_thread``'s
    contract: context variables carried over; cancelling the await leaves the call to
    finish on its own)."""
    loop = asyncio.get_running_loop()
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    return await loop.run_in_executor(_executor(), call)
