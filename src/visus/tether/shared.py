"""Tether on a shared store: several ``visus serve`` replicas, one database.

With a shared store (:class:`visus.store.SharedRingStore`, PostgreSQL) an instance's
ring lives in the database, not in the process: :class:`SharedRing` appends and reads
frames there (seqs stay per instance, gap-free; a frame committed on replica A wakes
the long polls and SSE streams of replica B through LISTEN/NOTIFY).

Ingress does not run the turn itself: it appends the ``user.message`` and queues a
turn in the same transaction. The :class:`TurnWorker` of every replica claims queued
turns (``FOR UPDATE SKIP LOCKED``; a session's turns one at a time, in order), runs
them and renews its lease while they run. When a replica dies mid-turn its lease runs
out; the next worker to claim the turn fails it with an ``error`` frame
(``turn_interrupted``) rather than run it again: the dead replica may already have
recorded the user message and called the model, and a second answer must never
appear. Every frame of a turn is written only while its worker still owns the turn.

Example:
    >>> # store = PostgresStore(url); registry = Registry(folder, factory, store=store)
    >>> # worker = TurnWorker(registry, store); await worker.start()
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from visus import limits
from visus.errors import NotFoundError, VisusError
from visus.store import ClaimedTurn, FramePage, NewFrame, RingStats, SharedRingStore
from visus.tether.frames import (
    ErrorPayload,
    Frame,
    decode_frame,
    encode_around_seq,
    encode_frame,
    new_msg_id,
    now_ts,
    payload_size,
)
from visus.tether.instance import STOPPED, Instance, Reply, TurnLostError
from visus.tether.runner import ImageIn, InstanceConfig, TurnRunner

__all__ = [
    "Instances",
    "RawFrame",
    "RawPage",
    "SharedInstance",
    "SharedRing",
    "TurnWorker",
    "frame_bytes",
    "reply_id",
]

log = logging.getLogger(__name__)

#: Turns one replica runs at once unless told otherwise (``[store] max_turns``).
_MAX_TURNS = 4 * limits.TETHER_MAX_PENDING_TURNS

_TYPE = re.compile(rb'"type":"([a-z.]+)"')


@dataclass(frozen=True, slots=True)
class RawFrame:
    """A frame as the store holds it: already encoded, never decoded to be re-sent."""

    seq: int
    session: str
    body: bytes

    @property
    def type(self) -> str:
        found = _TYPE.search(self.body, 0, 64)
        return found.group(1).decode() if found else "unknown"


@dataclass(frozen=True, slots=True)
class RawPage:
    """A read of a shared ring (the same fields as :class:`~visus.tether.ring.Page`)."""

    frames: tuple[RawFrame, ...]
    next_seq: int
    gap: bool
    more: bool = False


def reply_id(instance_id: str, turn: int) -> str:
    """The msg_id of the frames answering turn ``turn``: the same on every replica.

    Example:
        >>> reply_id("i-1", 7) == reply_id("i-1", 7) != reply_id("i-1", 8)
        True
    """
    return hashlib.sha256(f"{instance_id}:{turn}".encode()).hexdigest()[:32]


def frame_bytes(frame: Frame | RawFrame) -> bytes:
    """The frame's one JSON encoding (stored frames are sent as they were stored)."""
    return frame.body if isinstance(frame, RawFrame) else encode_frame(frame)


