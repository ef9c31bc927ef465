"""A turn's frames on their way out: streamed text joined into fewer frames.

A model streams its answer in many small pieces; one ``assistant.delta`` frame each
would be one ring append each (on PostgreSQL one transaction each). A
:class:`DeltaWriter` holds the text that arrives within
:data:`~visus.limits.TETHER_DELTA_WINDOW_SECONDS` of the first unsent piece (or until
:data:`~visus.limits.TETHER_DELTA_MAX_BYTES` of it) and sends it as one delta; a
turn's other frames (its ``assistant.done``, an ``error``) take the text still held
with them in the same write. A phase's status frame can be held the same way
(:meth:`DeltaWriter.hold`): a model that answers at once sends its status, text and
``assistant.done`` in one write. Order is kept (one write at a
time, in call order), so a client sees the same frames, fewer of them, at most one
window later.

Example:
    >>> import asyncio
    >>> from visus.tether.frames import AssistantDone, Frame
    >>> sent = []
    >>> async def emit(frames, final): sent.append([f.type for f in frames])
    >>> async def turn():
    ...     out = DeltaWriter(emit, lambda p: Frame(p, "s", "m"))
    ...     for piece in ("The ", "cat ", "sat."):
    ...         await out.delta(piece)
    ...     await out.send(Frame(AssistantDone("The cat sat."), "s", "m"), final=True)
    >>> asyncio.run(turn())
    >>> sent
    [['assistant.delta', 'assistant.done']]
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeAlias

from visus import limits
from visus.tether.frames import AssistantDelta, Frame, Payload

__all__ = ["DeltaWriter", "Emit"]

#: Where a turn's frames go: ``emit(frames, final)``, in order, in one write;
#: ``final``: the last of them ends the turn.
Emit: TypeAlias = Callable[[Sequence[Frame], bool], Awaitable[None]]


class DeltaWriter:
    """Joins one turn's streamed text into delta frames, by time and size.

    ``frame(payload)`` makes the turn's frames (its session, msg_id and reply_to). A
    failed background write (the turn was taken over, the database went away) is
    raised by the next :meth:`delta` or :meth:`send`.
    """

    def __init__(
        self,
        emit: Emit,
        frame: Callable[[Payload], Frame],
        *,
        window: float = limits.TETHER_DELTA_WINDOW_SECONDS,
        max_bytes: int = limits.TETHER_DELTA_MAX_BYTES,
    ) -> None:
        self._emit = emit
        self._frame = frame
        self.window = window
        self.max_bytes = max_bytes
        #: Text pieces and held frames, in call order (text runs become one delta each).
        self._held: list[str | Frame] = []
        self._size = 0
        self._lock = asyncio.Lock()
        #: The task waiting out the window; None while nothing waits (or it is writing).
        self._timer: asyncio.Task[None] | None = None
        self._failed: BaseException | None = None

    async def delta(self, text: str) -> None:
        """Hold ``text``; it leaves within the window, or now past ``max_bytes``."""
        self._raise_failure()
        if not text:
            return
        self._held.append(text)
        self._size += len(text.encode())
        if self._size >= self.max_bytes:
            self._cancel_timer()
            await self._write(())
        elif self._timer is None:
            self._timer = asyncio.create_task(self._after_window())

    async def hold(self, frame: Frame) -> None:
        """Hold ``frame`` (a status) after the text held so far; it leaves with them
        within the window, or with the next :meth:`send`."""
        self._raise_failure()
        self._held.append(frame)
        if self._timer is None:
            self._timer = asyncio.create_task(self._after_window())

    async def send(self, *frames: Frame, final: bool = False) -> None:
        """Write the held text (as one delta) and ``frames`` after it, in one write."""
        self._raise_failure()
        self._cancel_timer()
        await self._write(frames, final)

    async def aclose(self) -> None:
        """Drop held text (the turn ended without its last frame: stopped, shut down)
        and wait for a write in flight, so whatever the caller writes next comes after."""
        self._cancel_timer()
        self._held, self._size = [], 0
        async with self._lock:
            pass

    def _flushed(self) -> list[Frame]:
        """The held pieces as frames: each run of text one delta, held frames as held."""
        out: list[Frame] = []
        text: list[str] = []
        for piece in self._held:
            if isinstance(piece, str):
                text.append(piece)
                continue
            if text:
                out.append(self._frame(AssistantDelta("".join(text))))
                text = []
            out.append(piece)
        if text:
            out.append(self._frame(AssistantDelta("".join(text))))
        return out

    def _raise_failure(self) -> None:
        if self._failed is not None:
            raise self._failed

    def _cancel_timer(self) -> None:
        # Only ever cancelled while it sleeps: it clears itself before it writes.
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def _after_window(self) -> None:
        await asyncio.sleep(self.window)
        self._timer = None
        try:
            await self._write(())
        except Exception as e:  # raised to the turn at its next write
            self._failed = e

    async def _write(self, frames: Sequence[Frame], final: bool = False) -> None:
        async with self._lock:
            out = [*self._flushed(), *frames]
            self._held, self._size = [], 0
            if out:
                await self._emit(out, final)
