"""The per-instance ring buffer of frames: bounded by count and by payload bytes.

``append`` gives each frame the next ``seq`` (monotonic per instance, from 1) and
evicts the oldest frames until both bounds hold again; the newest frame always
stays, even when it alone is over the byte budget. A burst of image frames so
turns the ring over fast while a long run of small text frames fits many times
over. ``read`` tells a poller when frames it has not seen were evicted (``gap``).
The rings of one process also share :data:`RINGS` (``limits.RINGS_MAX_BYTES``): past
it, the oldest frames of any ring go first, so many instances hold no more than a few.

Example:
    >>> import asyncio
    >>> from visus.tether.frames import Frame, AssistantDelta
    >>> ring = Ring(max_frames=2)
    >>> for t in "abc":
    ...     _ = asyncio.run(ring.append(Frame(AssistantDelta(t))))
    >>> page = ring.read(0)
    >>> [f.seq for f in page.frames], page.next_seq, page.gap
    ([2, 3], 3, True)
"""

from __future__ import annotations

import asyncio
import itertools
import math
import weakref
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from visus import limits
from visus.tether.frames import Frame, now_ts, payload_size

__all__ = ["RINGS", "Page", "Ring", "RingPool"]


@dataclass(frozen=True, slots=True)
class Page:
    """What a read returns. Pass ``next_seq`` as ``after_seq`` to the next read.

    ``gap`` is true when frames after ``after_seq`` were evicted before this read
    (the poller missed them for good). ``more`` is true when the read stopped at
    ``limit`` or ``max_bytes`` with frames still after ``next_seq``: read again at once.
    """

    frames: tuple[Frame, ...]
    next_seq: int
    gap: bool
    more: bool = False

    def __iter__(self) -> Iterator[Any]:
        """Unpacks as ``frames, next_seq, gap = ring.read(...)``."""
        return iter((self.frames, self.next_seq, self.gap))


class RingPool:
    """The payload bytes of every :class:`Ring` made with it, under ``max_bytes``
    (None: ``limits.RINGS_MAX_BYTES`` at each append): past it, the frame appended
    longest ago in any ring goes first, but the frame just appended stays.

    Example:
        >>> import asyncio
        >>> from visus.tether.frames import Frame, AssistantDelta
        >>> pool = RingPool(max_bytes=40)  # two frames of 16 bytes, not three
        >>> a, b = Ring(pool=pool), Ring(pool=pool)
        >>> for ring in (a, b, a, a):
        ...     _ = asyncio.run(ring.append(Frame(AssistantDelta("x" * 5))))
        >>> len(a), len(b), b.read(0).gap
        (2, 0, True)
    """

    def __init__(self, *, max_bytes: int | None = None) -> None:
        self.max_bytes = max_bytes
        self._rings: weakref.WeakSet[Ring] = weakref.WeakSet()
        self._order = itertools.count()

    def add(self, ring: Ring) -> None:
        self._rings.add(ring)

    def discard(self, ring: Ring) -> None:
        self._rings.discard(ring)

    @property
    def bytes(self) -> int:
        """Payload bytes held by the pool's rings now."""
        return sum(r.bytes for r in list(self._rings))

    def next_order(self) -> int:
        return next(self._order)

    def settle(self, appended: Ring) -> None:
        """Evict the oldest frames of any ring until the pool's bytes fit; the ring
        just ``appended`` to keeps its newest frame (another may be emptied: its
        readers see a ``gap``)."""
        most = limits.RINGS_MAX_BYTES if self.max_bytes is None else self.max_bytes
        rings = list(self._rings)
        total = sum(r.bytes for r in rings)
        while total > most:
            held = [r for r in rings if len(r) > (1 if r is appended else 0)]
            if not held:
                return  # only the newest frame is left
            total -= min(held, key=lambda r: r.oldest_order).evict_oldest()


#: The rings of this process (``visus serve``'s instances).
RINGS = RingPool()