class SharedRing:
    """One instance's ring in a shared store; the same surface as the in-memory Ring.

    ``last_seq``, ``first_seq`` and ``len()`` are what this replica last saw
    (:meth:`refresh` reads them again).
    """

    def __init__(self, store: SharedRingStore, instance_id: str) -> None:
        self.store = store
        self.instance_id = instance_id
        self.closed = False
        self.last_seq = 0
        self.first_seq = 1
        self._frames = 0
        self.bytes = 0

    def __len__(self) -> int:
        return self._frames

    async def refresh(self) -> RingStats:
        """Read the ring's figures again (and the instance's turns in flight)."""
        stats = await self.store.ring_stats(self.instance_id)
        self.last_seq, self.first_seq = stats.last_seq, stats.first_seq
        self._frames, self.bytes = stats.frames, stats.bytes
        return stats

    async def append(
        self, frame: Frame, *, turn: int | None = None, finish: bool = False, queue: bool = False
    ) -> Frame:
        """Store ``frame`` with the next seq; TurnLostError if ``turn`` is not ours."""
        (stored,) = await self.append_many((frame,), turn=turn, finish=finish, queue=queue)
        return stored

    async def append_many(
        self,
        frames: Sequence[Frame],
        *,
        turn: int | None = None,
        finish: bool = False,
        queue: bool = False,
    ) -> list[Frame]:
        """Store ``frames`` with the next seqs, in one write; ``finish`` ends ``turn``
        with them. TurnLostError if ``turn`` is not this replica's any more."""
        ts = now_ts()
        dated = [f if f.ts else replace(f, ts=ts) for f in frames]
        new = [NewFrame(f.session, payload_size(f.payload), *encode_around_seq(f)) for f in dated]
        first = await self.store.append_frames(
            self.instance_id,
            new,
            turn=turn,
            finish=finish,
            queue=queue,
            request_id=dated[0].msg_id if queue else None,
        )
        if first is None:
            raise TurnLostError(f"turn {turn} of instance {self.instance_id} was taken over")
        self.last_seq = max(self.last_seq, first + len(dated) - 1)
        return [replace(f, seq=first + i) for i, f in enumerate(dated)]

    def _page(self, page: FramePage, max_bytes: int | None = None) -> RawPage:
        self.first_seq = page.first_seq
        if page.frames:
            self.last_seq = max(self.last_seq, page.frames[-1].seq)
        frames = [RawFrame(f.seq, f.session, f.body) for f in page.frames]
        if max_bytes is not None:
            # As the in-process ring: the first frame always, then while they fit.
            total, kept = 0, 0
            for f in frames:
                total += len(f.body)
                if kept and total > max_bytes:
                    break
                kept += 1
            if kept < len(frames):
                return RawPage(tuple(frames[:kept]), frames[kept - 1].seq, page.gap, True)
        return RawPage(tuple(frames), page.next_seq, page.gap)

    async def read(
        self, after_seq: int = 0, *, session: str | None = None, limit: int | None = None
    ) -> RawPage:
        page = await self.store.read_frames(
            self.instance_id, after_seq, session=session, limit=limit
        )
        return self._page(page)

    async def wait_read(
        self,
        after_seq: int = 0,
        *,
        session: str | None = None,
        limit: int | None = None,
        max_bytes: int | None = None,
        timeout: float = 0.0,
    ) -> RawPage:
        page = await self.store.wait_frames(
            self.instance_id,
            after_seq,
            session=session,
            limit=limit,
            timeout=timeout,
            closed=lambda: self.closed,
        )
        return self._page(page, max_bytes)

    async def close(self) -> None:
        self.closed = True
        self.store.wake(self.instance_id)


