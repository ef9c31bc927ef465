"""The tether ring and the turn claims in PostgreSQL (async, on the serving loop).

One connection LISTENs:

- ``visus_frames`` (payload ``<instance>:<seq>``) wakes long polls and SSE streams of
  every replica when a frame commits (no busy polling);
- ``visus_turns`` wakes the turn workers when a user message is queued;
- ``visus_instances`` (payload the id) tells replicas an instance was deleted;
- ``visus_stops`` (payload ``<instance>:<seq>``) tells the replica running a turn that
  a client asked it to stop.

Seqs: an append locks the instance's row (``UPDATE ... RETURNING last_seq``), so
seqs are gap-free and commit in order; a reader never sees seq n+1 before n. An append
is one call of the ``visus_append`` function (schema v4): a batch of frames, the
turn-ownership check, eviction, queueing and the NOTIFY in one round trip. Every
other call here is one statement too (autocommit), but a stop (two, in a transaction).

Turns: a ``user.message`` append also queues a turn row. A replica claims the oldest
claimable turn with ``FOR UPDATE SKIP LOCKED`` (a session's turns run one at a time,
in order) and holds it under a lease it renews; a turn whose lease ran out (its
replica died) is claimable again, flagged ``expired``. Every frame of a turn is
appended only while the appender still owns it, so a turn never answers twice.

Example:
    >>> # ring = PgRing(Database(url, pool_size=4), replica="r0", lease_seconds=15)
    >>> # await ring.start(); await ring.claim_turn()
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Literal

from visus import limits
from visus.errors import NotFoundError, StoreError
from visus.store.base import ClaimedTurn, FramePage, NewFrame, RingStats, StoredFrame
from visus.store.pg_conn import Database
from visus.store.ring_tail import RingTails

try:
    import psycopg
except ImportError as e:  # pragma: no cover - the extra is missing
    raise ImportError(
        "the PostgreSQL store needs psycopg: pip install -e '.[postgres]' in the checkout"
    ) from e

__all__ = ["DEFAULT_LEASE_SECONDS", "PgRing"]

log = logging.getLogger(__name__)

#: How long a replica owns a claimed turn without renewing it.
DEFAULT_LEASE_SECONDS = 15.0

#: What the listener hears: frames appended, turns queued, instances deleted, stops.
_CHANNELS = ("visus_frames", "visus_turns", "visus_instances", "visus_stops")


def _cap(limit: int | None) -> int:
    """The most frames one read returns."""
    return limits.RING_MAX_FRAMES if limit is None else max(limit, 0)


class PgRing:
    """:class:`~visus.store.base.SharedRingStore` on one database (``replica`` names
    this process in the turn claims)."""

    def __init__(
        self,
        db: Database,
        *,
        replica: str,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        max_frames: int = limits.RING_MAX_FRAMES,
        max_bytes: int = limits.RING_MAX_BYTES,
    ) -> None:
        self.db = db
        self.replica = replica
        self.lease_seconds = lease_seconds
        self.max_frames = max_frames
        self.max_bytes = max_bytes
        self._listener: asyncio.Task[None] | None = None
        self._events: dict[str, asyncio.Event] = {}
        self._turn_callbacks: list[Callable[[], None]] = []
        self._delete_callbacks: list[Callable[[str], None]] = []
        self._stop_callbacks: list[Callable[[str, int], None]] = []
        self._closing = False
        #: What this process appended or read, for its own streams (see ring_tail).
        self._tails = RingTails()
        #: Bumped whenever the listener (re)connects or is lost: a read or append begun
        #: in an earlier epoch does not feed the tails (notifications may have been
        #: missed in between); -1 while not listening.
        self._epoch = -1
        self._epochs = 0

    async def start(self) -> None:
        """Open the async pool and start listening (call once, on the serving loop)."""
        if self._listener is not None:
            return
        await self.db.start()
        self._listener = asyncio.create_task(self._listen(), name="visus-store-listen")

    async def _listen(self) -> None:
        while not self._stopping():
            try:
                conn = await psycopg.AsyncConnection.connect(self.db.url, autocommit=True)
                async with conn:
                    for channel in _CHANNELS:
                        await conn.execute(f"LISTEN {channel}")
                    self._listening(True)
                    self._wake_all()  # anything committed while we were not listening
                    async for note in conn.notifies():
                        self._dispatch(note.channel, note.payload)
            except asyncio.CancelledError:
                self._listening(False)
                raise
            except Exception as e:
                self._listening(False)
                if self._stopping():
                    return
                log.warning("store listener lost its connection (%s); reconnecting", e)
                self._wake_all()
                await asyncio.sleep(0.5)

    def _listening(self, on: bool) -> None:
        """A new epoch: what the tails knew is dropped (notifications may be lost)."""
        self._tails.clear()
        self._epochs += 1
        self._epoch = self._epochs if on else -1

    def _stopping(self) -> bool:
        return self._closing

    def _dispatch(self, channel: str, payload: str) -> None:
        if channel == "visus_frames":
            instance_id, _, seq = payload.rpartition(":")
            if seq.isdigit():
                self._tails.heard(instance_id, int(seq))
            self._wake(instance_id)
        elif channel == "visus_turns":
            for cb in self._turn_callbacks:
                cb()
        elif channel == "visus_instances":
            self._tails.forget(payload)
            for dcb in self._delete_callbacks:
                dcb(payload)
            self._wake(payload)
        elif channel == "visus_stops":
            instance_id, _, seq = payload.rpartition(":")
            if seq.isdigit():
                for scb in self._stop_callbacks:
                    scb(instance_id, int(seq))

    def wake(self, instance_id: str) -> None:
        """Wake this process's waiters on ``instance_id`` (its ring was closed)."""
        self._wake(instance_id)

    def _wake(self, instance_id: str) -> None:
        event = self._events.pop(instance_id, None)
        if event is not None:
            event.set()

    def _wake_all(self) -> None:
        events, self._events = self._events, {}
        for event in events.values():
            event.set()
        for cb in self._turn_callbacks:
            cb()

    def on_turn_queued(self, callback: Callable[[], None]) -> None:
        self._turn_callbacks.append(callback)

    def on_instance_deleted(self, callback: Callable[[str], None]) -> None:
        self._delete_callbacks.append(callback)

    def on_turn_stopped(self, callback: Callable[[str, int], None]) -> None:
        self._stop_callbacks.append(callback)

    async def append_frames(
        self,
        instance_id: str,
        frames: Sequence[NewFrame],
        *,
        turn: int | None = None,
        finish: bool = False,
        queue: bool = False,
        request_id: str | None = None,
    ) -> int | None:
        """One round trip: ``visus_append`` (schema v4) does the rest in the database."""
        if not frames:
            raise ValueError("append_frames: no frames")
        what = f"cannot append a frame to instance {instance_id!r}"
        epoch = self._epoch
        try:
            async with self.db.aconn(what) as conn:
                cur = await conn.execute(
                    "SELECT visus_append(%s, %s::text[], %s::integer[], %b::bytea[], %b::bytea[], "
                    "%s::bigint, %s, %s, %s, %s::text, %s, %s)",
                    (
                        instance_id,
                        [f.session for f in frames],
                        [f.size for f in frames],
                        [f.head for f in frames],
                        [f.tail for f in frames],
                        turn,
                        self.replica,
                        finish,
                        queue,
                        request_id,
                        self.max_frames,
                        self.max_bytes,
                    ),
                )
                row = await cur.fetchone()
        except StoreError as e:
            if isinstance(e.__cause__, psycopg.errors.NoDataFound):
                raise NotFoundError(f"instance {instance_id!r} not found") from e
            raise
        if row is None or row[0] is None:
            return None
        first = int(row[0])
        if epoch >= 0 and epoch == self._epoch:
            stored = [
                StoredFrame(first + i, f.session, f.head + str(first + i).encode() + f.tail)
                for i, f in enumerate(frames)
            ]
            self._tails.add(instance_id, stored)
            self._wake(instance_id)  # this replica's streams read them now, from memory
        return first

    async def read_frames(
        self, instance_id: str, after_seq: int, *, session: str | None, limit: int | None
    ) -> FramePage:
        cap = _cap(limit)
        epoch = self._epoch
        # One statement: the instance's counters and the page (none when it is ahead).
        async with self.db.aconn(f"cannot read the ring of instance {instance_id!r}") as conn:
            cur = await conn.execute(
                "SELECT i.last_seq, i.evicted_upto, f.seq, f.session, f.body "
                "FROM visus_instances i LEFT JOIN LATERAL ("
                "  SELECT seq, session, body FROM visus_frames WHERE instance_id = i.id"
                "  AND seq > (CASE WHEN %(after)s > i.last_seq THEN 0 ELSE %(after)s END)"
                "  AND (%(session)s::text IS NULL OR session = %(session)s)"
                "  ORDER BY seq LIMIT %(cap)s) f ON true "
                "WHERE i.id = %(id)s ORDER BY f.seq",
                {"after": after_seq, "session": session, "cap": cap, "id": instance_id},
                binary=True,
            )
            rows = await cur.fetchall()
        if not rows:
            raise NotFoundError(f"instance {instance_id!r} not found")
        last_seq, evicted = int(rows[0][0]), int(rows[0][1])
        gap = after_seq < evicted
        if after_seq > last_seq:  # a poller ahead of the ring: from the start
            after_seq, gap = 0, True
        frames = tuple(
            StoredFrame(int(r[2]), str(r[3]), bytes(r[4])) for r in rows if r[2] is not None
        )
        if limit is not None and len(frames) >= cap:
            next_seq = frames[-1].seq if frames else after_seq
        else:
            next_seq = max(last_seq, frames[-1].seq if frames else 0, after_seq)
        if epoch >= 0 and epoch == self._epoch:
            if session is None and frames:
                self._tails.add(instance_id, frames, evicted + 1)
            elif not frames and not gap:
                self._tails.up_to(instance_id, last_seq, evicted + 1)
        return FramePage(frames, next_seq, gap, evicted + 1)

    async def wait_frames(
        self,
        instance_id: str,
        after_seq: int,
        *,
        session: str | None,
        limit: int | None,
        timeout: float,
        closed: Callable[[], bool] = lambda: False,
    ) -> FramePage:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            # Take the wake-up before reading: a frame committed after the read sets it.
            event = self._events.setdefault(instance_id, asyncio.Event())
            cap = _cap(limit)
            waiting = deadline - loop.time() > 0 and not closed() and not self._closing
            page = self._tails.page(
                instance_id, after_seq, session=session, cap=cap, waiting=waiting
            )
            if page is None:
                page = await self.read_frames(instance_id, after_seq, session=session, limit=limit)
            remaining = deadline - loop.time()
            if page.frames or page.gap or remaining <= 0 or closed() or self._closing:
                return page
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), remaining)
            after_seq = page.next_seq if session is not None else after_seq

    async def ping(self) -> None:
        """One round trip to the database (a replica's readiness probe); StoreError if
        it cannot be reached."""
        async with self.db.aconn("cannot reach the store") as conn:
            await conn.execute("SELECT 1")

    async def ring_stats(self, instance_id: str) -> RingStats:
        async with self.db.aconn(f"cannot read the ring of instance {instance_id!r}") as conn:
            cur = await conn.execute(
                "SELECT last_seq, evicted_upto, ring_frames, ring_bytes, (SELECT count(*) "
                "FROM visus_turns t WHERE t.instance_id = i.id AND t.state <> 'done') "
                "FROM visus_instances i WHERE id = %s",
                (instance_id,),
            )
            row = await cur.fetchone()
        if row is None:
            raise NotFoundError(f"instance {instance_id!r} not found")
        last, evicted, frames, nbytes, pending = (int(x) for x in row)
        first = last + 1 if frames == 0 else max(evicted + 1, last - frames + 1)
        return RingStats(last, first, frames, nbytes, pending)

    async def claim_turns(self, limit: int) -> list[ClaimedTurn]:
        """Up to ``limit`` of the oldest claimable turns, now ours: queued ones whose
        session has no earlier open turn (so at most one per session), or running ones
        whose owner's lease ran out (``expired``)."""
        async with self.db.aconn("cannot claim a turn") as conn:
            cur = await conn.execute(
                """
                UPDATE visus_turns SET state = 'running', owner = %(me)s,
                    lease_until = now() + make_interval(secs => %(lease)s),
                    attempts = attempts + 1,
                    taken_over = (visus_turns.state = 'running')
                WHERE (instance_id, seq) IN (
                    SELECT t.instance_id, t.seq FROM visus_turns t
                    WHERE (t.state = 'running' AND t.lease_until < now())
                       OR (t.state = 'queued' AND NOT EXISTS (
                            SELECT 1 FROM visus_turns o
                            WHERE o.instance_id = t.instance_id AND o.session = t.session
                              AND o.state <> 'done' AND o.seq < t.seq))
                    ORDER BY t.created, t.seq
                    LIMIT %(limit)s
                    FOR UPDATE SKIP LOCKED)
                RETURNING instance_id, seq, session, request, taken_over, stop_requested
                """,
                {"me": self.replica, "lease": self.lease_seconds, "limit": limit},
                binary=True,
            )
            rows = await cur.fetchall()
        return [
            ClaimedTurn(
                instance_id=str(r[0]),
                seq=int(r[1]),
                session=str(r[2]),
                request=bytes(r[3] or b""),
                expired=bool(r[4]),
                owner=self.replica,
                stopped=bool(r[5]),
            )
            for r in sorted(rows, key=lambda r: (str(r[0]), int(r[1])))
        ]

    async def claim_turn(self) -> ClaimedTurn | None:
        """The oldest claimable turn, now ours (:meth:`claim_turns` of one)."""
        found = await self.claim_turns(1)
        return found[0] if found else None

    async def renew_leases(self) -> list[tuple[str, int]]:
        """Extend the lease of every turn this replica runs; return those a client
        asked to stop (in case this replica missed the notification)."""
        async with self.db.aconn("cannot renew turn leases") as conn:
            cur = await conn.execute(
                "UPDATE visus_turns SET lease_until = now() + make_interval(secs => %s) "
                "WHERE owner = %s AND state = 'running' RETURNING instance_id, seq, "
                "stop_requested",
                (self.lease_seconds, self.replica),
            )
            return [(str(r[0]), int(r[1])) for r in await cur.fetchall() if r[2]]

    async def stop_turn(
        self, instance_id: str, session: str, request_id: str
    ) -> Literal["queued", "running"] | None:
        async with self.db.atx(f"cannot stop a turn of instance {instance_id!r}") as conn:
            cur = await conn.execute(
                "SELECT seq, state FROM visus_turns WHERE instance_id = %s "
                "AND session = %s AND msg_id = %s AND state <> 'done' FOR UPDATE",
                (instance_id, session, request_id),
            )
            row = await cur.fetchone()
            if row is None:
                return None
            seq, state = int(row[0]), str(row[1])
            if state == "queued":
                # Locked above, so no worker can be claiming it now: it never runs.
                await conn.execute(
                    "UPDATE visus_turns SET state = 'done', request = NULL, "
                    "stop_requested = true WHERE instance_id = %s AND seq = %s",
                    (instance_id, seq),
                )
                # The session's next turn may be claimable now.
                await conn.execute("SELECT pg_notify('visus_turns', %s)", (instance_id,))
                return "queued"
            await conn.execute(
                "UPDATE visus_turns SET stop_requested = true WHERE instance_id = %s AND seq = %s",
                (instance_id, seq),
            )
            await conn.execute("SELECT pg_notify('visus_stops', %s)", (f"{instance_id}:{seq}",))
            return "running"

    async def open_turns(self, instance_id: str, session: str) -> list[str]:
        what = f"cannot read the open turns of instance {instance_id!r}"
        async with self.db.aconn(what) as conn:
            # Turns queued before schema v2 have no msg_id: nothing can name them.
            cur = await conn.execute(
                "SELECT msg_id FROM visus_turns WHERE instance_id = %s AND session = %s "
                "AND state <> 'done' AND msg_id IS NOT NULL ORDER BY seq",
                (instance_id, session),
            )
            return [str(r[0]) for r in await cur.fetchall()]

    async def aclose(self) -> None:
        self._closing = True
        self._wake_all()
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._listener
        await self.db.aclose()
