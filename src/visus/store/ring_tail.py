"""The newest frames of each instance a replica knows, so its own streams read them
without a database round trip.

A replica appends a turn's frames and, a moment later, the SSE stream or long poll
reading that instance on the same replica wakes and reads them back. The tail keeps
what this process appended or read, gap-free per instance: a read after a seq the tail
holds is answered from memory. The tail never claims to know more than it does:

- it covers ``start..last`` with no gap; a read from before ``start`` goes to the
  database (it may be a gap, or frames another replica wrote);
- "nothing newer" is answered only while the frame notifications say nothing newer
  was committed (``heard``, the highest seq a ``visus_frames`` notification named),
  and only to a reader that then waits for the next notification (a read that does
  not wait goes to the database: read-your-writes across replicas);
- it is trusted only while the listener is connected: :meth:`RingTails.clear` when
  it is lost, since notifications may have been missed.

Bounded: :data:`~visus.limits.PG_TAIL_FRAMES` frames and
:data:`~visus.limits.PG_TAIL_BYTES` per instance (a bigger frame, a user message
with its images, is not kept: the tail starts again after it), and
:data:`~visus.limits.PG_TAIL_INSTANCES` instances, the least recently fed dropped.

Example:
    >>> from visus.store.base import StoredFrame
    >>> tails = RingTails()
    >>> tails.add("i1", [StoredFrame(7, "s", b"{7}"), StoredFrame(8, "s", b"{8}")])
    >>> [f.seq for f in tails.page("i1", 6, session=None, cap=10, waiting=False).frames]
    [7, 8]
    >>> tails.page("i1", 8, session=None, cap=10, waiting=True).frames  # nothing newer
    ()
    >>> tails.heard("i1", 9)  # another replica committed seq 9: only the database has it
    >>> tails.page("i1", 8, session=None, cap=10, waiting=True) is None
    True
    >>> tails.page("i1", 3, session=None, cap=10, waiting=False) is None  # before the tail
    True
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from visus import limits
from visus.store.base import FramePage, StoredFrame

__all__ = ["RingTails"]


@dataclass
class _Tail:
    """Frames ``start..last`` of one instance, gap-free (``last = start - 1``: none)."""

    start: int
    frames: deque[StoredFrame] = field(default_factory=deque)
    bytes: int = 0
    #: The ring's first seq as the database last said (pages report it).
    first_seq: int = 1

    @property
    def last(self) -> int:
        return self.start + len(self.frames) - 1

    def push(self, frame: StoredFrame) -> None:
        if len(frame.body) > limits.PG_TAIL_FRAME_BYTES:  # not kept: start after it
            self.frames.clear()
            self.start, self.bytes = frame.seq + 1, 0
            return
        self.frames.append(frame)
        self.bytes += len(frame.body)
        while len(self.frames) > limits.PG_TAIL_FRAMES or self.bytes > limits.PG_TAIL_BYTES:
            self.bytes -= len(self.frames.popleft().body)
            self.start += 1


class RingTails:
    """Per instance, the newest frames this process appended or read (see the module)."""

    def __init__(self) -> None:
        self._tails: dict[str, _Tail] = {}
        self._heard: dict[str, int] = {}

    def add(self, instance_id: str, frames: Sequence[StoredFrame], first_seq: int = 0) -> None:
        """``frames`` (gap-free, ascending) were committed; ``first_seq``: the ring's
        first seq, when a database read said it."""
        if not frames:
            return
        tail = self._tails.pop(instance_id, None)  # re-inserted: the newest fed
        if tail is None or frames[0].seq > tail.last + 1:
            tail = _Tail(frames[0].seq, first_seq=tail.first_seq if tail else 1)
        for frame in frames:
            if frame.seq == tail.last + 1:
                tail.push(frame)
        if first_seq:
            tail.first_seq = first_seq
        self._keep(instance_id, tail)

    def up_to(self, instance_id: str, last_seq: int, first_seq: int) -> None:
        """The database said the ring ends at ``last_seq`` (a read that found nothing
        newer): a tail that knows less starts again there."""
        tail = self._tails.pop(instance_id, None)
        if tail is None or tail.last != last_seq:
            tail = _Tail(last_seq + 1)
        tail.first_seq = first_seq
        self._keep(instance_id, tail)

    def _keep(self, instance_id: str, tail: _Tail) -> None:
        self._tails[instance_id] = tail
        while len(self._tails) > limits.PG_TAIL_INSTANCES:
            del self._tails[next(iter(self._tails))]

    def heard(self, instance_id: str, seq: int) -> None:
        """A notification: frames up to ``seq`` of ``instance_id`` were committed. Kept
        for every instance (an int each), with a tail or not: a notification can arrive
        before the append it reports returns to this process."""
        if seq > self._heard.get(instance_id, 0):
            self._heard[instance_id] = seq

    def forget(self, instance_id: str) -> None:
        self._tails.pop(instance_id, None)
        self._heard.pop(instance_id, None)

    def clear(self) -> None:
        """Trust nothing known so far (the listener lost its connection)."""
        self._tails.clear()
        self._heard.clear()

    def page(
        self, instance_id: str, after_seq: int, *, session: str | None, cap: int, waiting: bool
    ) -> FramePage | None:
        """The frames after ``after_seq`` (of ``session``), at most ``cap``, if the tail
        can answer for them; None: ask the database. ``waiting``: the reader waits for
        the next notification when the page is empty, so "nothing newer" may be said."""
        tail = self._tails.get(instance_id)
        if tail is None or cap <= 0 or after_seq < tail.start - 1 or after_seq > tail.last:
            return None
        frames: list[StoredFrame] = []
        for f in tail.frames:
            if f.seq > after_seq and (session is None or f.session == session):
                frames.append(f)
                if len(frames) >= cap:
                    return FramePage(tuple(frames), f.seq, False, tail.first_seq)
        if not frames and (not waiting or self._heard.get(instance_id, 0) > tail.last):
            return None
        return FramePage(tuple(frames), tail.last, False, tail.first_seq)