class SharedInstance(Instance):
    """An instance whose ring and turns live in a shared store: ingress queues the turn
    and whichever replica's :class:`TurnWorker` claims it runs it."""

    def __init__(
        self,
        config: InstanceConfig,
        runner: TurnRunner,
        store: SharedRingStore,
        kick: Callable[[], None],
    ) -> None:
        super().__init__(config, runner, SharedRing(store, config.id))
        self.store = store
        self._kick = kick
        self._pending = 0

    @property
    def pending(self) -> int:
        """Turns queued or running on any replica (as of the last :meth:`refresh`)."""
        return self._pending

    async def refresh(self) -> None:
        ring = self.ring
        assert isinstance(ring, SharedRing)
        self._pending = (await ring.refresh()).pending  # one query for both

    async def turns_in_flight(self, session: str) -> list[str]:
        """The msg_ids of ``session``'s turns queued or running on any replica."""
        return await self.store.open_turns(self.config.id, session)

    async def cancel_turn(self, frame: Frame, target: str) -> Frame:
        """Stop the turn answering ``target`` on whichever replica runs it (or before any
        does), then append ``frame`` (the ``turn.cancel``).

        A queued turn ends here with its ``cancelled`` error frame; a running one is
        flagged and its replica's :class:`TurnWorker` cancels it and writes that frame.
        """
        state = await self.store.stop_turn(self.config.id, frame.session, target)
        if state is None:
            raise NotFoundError(
                f"no turn in flight for msg_id {target!r} in session {frame.session!r} "
                "(it may have finished already)"
            )
        stored: Frame = await self.ring.append(frame)
        if state == "queued":
            note = Frame(
                ErrorPayload("cancelled", STOPPED), frame.session, new_msg_id(), reply_to=target
            )
            await self.ring.append(note)
        self._kick()  # the session's next turn may be claimable now
        return stored

    async def accept(self, frame: Frame, images: tuple[ImageIn, ...]) -> Frame:
        del images  # they travel in the stored frame, to whichever replica runs the turn
        stored: Frame = await self.ring.append(frame, queue=True)
        self._pending += 1
        self._kick()
        return stored


class Instances(Protocol):
    """Where a worker finds the instance a claimed turn belongs to (the server's
    :class:`~visus.tether.instances.Registry`)."""

    def get(self, instance_id: str) -> Instance: ...

    async def find(self, instance_id: str) -> Instance: ...

    def forget(self, instance_id: str) -> None: ...


