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

__all__ = ["BODY_CAP", "MEMORY", "BodyBudget", "MemoryBudget", "Reservation"]

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


#: Scope key a gate sets to cap a request's body (``limits.PUBLIC_MAX_BODY_BYTES`` on a
#: route served without the token).
BODY_CAP = "visus.body_cap"


class _Refused(Exception):
    """Why a request was cut off: the answer :class:`BodyBudget` gives instead."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class _Stalled(Exception):
    """The client stopped taking its answer: it is dropped."""


def _refusal(error: TooLargeError) -> _Refused:
    busy = isinstance(error, BusyError)
    return _Refused(503 if busy else 413, "busy" if busy else "too_large", str(error))


class BodyBudget:
    """ASGI middleware: what a request holds counts against :data:`MEMORY`, from its
    first body byte until its answer is delivered, and a client cannot hold it longer
    than the bytes it really sends or takes.

    - **Its body**, reserved as it arrives (a ``Content-Length`` alone reserves
      nothing: eight sockets declaring 128 MB and sending one byte held the whole
      budget), refused 413 at once when it declares more than the whole budget or than
      the route's cap (:data:`BODY_CAP`, set by a gate), and cut (408) when it has not
      arrived within ``HTTP_BODY_SECONDS`` plus a second per
      ``HTTP_BODY_MIN_BYTES_PER_SECOND`` of it. Past the budget a request waits, then
      503 with ``Retry-After``.
    - **Its answer**, reserved while it is being delivered and sent in pieces of
      ``HTTP_SEND_PIECE_BYTES``, each once the client has taken the one before: a
      client that does not read holds one piece in the send buffer, not a whole answer
      (forty slow SSE readers of a 25 MB frame took 1.3 GB). A client that takes nothing
      for ``HTTP_SEND_STALL_SECONDS`` is dropped.

    ``error_body(code, message)`` shapes the JSON error of the app it wraps (tether's,
    or the proxy's provider-like one).
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
        declared = _content_length(scope)
        try:
            _check_declared(declared, scope.get(BODY_CAP), self.budget)
        except _Refused as e:
            await self._refuse(e, send)
            return
        reservation = Reservation(self.budget, "a request body")
        body = _Metered(receive, reservation, declared, scope.get(BODY_CAP))
        answer = _Delivery(send, self.budget)
        try:
            await self.app(scope, body.receive, answer.send)
        except _Stalled:
            return  # the client left its answer unread: its connection is closed
        except _Refused as e:  # no room for the answer, before it started
            await self._refuse(e, send)
            return
        except Exception:
            if body.cut is None or answer.started:
                raise
        finally:
            reservation.release()
            answer.release()
        if body.cut is not None and not answer.started:
            await self._refuse(body.cut, send)

    async def _refuse(self, error: _Refused, send: _Send) -> None:
        body = json.dumps(self.error_body(error.code, str(error))).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        if error.status == 503:
            headers.append((b"retry-after", b"%d" % max(1, int(limits.MEMORY_BUDGET_WAIT_SECONDS))))
        headers.append((b"connection", b"close"))
        await send({"type": "http.response.start", "status": error.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _check_declared(declared: int, cap: int | None, budget: MemoryBudget) -> None:
    if cap is not None and declared > cap:
        raise _Refused(
            413,
            "too_large",
            f"a request body here may be at most {cap:,} bytes without the token "
            f"(limits.PUBLIC_MAX_BODY_BYTES); this one declares {declared:,}",
        )
    if declared > budget.total:
        raise _Refused(
            413,
            "too_large",
            f"a request body of {_size(declared)} is more than the whole memory budget of "
            f"{_size(budget.total)} (limits.MEMORY_BUDGET_BYTES)",
        )


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
    limit = {"timeout": "HTTP_BODY_SECONDS"}.get(code, "MEMORY_BUDGET_BYTES")
    if "PUBLIC_MAX_BODY_BYTES" in message:
        limit = "PUBLIC_MAX_BODY_BYTES"
    return {"error": {"code": code, "message": message, "limit": limit}}


def _content_length(scope: _Scope) -> int:
    for key, value in scope.get("headers", ()):
        if key.lower() == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() else 0
    return 0


class _Metered:
    """The app's ``receive``: the body's bytes reserved as they arrive, cut (``cut``
    set, the app told the client left) past the route's cap, past the budget, or past
    the body's deadline; nothing more of it is read or held then."""

    def __init__(
        self, receive: _Receive, reservation: Reservation, declared: int, cap: int | None
    ) -> None:
        self._receive = receive
        self._reservation = reservation
        self._declared = declared
        self._cap = cap
        self._received = 0
        self._start = time.monotonic()
        self._whole = False  # the last part of the body came: no deadline after it
        self.cut: _Refused | None = None

    def _deadline(self) -> float:
        size = max(self._declared, self._received)
        rate = float(limits.HTTP_BODY_MIN_BYTES_PER_SECOND)
        return self._start + float(limits.HTTP_BODY_SECONDS) + size / rate

    async def receive(self) -> _Message:
        if self.cut is not None:
            return {"type": "http.disconnect"}
        if self._whole:
            return await self._receive()  # a wait for the client to leave (a stream)
        try:
            message = await asyncio.wait_for(
                self._receive(), max(0.0, self._deadline() - time.monotonic())
            )
        except TimeoutError:
            waited = time.monotonic() - self._start
            return self._cut_off(
                _Refused(
                    408,
                    "timeout",
                    f"the request body was not sent in time: {self._received:,} bytes in "
                    f"{waited:.0f} s (limits.HTTP_BODY_SECONDS, HTTP_BODY_MIN_BYTES_PER_SECOND)",
                )
            )
        if message["type"] != "http.request":
            return message
        self._whole = not message.get("more_body", False)
        self._received += len(message.get("body", b""))
        if self._cap is not None and self._received > self._cap:
            return self._cut_off(_Refused(413, "too_large", _over_cap(self._cap)))
        extra = self._received - self._reservation.bytes
        if extra > 0:
            try:
                await self._reservation.grow_async(extra)
            except TooLargeError as e:  # BusyError too
                return self._cut_off(_refusal(e))
        return message

    def _cut_off(self, why: _Refused) -> _Message:
        self.cut = why
        self._reservation.release()
        return {"type": "http.disconnect"}


def _over_cap(cap: int) -> str:
    return (
        f"a request body here may be at most {cap:,} bytes without the token "
        "(limits.PUBLIC_MAX_BODY_BYTES)"
    )


class _Delivery:
    """The app's ``send``: each body message reserved while it is delivered, in pieces
    the client must take one by one (within ``HTTP_SEND_STALL_SECONDS`` each). The
    answer's start waits for its first body, so an answer the budget cannot hold is a
    503 rather than a cut-off stream."""

    def __init__(self, send: _Send, budget: MemoryBudget) -> None:
        self._send = send
        self._reservation = Reservation(budget, "an answer being sent")
        self._start: _Message | None = None
        self.started = False

    async def send(self, message: _Message) -> None:
        if message["type"] == "http.response.start":
            self._start = message
            return
        if message["type"] != "http.response.body":
            await self._flush_start()
            await self._send(message)
            return
        body = message.get("body", b"")
        if len(body) > limits.HTTP_SEND_PIECE_BYTES:
            try:
                await self._reservation.grow_async(len(body))
            except TooLargeError as e:  # BusyError too
                # Not started: BodyBudget answers 503 instead; else the client is dropped.
                raise (_Stalled() if self.started else _refusal(e)) from None
        try:
            await self._deliver(message, body)
        finally:
            self._reservation.release()

    async def _deliver(self, message: _Message, body: bytes) -> None:
        piece = max(1, int(limits.HTTP_SEND_PIECE_BYTES))
        more = bool(message.get("more_body", False))
        view = memoryview(body)
        for at in range(0, max(1, len(body)), piece):
            last = at + piece >= len(body)
            out: _Message = {
                "type": "http.response.body",
                "body": bytes(view[at : at + piece]),
                "more_body": more or not last,
            }
            await self._flush_start()
            await self._timed(out)

    async def _flush_start(self) -> None:
        if not self.started and self._start is not None:
            await self._timed(self._start)
            self.started = True

    async def _timed(self, message: _Message) -> None:
        try:
            await asyncio.wait_for(self._send(message), float(limits.HTTP_SEND_STALL_SECONDS))
        except TimeoutError:
            raise _Stalled from None

    def release(self) -> None:
        self._reservation.release()