class Ring:
    """Frames of one instance, oldest first, under ``max_frames`` and ``max_bytes``,
    and with the other rings of ``pool`` under its bytes."""

    def __init__(
        self,
        *,
        max_frames: int = limits.RING_MAX_FRAMES,
        max_bytes: int = limits.RING_MAX_BYTES,
        pool: RingPool | None = RINGS,
    ) -> None:
        if max_frames < 1 or max_bytes < 1:
            raise ValueError("a ring holds at least one frame and one byte")
        self.max_frames = max_frames
        self.max_bytes = max_bytes
        self._pool = pool
        if pool is not None:
            pool.add(self)
        # Each frame with its payload bytes and its place in the pool's order.
        self._frames: deque[tuple[Frame, int, int]] = deque()
        self._bytes = 0
        self._last_seq = 0
        self._evicted_upto = 0
        # Readers wait on one future per change, resolved (and replaced) by the next
        # append or close. No lock: the ring lives on one event loop, and a reader
        # cancelled mid-wait (a closed tab, a timeout) leaves nothing behind. An
        # ``asyncio.Condition`` under ``wait_for`` could be left unacquired by such a
        # cancellation, and the instance stopped answering.
        self._changed: asyncio.Future[None] | None = None
        self.closed = False

    def __len__(self) -> int:
        return len(self._frames)

    @property
    def bytes(self) -> int:
        """Payload bytes held now (the JSON of every payload)."""
        return self._bytes

    @property
    def last_seq(self) -> int:
        return self._last_seq

    @property
    def first_seq(self) -> int:
        """Seq of the oldest frame held (``last_seq + 1`` when empty)."""
        return self._frames[0][0].seq if self._frames else self._last_seq + 1

    @property
    def oldest_order(self) -> int:
        """The pool's order of the oldest frame held (-1 when empty)."""
        return self._frames[0][2] if self._frames else -1

    def evict_oldest(self) -> int:
        """Drop the oldest frame (readers after it see a ``gap``); its bytes."""
        old, size, _ = self._frames.popleft()
        self._bytes -= size
        self._evicted_upto = old.seq
        return size

    async def append(self, frame: Frame) -> Frame:
        """Store ``frame`` with the next seq (and a ts if it had none); wake waiters."""
        return self.append_nowait(frame)

    def append_nowait(self, frame: Frame) -> Frame:
        """:meth:`append` for synchronous callers on the ring's event loop (waiters are
        woken too)."""
        self._last_seq += 1
        stored = replace(frame, seq=self._last_seq, ts=frame.ts or now_ts())
        size = payload_size(stored.payload)
        order = self._pool.next_order() if self._pool is not None else 0
        self._frames.append((stored, size, order))
        self._bytes += size
        while len(self._frames) > 1 and (
            len(self._frames) > self.max_frames or self._bytes > self.max_bytes
        ):
            self.evict_oldest()
        if self._pool is not None:
            self._pool.settle(self)
        self._wake()
        return stored

    def _wake(self) -> None:
        changed, self._changed = self._changed, None
        if changed is not None and not changed.done():
            changed.set_result(None)

    def _next_change(self) -> asyncio.Future[None]:
        """The future the next append or close resolves (shared by every waiter)."""
        loop = asyncio.get_running_loop()
        if self._changed is None or self._changed.get_loop() is not loop:
            self._changed = loop.create_future()
        return self._changed

    def read(
        self,
        after_seq: int = 0,
        *,
        session: str | None = None,
        limit: int | None = None,
        max_bytes: int | None = None,
    ) -> Page:
        """Frames with ``seq > after_seq`` (of one session when given), at most ``limit``
        frames and at most ``max_bytes`` of payload (the first frame always comes, so a
        reader makes progress whatever its budget; ``next_seq`` stops before the rest).

        A poller ahead of the ring (``after_seq`` past the last seq, as after a
        server restart) is answered from the start with ``gap`` set.
        """
        gap = after_seq < self._evicted_upto
        if after_seq > self._last_seq:
            after_seq, gap = 0, True
        cap = math.inf if limit is None else max(limit, 0)
        byte_cap = math.inf if max_bytes is None else max_bytes
        out: list[Frame] = []
        total = 0
        next_seq = after_seq
        start = max(0, after_seq - self.first_seq + 1)
        more = False
        for i in range(start, len(self._frames)):
            frame, size, _ = self._frames[i]
            mine = session is None or frame.session == session
            if len(out) >= cap or (mine and out and total + size > byte_cap):
                more = True
                break
            next_seq = frame.seq
            if mine:
                out.append(frame)
                total += size
        return Page(tuple(out), max(next_seq, after_seq), gap, more)

    async def close(self) -> None:
        """Mark the ring closed and wake every waiter (their reads return at once)."""
        self.closed = True
        if self._pool is not None:
            self._pool.discard(self)  # a deleted instance's frames count no more
        self._wake()

    async def wait_read(
        self,
        after_seq: int = 0,
        *,
        session: str | None = None,
        limit: int | None = None,
        max_bytes: int | None = None,
        timeout: float = 0.0,
    ) -> Page:
        """:meth:`read`, waiting up to ``timeout`` seconds for a matching frame."""
        page = self.read(after_seq, session=session, limit=limit, max_bytes=max_bytes)
        if page.frames or page.gap or timeout <= 0 or self.closed:
            return page
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return page
            # asyncio.wait neither cancels the shared future on a timeout nor keeps
            # anything of this reader once it returns or is cancelled.
            await asyncio.wait((self._next_change(),), timeout=remaining)
            page = self.read(after_seq, session=session, limit=limit, max_bytes=max_bytes)
            if page.frames or page.gap or self.closed:
                return page