class TurnWorker:
    """Claims and runs the turns of a shared store, at most ``concurrency`` at once.

    It wakes on a queued-turn notification, and every ``lease / 3`` seconds to renew
    its leases and look for turns whose replica died.
    """

    def __init__(
        self,
        registry: Instances,
        store: SharedRingStore,
        *,
        concurrency: int | None = None,
        lease_seconds: float | None = None,
    ) -> None:
        self.registry = registry
        self.store = store
        #: Turns run here at once: ``concurrency``, else the store's ``max_turns``.
        self.concurrency = concurrency or getattr(store, "max_turns", None) or _MAX_TURNS
        self.tick = (lease_seconds or float(getattr(store, "lease_seconds", 15.0))) / 3
        self._kick = asyncio.Event()
        self._running: dict[asyncio.Task[None], tuple[str, int, str]] = {}
        #: (instance id, turn seq) a client asked to stop, while their task runs here.
        self._stopped: set[tuple[str, int]] = set()
        self._loop_task: asyncio.Task[None] | None = None
        self._stopping = False

    async def start(self) -> None:
        await self.store.start()
        self.store.on_turn_queued(self._kick.set)
        self.store.on_instance_deleted(self.registry.forget)
        self.store.on_turn_stopped(self._stop)
        self._loop_task = asyncio.create_task(self._loop(), name="visus-turn-worker")

    def kick(self) -> None:
        """Look for claimable turns now (ingress calls it after queueing one)."""
        self._kick.set()

    @property
    def alive(self) -> bool:
        """The claiming loop runs (readiness: a replica whose worker died takes no turns)."""
        return self._loop_task is not None and not self._loop_task.done()

    @property
    def running(self) -> int:
        """Turns running on this replica now."""
        return len(self._running)

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        renew_at = loop.time() + self.tick
        while not self._stopping:
            self._kick.clear()  # before claiming: a turn queued meanwhile sets it again
            try:
                await self._claim()
                if loop.time() >= renew_at:
                    if self._running:  # nothing to renew while idle
                        # A stop whose notification this replica missed (listener reconnect).
                        for instance_id, seq in await self.store.renew_leases():
                            self._stop(instance_id, seq)
                    renew_at = loop.time() + self.tick
            except asyncio.CancelledError:
                raise
            except Exception:  # a lost connection must not stop this replica's worker
                log.exception("turn worker: claiming or renewing failed; retrying")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), max(0.05, renew_at - loop.time()))

    async def _claim(self) -> None:
        """Take as many turns as there are free slots, in one query per batch."""
        while (free := self.concurrency - len(self._running)) > 0:
            claimed = await self.store.claim_turns(free)
            for turn in claimed:
                task = asyncio.create_task(self._run(turn))
                self._running[task] = (turn.instance_id, turn.seq, turn.session)
                task.add_done_callback(self._done)
            if len(claimed) < free:
                return

    def _stop(self, instance_id: str, seq: int) -> None:
        """Cancel the task running turn ``seq`` of ``instance_id`` here, if any."""
        for task, (iid, turn, _) in self._running.items():
            if (iid, turn) == (instance_id, seq) and not task.done():
                self._stopped.add((iid, turn))
                task.cancel()

    def _done(self, task: asyncio.Task[None]) -> None:
        key = self._running.pop(task, None)
        if key is not None:
            self._stopped.discard(key[:2])
        self._kick.set()  # a slot is free, and the session's next turn may be claimable

    async def _run(self, claimed: ClaimedTurn) -> None:
        try:
            inst = await self.registry.find(claimed.instance_id)
        except NotFoundError:
            return  # deleted meanwhile: its turns went with it
        ring = inst.ring
        assert isinstance(ring, SharedRing)
        try:
            request = decode_frame(json.loads(claimed.request), types=frozenset({"user.message"}))
        except (VisusError, ValueError) as e:
            why = f"the stored request cannot be read: {e}"
            await _fail(ring, claimed.session, "", claimed.seq, "turn_failed", why)
            return
        msg = request.frame.msg_id
        if claimed.expired:
            if claimed.stopped:  # a stop was asked before its replica died: honour it
                await _fail(ring, claimed.session, msg, claimed.seq, "cancelled", STOPPED)
                return
            log.warning(
                "turn %s of instance %s: its replica died; finishing it here",
                claimed.seq,
                inst.config.id,
            )

        async def emit(frames: Sequence[Frame], final: bool) -> None:
            await ring.append_many(frames, turn=claimed.seq, finish=final)

        # The same reply msg_id on every replica that runs this turn: a resumed answer
        # continues the one its client was reading.
        reply = Reply(claimed.session, reply_id(claimed.instance_id, claimed.seq), msg)
        try:
            await inst.run_request(
                request.frame, request.images, emit, reply=reply, resume=claimed.expired
            )
        except TurnLostError as e:
            log.warning("%s; its answer is left to that replica", e)
        except asyncio.CancelledError:
            if (claimed.instance_id, claimed.seq) not in self._stopped:
                raise  # this replica is shutting down: aclose fails the turn
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            await _fail(ring, claimed.session, msg, claimed.seq, "cancelled", STOPPED)

    async def aclose(self) -> None:
        """Stop claiming; fail the turns still running here (an ``error`` frame each)."""
        self._stopping = True
        self._kick.set()
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._loop_task
        running = dict(self._running)
        for task in running:
            task.cancel()
        for task, (instance_id, seq, session) in running.items():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            why = "the server answering this turn shut down; send it again"
            with contextlib.suppress(Exception):
                ring = self.registry.get(instance_id).ring
                await _fail(ring, session, "", seq, "turn_interrupted", why)


async def _fail(
    ring: SharedRing, session: str, reply_to: str, turn: int, code: str, why: str
) -> None:
    """End ``turn`` with an ``error`` frame (if it is still ours)."""
    note = Frame(ErrorPayload(code, why), session, new_msg_id(), reply_to=reply_to)
    with contextlib.suppress(TurnLostError):
        await ring.append(note, turn=turn, finish=True)
