"""What a tether reader holds on the server: SSE streams and long-poll answers.

A reader that does not read must not grow the server. So:

- **Streams are counted**: at most ``limits.SSE_MAX_STREAMS_PER_INSTANCE`` per instance
  and ``SSE_MAX_STREAMS`` per server (every client of a server holds its one token, so
  per token is per server); more are refused 429 (:class:`StreamSlots`).
- **Nothing is copied whole per reader**: an event, or a poll's answer, is sent in
  pieces of ``limits.HTTP_SEND_PIECE_BYTES`` cut from the frame's own data
  (:func:`~visus.tether.frames.frame_pieces`, a stored frame's bytes), and
  :class:`visus.budget.BodyBudget` hands the client each piece only once it took the
  one before (a reader that stops for ``HTTP_SEND_STALL_SECONDS`` is dropped). Forty
  slow readers of a ring holding a 25 MB frame took 1.3 GB (each its own copy of the
  frame, and the copy queued whole in its socket's buffer).

Example:
    >>> slots = StreamSlots()
    >>> with slots.take("i-1"):
    ...     slots.open
    1
    >>> slots.open
    0
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from visus import limits
from visus.tether.frames import Frame, frame_pieces
from visus.tether.instances import BusyError
from visus.tether.ring import Page
from visus.tether.shared import RawFrame, RawPage
from visus.tether.stopping import mark_stopping

__all__ = [
    "SSE_KEEPALIVE_SECONDS",
    "Slot",
    "StreamSlots",
    "events",
    "page_pieces",
    "pieces",
    "stop_streams",
]

#: Seconds between SSE keep-alive comments when no frame arrives.
SSE_KEEPALIVE_SECONDS = 15.0


class StreamSlots:
    """The SSE streams open on one server, per instance and in all."""

    def __init__(self) -> None:
        self.open = 0
        self._per_instance: Counter[str] = Counter()

    def check(self, instance_id: str) -> None:
        """Raise :class:`BusyError` (a 429) when no stream of ``instance_id`` may open."""
        per = int(limits.SSE_MAX_STREAMS_PER_INSTANCE)
        if self._per_instance[instance_id] >= per:
            raise BusyError(
                f"instance {instance_id}: {per} streams are open already "
                "(limits.SSE_MAX_STREAMS_PER_INSTANCE); close one, or poll"
            )
        if self.open >= limits.SSE_MAX_STREAMS:
            raise BusyError(
                f"{self.open} streams are open on this server (limits.SSE_MAX_STREAMS); "
                "close one, or poll"
            )

    def take(self, instance_id: str) -> Slot:
        """One stream of ``instance_id``, held until the slot is closed (its ``with``
        block ends); :class:`BusyError` past a bound."""
        self.check(instance_id)
        self.open += 1
        self._per_instance[instance_id] += 1
        return Slot(self, instance_id)

    def _give_back(self, instance_id: str) -> None:
        self.open -= 1
        self._per_instance[instance_id] -= 1
        if self._per_instance[instance_id] <= 0:
            del self._per_instance[instance_id]


class Slot(contextlib.AbstractContextManager["Slot"]):
    """One open stream of :class:`StreamSlots`; given back once, when it closes."""

    def __init__(self, slots: StreamSlots, instance_id: str) -> None:
        self._slots: StreamSlots | None = slots
        self._instance_id = instance_id

    def close(self) -> None:
        slots, self._slots = self._slots, None
        if slots is not None:
            slots._give_back(self._instance_id)

    def __exit__(self, *exc: object) -> None:
        self.close()


def pieces(frame: Frame | RawFrame) -> Iterator[bytes]:
    """A frame's one encoding in pieces of at most ``HTTP_SEND_PIECE_BYTES``, none of
    them a copy of the whole frame."""
    size = max(1, int(limits.HTTP_SEND_PIECE_BYTES))
    if isinstance(frame, RawFrame):
        view = memoryview(frame.body)
        for at in range(0, len(view), size):
            yield bytes(view[at : at + size])
    else:
        yield from frame_pieces(frame, size)


def page_pieces(page: Page | RawPage) -> Iterator[bytes]:
    """A poll answer in pieces: ``b"".join`` of them is
    :func:`visus.tether.server.encode_page` of ``page``."""
    yield b'{"frames":['
    frames: tuple[Frame | RawFrame, ...] = page.frames
    for i, frame in enumerate(frames):
        if i:
            yield b","
        yield from pieces(frame)
    tail = json.dumps(
        {"next_seq": page.next_seq, "gap": page.gap, "more": page.more}, separators=(",", ":")
    )
    yield b"]," + tail[1:].encode()


async def events(
    ring: Any,
    cursor: int,
    session: str | None,
    closed: Callable[[], bool],
    slot: Callable[[], Slot] | None = None,
) -> AsyncIterator[bytes]:
    """The SSE stream of ``ring`` from ``cursor``: each frame an event (``id`` its seq),
    a ``gap`` event when frames were evicted unseen, a keep-alive comment when nothing
    came for ``SSE_KEEPALIVE_SECONDS``. ``slot`` takes the stream's
    :class:`StreamSlots` slot when the stream starts; it is held until it ends, however
    it ends (a stream never started holds none)."""
    with slot() if slot is not None else contextlib.nullcontext():
        yield b"retry: 1000\n\n"
        while not closed() and not ring.closed:
            page: Page | RawPage = await ring.wait_read(
                cursor, session=session, limit=100, timeout=SSE_KEEPALIVE_SECONDS
            )
            if page.gap:
                note = json.dumps({"after_seq": cursor, "first_seq": ring.first_seq})
                yield b"event: gap\ndata: " + note.encode() + b"\n\n"
            for f in page.frames:
                yield b"id: %d\nevent: %s\ndata: " % (f.seq, f.type.encode())
                for piece in pieces(f):
                    yield piece
                yield b"\n\n"
            if not page.frames and not page.gap:
                yield b": keep-alive\n\n"
            cursor = page.next_seq


def stop_streams(app: Any) -> None:
    """End every open SSE stream of ``app`` (thread-safe; call when the server is asked
    to exit, before it waits for connections to close: clients resume with
    Last-Event-ID once it is back): the tether streams' rings close, and requests
    wrapped in :class:`~visus.tether.stopping.DisconnectOnStop` (``/mcp``) read
    ``http.disconnect``. Streams of other servers in this process go on."""
    loop: asyncio.AbstractEventLoop | None = getattr(app.state, "loop", None)
    if loop is None or loop.is_closed():
        return

    async def close() -> None:
        mark_stopping(app.state)
        for inst in getattr(app.state, "registry", ()):  # the proxy has none
            await inst.ring.close()

    loop.call_soon_threadsafe(lambda: loop.create_task(close()))
