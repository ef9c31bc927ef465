"""The process-wide memory budget: decoded pixels and request bodies share one bound.

One hostile input used to be enough to take a server's memory: six interlaced 100 MP
PNGs decoded side by side held 2.85 GB in one process, and one 250 MB body sent to the
proxy took 1.3 GB. So what a process holds for its callers is counted against
:data:`MEMORY` (``limits.MEMORY_BUDGET_BYTES``):

- every raster decode in the calling process reserves its estimated buffers before a
  pixel is decoded (:mod:`visus.media`; bigger decodes go to the render worker, whose
  own address space is capped);
- every HTTP request body counts from its first byte until the request is answered
  (:class:`BodyBudget`, an ASGI middleware on ``visus serve`` and ``visus proxy``).

A caller that does not fit waits, up to ``limits.MEMORY_BUDGET_WAIT_SECONDS``, for
others to finish; then it is refused with :class:`~visus.errors.BusyError` (a
``too_large`` refusal saying to try again). One reservation larger than the whole
budget is refused at once with :class:`~visus.errors.TooLargeError`.

Example:
    >>> budget = MemoryBudget(total=100)
    >>> with budget.reserve(60, what="a decode"):
    ...     budget.in_use
    60
    >>> budget.in_use
    0
    >>> budget.reserve(200, what="a decode")
    Traceback (most recent call last):
    ...
    visus.errors.TooLargeError: a decode needs 200 B, more than the whole memory budget \
of 100 B (limits.MEMORY_BUDGET_BYTES)
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from types import TracebackType
from typing import Any

from visus import limits
from visus.errors import BusyError, TooLargeError

__all__ = ["MEMORY", "BodyBudget", "MemoryBudget", "Reservation"]

_Scope = MutableMapping[str, Any]
_Message = MutableMapping[str, Any]
_Receive = Callable[[], Awaitable[_Message]]
_Send = Callable[[_Message], Awaitable[None]]
_App = Callable[[_Scope, _Receive, _Send], Awaitable[None]]


def _size(n: int) -> str:
    if n >= limits.MB:
        return f"{n / limits.MB:,.0f} MB"
    return f"{n} B"


class Reservation:
    """Bytes held against a :class:`MemoryBudget` until :meth:`release` (or the end of
    its ``with`` block). :meth:`grow` and :meth:`grow_async` hold more."""

    __slots__ = ("_budget", "bytes", "what")

    def __init__(self, budget: MemoryBudget, what: str) -> None:
        self._budget = budget
        self.what = what
        self.bytes = 0

    def grow(self, extra: int, *, wait: float | None = None) -> None:
        """Hold ``extra`` more bytes, waiting up to ``wait`` seconds (default
        ``limits.MEMORY_BUDGET_WAIT_SECONDS``) for them."""
        self._budget._acquire(self, extra, wait)

    async def grow_async(self, extra: int, *, wait: float | None = None) -> None:
        """:meth:`grow` for the event loop: the wait does not hold a thread."""
        await self._budget._acquire_async(self, extra, wait)

    def release(self) -> None:
        """Give every byte back (idempotent)."""
        self._budget._release(self)

    def __enter__(self) -> Reservation:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


class MemoryBudget:
    """A byte budget shared by threads and the event loop; see the module docstring.

    ``total`` fixes the budget; ``None`` reads ``limits.MEMORY_BUDGET_BYTES`` at every
    reservation (so an operator or a test may change it at run time).
    """

    def __init__(self, total: int | None = None) -> None:
        self._total = total
        self._lock = threading.Lock()
        self._used = 0
        self._peak = 0
        # Each waiter is woken (and checks again) whenever bytes come back.
        self._waiters: list[Callable[[], None]] = []

    @property
    def total(self) -> int:
        return int(limits.MEMORY_BUDGET_BYTES) if self._total is None else self._total

    @property
    def in_use(self) -> int:
        return self._used

    @property
    def peak(self) -> int:
        """The most bytes held at once since the budget was made (or :meth:`reset_peak`)."""
        return self._peak

    def reset_peak(self) -> None:
        with self._lock:
            self._peak = self._used

    def reserve(self, nbytes: int, *, what: str, wait: float | None = None) -> Reservation:
        """Hold ``nbytes`` for ``what`` (a thread may block up to ``wait`` seconds)."""
        reservation = Reservation(self, what)
        reservation.grow(nbytes, wait=wait)
        return reservation

    async def reserve_async(
        self, nbytes: int, *, what: str, wait: float | None = None
    ) -> Reservation:
        """:meth:`reserve` for the event loop."""
        reservation = Reservation(self, what)
        await reservation.grow_async(nbytes, wait=wait)
        return reservation

    # --- the bookkeeping -----------------------------------------------------------

    def _check_total(self, reservation: Reservation, extra: int) -> None:
        need = reservation.bytes + extra
        if need > self.total:
            raise TooLargeError(
                f"{reservation.what} needs {_size(need)}, more than the whole memory "
                f"budget of {_size(self.total)} (limits.MEMORY_BUDGET_BYTES)"
            )

    def _take_or_wait(self, reservation: Reservation, extra: int, wake: Callable[[], None]) -> bool:
        """Hold ``extra`` more bytes if they fit (True); else (False) ``wake`` is called
        when bytes come back. One lock: no release can slip between the two."""
        with self._lock:
            if self._used + extra <= self.total:
                self._used += extra
                self._peak = max(self._peak, self._used)
                reservation.bytes += extra
                return True
            self._waiters.append(wake)
            return False

    def _busy(self, reservation: Reservation, extra: int, waited: float) -> BusyError:
        return BusyError(
            f"{reservation.what} waited {waited:.1f} s for {_size(extra)} of the "
            f"process's memory budget ({_size(self._used)} of {_size(self.total)} in use "
            "by other decodes and request bodies, limits.MEMORY_BUDGET_BYTES); "
            "the server is busy, try again shortly"
        )

    def _wait_limit(self, reservation: Reservation, extra: int, wait: float | None) -> float:
        self._check_total(reservation, extra)
        return float(limits.MEMORY_BUDGET_WAIT_SECONDS if wait is None else wait)

    def _acquire(self, reservation: Reservation, extra: int, wait: float | None) -> None:
        if extra <= 0:
            return
        limit = self._wait_limit(reservation, extra, wait)
        deadline = time.monotonic() + limit
        woken = threading.Event()
        while not self._take_or_wait(reservation, extra, woken.set):
            try:
                if not woken.wait(max(0.0, deadline - time.monotonic())):
                    raise self._busy(reservation, extra, limit)
            finally:
                self._forget(woken.set)
            woken.clear()

    async def _acquire_async(
        self, reservation: Reservation, extra: int, wait: float | None
    ) -> None:
        if extra <= 0:
            return
        limit = self._wait_limit(reservation, extra, wait)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit
        woken = asyncio.Event()

        def wake() -> None:
            loop.call_soon_threadsafe(woken.set)

        while not self._take_or_wait(reservation, extra, wake):
            try:
                await asyncio.wait_for(woken.wait(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                raise self._busy(reservation, extra, limit) from None
            finally:
                self._forget(wake)
            woken.clear()

    def _forget(self, waiter: Callable[[], None]) -> None:
        with self._lock:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    def _release(self, reservation: Reservation) -> None:
        with self._lock:
            held = reservation.bytes
            self._used -= held
            reservation.bytes = 0
            waiters = list(self._waiters)
        for wake in waiters:
            # RuntimeError: a waiter whose event loop has closed.
            with contextlib.suppress(RuntimeError):
                wake()
        if held >= limits.MEMORY_TRIM_BYTES:
            _give_back()


#: The one budget of this process.
MEMORY = MemoryBudget()


class BodyBudget:
    """ASGI middleware: a request's body counts against :data:`MEMORY` from its first
    byte until the response is sent, so many large bodies at once wait their turn (or
    are refused: 503 with ``Retry-After``, or 413 for a body past the whole budget)
    instead of taking the process's memory.

    A declared ``Content-Length`` is reserved before a byte is read; a body without one
    grows its reservation as it arrives. ``error_body(code, message)`` shapes the JSON
    error of the app it wraps (tether's, or the proxy's provider-like one).
    """

    def __init__(
        self,
        app: _App,
        *,
        error_body: Callable[[str, str], dict[str, Any]] | None = None,
        budget: MemoryBudget | None = None,
    ) -> None:
        self.app = app
        self.error_body = error_body or _tether_error
        self.budget = budget or MEMORY

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        reservation = Reservation(self.budget, "a request body")
        try:
            declared = _content_length(scope)
            if declared:
                await reservation.grow_async(declared)
        except TooLargeError as e:  # BusyError too
            await self._refuse(e, send)
            return
        cut: list[TooLargeError] = []
        started = False

        async def guarded_send(message: _Message) -> None:
            nonlocal started
            if cut and not started:
                return  # the app's answer to a body we cut off; ours follows
            started = True
            await send(message)

        try:
            await self.app(scope, _metered(receive, reservation, cut), guarded_send)
        except Exception:
            if not cut or started:
                raise
        finally:
            reservation.release()
        if cut and not started:
            await self._refuse(cut[0], send)

    async def _refuse(self, error: TooLargeError, send: _Send) -> None:
        busy = isinstance(error, BusyError)
        status = 503 if busy else 413
        body = json.dumps(self.error_body("busy" if busy else "too_large", str(error))).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        if busy:
            headers.append((b"retry-after", b"%d" % max(1, int(limits.MEMORY_BUDGET_WAIT_SECONDS))))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _give_back() -> None:
    """Hand the heap's free memory back to the system (glibc only; elsewhere nothing),
    after a reservation of at least ``limits.MEMORY_TRIM_BYTES`` is released.

    A large body is read in 64 KB chunks that land on the malloc heap; freed, they stay
    in the process (a 250 MB request left ~440 MB resident) until the heap is trimmed.
    Decodes alike: twelve views of a large GIF left 1.87 GB resident after they ended.
    """
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _tether_error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "limit": "MEMORY_BUDGET_BYTES"}}


def _content_length(scope: _Scope) -> int:
    for key, value in scope.get("headers", ()):
        if key.lower() == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() else 0
    return 0


def _metered(receive: _Receive, reservation: Reservation, cut: list[TooLargeError]) -> _Receive:
    """``receive`` that grows ``reservation`` to what the body has brought so far.

    Past the budget (a body with no length, or longer than it said, while the budget
    is full) the refusal goes into ``cut`` and the app sees the client leave: it stops
    reading, and nothing more of the body is held.
    """
    received = 0

    async def receive_metered() -> _Message:
        nonlocal received
        if cut:
            return {"type": "http.disconnect"}
        message = await receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > reservation.bytes:
                try:
                    await reservation.grow_async(received - reservation.bytes)
                except TooLargeError as e:  # BusyError too
                    cut.append(e)
                    return {"type": "http.disconnect"}
        return message

    return receive_metered
