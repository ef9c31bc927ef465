"""The PostgreSQL store: instances, sessions, blobs, the tether ring and turn claims in
one database that any number of ``visus serve`` replicas share.

The only module importing psycopg (``pip install 'visus[postgres]'``). Synchronous
calls (sessions, blobs, instances: what the agent and the registry use) go through a
psycopg ``ConnectionPool``; the ring and the turn claims through an
``AsyncConnectionPool`` on the serving event loop, plus one connection that LISTENs:

- ``visus_frames`` (payload ``<instance>:<seq>``) wakes long polls and SSE streams of
  every replica when a frame commits (no busy polling);
- ``visus_turns`` wakes the turn workers when a user message is queued;
- ``visus_instances`` (payload the id) tells replicas an instance was deleted.

Seqs: an append locks the instance's row (``UPDATE ... RETURNING last_seq``), so
seqs are gap-free and commit in order; a reader never sees seq n+1 before n.

Turns: a ``user.message`` append also queues a turn row. A replica claims the oldest
claimable turn with ``FOR UPDATE SKIP LOCKED`` (a session's turns run one at a time,
in order) and holds it under a lease it renews; a turn whose lease ran out (its
replica died) is claimable again, flagged ``expired``. Every frame of a turn is
appended only while the appender still owns it, so a turn never answers twice.

Example:
    >>> store = PostgresStore("postgresql://visus@127.0.0.1:5432/visus")  # doctest: +SKIP
    >>> store.schema_version == SCHEMA_VERSION  # doctest: +SKIP
    True
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import re
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from visus import limits
from visus.errors import (
    ConfigError,
    IntegrityError,
    InvalidInputError,
    NotFoundError,
    StoreError,
)
from visus.record.blobs import validate_digest
from visus.record.codec import message_from_dict, message_to_dict
from visus.record.messages import Message
from visus.record.sessions import (
    LoadedSession,
    SessionInfo,
    _new_id,
    degrade_missing_blobs,
    validate_session_id,
)
from visus.store.base import ClaimedTurn, FramePage, RingStats, StoredFrame, validate_namespace
from visus.store.schema import LOCK_KEY, MIGRATIONS, SCHEMA_VERSION

if TYPE_CHECKING:
    from visus.store.pg_attachments import PgAttachments

try:
    import psycopg
    from psycopg_pool import AsyncConnectionPool, ConnectionPool
except ImportError as e:  # pragma: no cover - the extra is missing
    raise ImportError("the PostgreSQL store needs psycopg: pip install 'visus[postgres]'") from e

__all__ = ["DEFAULT_LEASE_SECONDS", "PgBlobs", "PgSessions", "PostgresStore", "migrate_schema"]

log = logging.getLogger(__name__)

#: How long a replica owns a claimed turn without renewing it.
DEFAULT_LEASE_SECONDS = 15.0
_DIGEST_FIELD = re.compile(r'"digest"\s*:\s*"([0-9a-f]{64})"')
_EMPTY: Mapping[str, Any] = MappingProxyType({})


#: What the listener hears: frames appended, turns queued, instances deleted, stops.
_CHANNELS = ("visus_frames", "visus_turns", "visus_instances", "visus_stops")


def _translate(e: Exception, what: str) -> StoreError:
    return StoreError(f"{what}: {type(e).__name__}: {e}".strip())


def migrate_schema(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    """Bring the database to :data:`SCHEMA_VERSION`; return (before, after).

    Raises StoreError for a database at a newer version than this code knows.
    """
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
        conn.execute("CREATE TABLE IF NOT EXISTS visus_schema (version integer NOT NULL)")
        row = conn.execute("SELECT version FROM visus_schema").fetchone()
        before = int(row[0]) if row else 0
        if before > SCHEMA_VERSION:
            raise StoreError(
                f"the database's visus schema is version {before}, newer than this visus "
                f"knows ({SCHEMA_VERSION}); upgrade visus on this replica before running it"
            )
        for version, sql in MIGRATIONS:
            if version > before:
                conn.execute(sql)
        if row is None:
            conn.execute("INSERT INTO visus_schema VALUES (%s)", (SCHEMA_VERSION,))
        else:
            conn.execute("UPDATE visus_schema SET version = %s", (SCHEMA_VERSION,))
    return before, SCHEMA_VERSION


class PostgresStore:
    """:class:`~visus.store.base.Store` and :class:`~visus.store.base.SharedRingStore`
    on one PostgreSQL database.

    ``migrate`` false refuses to run against a database whose schema is not exactly
    this code's (``visus store migrate`` brings it there).
    """

    shared = True

    def __init__(
        self,
        url: str,
        *,
        migrate: bool = True,
        replica: str = "replica",
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        max_frames: int = limits.RING_MAX_FRAMES,
        max_bytes: int = limits.RING_MAX_BYTES,
        pool_size: int = 4,
    ) -> None:
        self.url = url
        self.replica = replica
        self.lease_seconds = lease_seconds
        self.max_frames = max_frames
        self.max_bytes = max_bytes
        self._pool_size = pool_size
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                if migrate:
                    self.migrated_from, self.schema_version = migrate_schema(conn)
                else:
                    self.schema_version = self._check_version(conn)
                    self.migrated_from = self.schema_version
        except psycopg.Error as e:
            raise _translate(e, f"cannot open the store at {_redact(url)}") from e
        self._pool = ConnectionPool(url, min_size=1, max_size=pool_size, open=True)
        self._apool: AsyncConnectionPool | None = None
        self._listener: asyncio.Task[None] | None = None
        self._events: dict[str, asyncio.Event] = {}
        self._turn_callbacks: list[Callable[[], None]] = []
        self._delete_callbacks: list[Callable[[str], None]] = []
        self._stop_callbacks: list[Callable[[str, int], None]] = []
        self._closing = False

    def __repr__(self) -> str:
        return f"PostgresStore({_redact(self.url)!r}, replica={self.replica!r})"

    @staticmethod
    def _check_version(conn: psycopg.Connection[Any]) -> int:
        try:
            row = conn.execute("SELECT version FROM visus_schema").fetchone()
        except psycopg.errors.UndefinedTable:
            row = None
        found = int(row[0]) if row else 0
        if found != SCHEMA_VERSION:
            raise StoreError(
                f"the database's visus schema is version {found}, this visus runs "
                f"{SCHEMA_VERSION}; run `visus store migrate` (with the newest visus)"
            )
        return found

    # --- sync plumbing --------------------------------------------------------------

    @contextlib.contextmanager
    def _tx(self, what: str) -> Iterator[psycopg.Connection[Any]]:
        try:
            with self._pool.connection() as conn, conn.transaction():
                yield conn
        except psycopg.Error as e:
            raise _translate(e, what) from e

    def sessions(self, namespace: str = "") -> PgSessions:
        return PgSessions(self, validate_namespace(namespace))

    def attachments(self, namespace: str, session_id: str) -> PgAttachments:
        """Session ``session_id``'s attachments, in the database (every replica sees them)."""
        from visus.store.pg_attachments import PgAttachments

        return PgAttachments(self, validate_namespace(namespace), validate_session_id(session_id))

    def blobs(self, namespace: str = "") -> PgBlobs:
        """Blobs are content-addressed and shared by every namespace in the database."""
        validate_namespace(namespace)
        return PgBlobs(self)

    # --- instances -----------------------------------------------------------------

    def put_instance(self, config: Mapping[str, Any]) -> None:
        with self._tx(f"cannot save instance {config.get('id')!r}") as conn:
            conn.execute(
                "INSERT INTO visus_instances (id, config, created) VALUES (%s, %s, %s) "
                "ON CONFLICT (id) DO UPDATE SET config = EXCLUDED.config",
                (str(config["id"]), json.dumps(dict(config)), str(config.get("created", ""))),
            )

    def get_instance(self, instance_id: str) -> dict[str, Any] | None:
        with self._tx(f"cannot read instance {instance_id!r}") as conn:
            row = conn.execute(
                "SELECT config FROM visus_instances WHERE id = %s", (instance_id,)
            ).fetchone()
        return None if row is None else dict(row[0])

    def list_instances(self) -> list[dict[str, Any]]:
        with self._tx("cannot list instances") as conn:
            rows = conn.execute("SELECT config FROM visus_instances ORDER BY created, id")
            return [dict(r[0]) for r in rows]

    def delete_instance(self, instance_id: str) -> bool:
        """Delete the instance, its ring, its turns, its sessions and their attachments;
        tell every replica."""
        ns = f"instances/{instance_id}"
        with self._tx(f"cannot delete instance {instance_id!r}") as conn:
            cur = conn.execute("DELETE FROM visus_instances WHERE id = %s", (instance_id,))
            conn.execute("DELETE FROM visus_sessions WHERE namespace = %s", (ns,))
            conn.execute("DELETE FROM visus_attachments WHERE namespace = %s", (ns,))
            conn.execute("SELECT pg_notify('visus_instances', %s)", (instance_id,))
            return cur.rowcount > 0

    def gc(self, *, grace_seconds: float = 3600.0) -> int:
        """Delete blobs no session message names and older than ``grace_seconds`` (a
        turn may have stored an image it has not yet recorded); return how many went."""
        with self._tx("cannot collect blobs") as conn:
            cur = conn.execute(
                "DELETE FROM visus_blobs b WHERE b.created < now() - make_interval(secs => %s) "
                "AND NOT EXISTS (SELECT 1 FROM visus_message_blobs m WHERE m.digest = b.digest)",
                (float(grace_seconds),),
            )
            return cur.rowcount

    def close(self) -> None:
        self._pool.close()

    # --- the ring (async) ----------------------------------------------------------

    async def start(self) -> None:
        """Open the async pool and start listening (call once, on the serving loop)."""
        if self._apool is not None:
            return
        self._apool = AsyncConnectionPool(
            self.url, min_size=1, max_size=self._pool_size, open=False
        )
        await self._apool.open()
        self._listener = asyncio.create_task(self._listen(), name="visus-store-listen")

    def _ap(self) -> AsyncConnectionPool:
        if self._apool is None:
            raise StoreError("the store's ring is not started (call await store.start())")
        return self._apool

    async def _listen(self) -> None:
        while not self._stopping():
            try:
                conn = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
                async with conn:
                    for channel in _CHANNELS:
                        await conn.execute(f"LISTEN {channel}")
                    self._wake_all()  # anything committed while we were not listening
                    async for note in conn.notifies():
                        self._dispatch(note.channel, note.payload)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                if self._stopping():
                    return
                log.warning("store listener lost its connection (%s); reconnecting", e)
                self._wake_all()
                await asyncio.sleep(0.5)

    def _stopping(self) -> bool:
        return self._closing

    def _dispatch(self, channel: str, payload: str) -> None:
        if channel == "visus_frames":
            event = self._events.pop(payload.rsplit(":", 1)[0], None)
            if event is not None:
                event.set()
        elif channel == "visus_turns":
            for cb in self._turn_callbacks:
                cb()
        elif channel == "visus_instances":
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

    async def append_frame(
        self,
        instance_id: str,
        session: str,
        size: int,
        encode: Callable[[int], bytes],
        *,
        turn: int | None = None,
        finish: bool = False,
        queue: bool = False,
        request_id: str | None = None,
    ) -> int | None:
        try:
            async with self._ap().connection() as conn, conn.transaction():
                if turn is not None:
                    cur = await conn.execute(
                        "SELECT state, owner FROM visus_turns WHERE instance_id = %s "
                        "AND seq = %s FOR UPDATE",
                        (instance_id, turn),
                    )
                    row = await cur.fetchone()
                    if row is None or row[0] != "running" or row[1] != self.replica:
                        return None  # another replica took this turn over
                cur = await conn.execute(
                    "UPDATE visus_instances SET last_seq = last_seq + 1, "
                    "ring_frames = ring_frames + 1, ring_bytes = ring_bytes + %s "
                    "WHERE id = %s RETURNING last_seq, ring_frames, ring_bytes",
                    (size, instance_id),
                )
                row = await cur.fetchone()
                if row is None:
                    raise NotFoundError(f"instance {instance_id!r} not found")
                seq, frames, nbytes = int(row[0]), int(row[1]), int(row[2])
                body = encode(seq)
                await conn.execute(
                    "INSERT INTO visus_frames (instance_id, seq, session, size, body) "
                    "VALUES (%s, %s, %s, %s, %s)",
                    (instance_id, seq, session, size, body),
                )
                if frames > self.max_frames or nbytes > self.max_bytes:
                    await self._evict(conn, instance_id, seq, frames, nbytes)
                if queue:
                    await conn.execute(
                        "INSERT INTO visus_turns (instance_id, seq, session, state, request, "
                        "msg_id) VALUES (%s, %s, %s, 'queued', %s, %s)",
                        (instance_id, seq, session, body, request_id),
                    )
                    await conn.execute("SELECT pg_notify('visus_turns', %s)", (instance_id,))
                if finish and turn is not None:
                    await conn.execute(
                        "UPDATE visus_turns SET state = 'done', request = NULL, "
                        "lease_until = NULL WHERE instance_id = %s AND seq = %s",
                        (instance_id, turn),
                    )
                await conn.execute(
                    "SELECT pg_notify('visus_frames', %s)", (f"{instance_id}:{seq}",)
                )
                return seq
        except psycopg.Error as e:
            raise _translate(e, f"cannot append a frame to instance {instance_id!r}") from e

    async def _evict(
        self,
        conn: psycopg.AsyncConnection[Any],
        instance_id: str,
        newest: int,
        frames: int,
        nbytes: int,
    ) -> None:
        # Oldest first until both bounds hold; the newest frame always stays.
        cut, gone_frames, gone_bytes = 0, 0, 0
        cur = await conn.execute(
            "SELECT seq, size FROM visus_frames WHERE instance_id = %s AND seq < %s ORDER BY seq",
            (instance_id, newest),
        )
        async for seq, size in cur:
            if frames - gone_frames <= self.max_frames and nbytes - gone_bytes <= self.max_bytes:
                break
            cut, gone_frames, gone_bytes = int(seq), gone_frames + 1, gone_bytes + int(size)
        if not cut:
            return
        await conn.execute(
            "DELETE FROM visus_frames WHERE instance_id = %s AND seq <= %s", (instance_id, cut)
        )
        await conn.execute(
            "UPDATE visus_instances SET ring_frames = ring_frames - %s, "
            "ring_bytes = ring_bytes - %s, evicted_upto = %s WHERE id = %s",
            (gone_frames, gone_bytes, cut, instance_id),
        )

    async def read_frames(
        self, instance_id: str, after_seq: int, *, session: str | None, limit: int | None
    ) -> FramePage:
        try:
            async with self._ap().connection() as conn:
                cur = await conn.execute(
                    "SELECT last_seq, evicted_upto FROM visus_instances WHERE id = %s",
                    (instance_id,),
                )
                row = await cur.fetchone()
                if row is None:
                    raise NotFoundError(f"instance {instance_id!r} not found")
                last_seq, evicted = int(row[0]), int(row[1])
                gap = after_seq < evicted
                if after_seq > last_seq:  # a poller ahead of the ring: from the start
                    after_seq, gap = 0, True
                cap = limits.RING_MAX_FRAMES if limit is None else max(limit, 0)
                sql = (
                    "SELECT seq, session, body FROM visus_frames WHERE instance_id = %s "
                    "AND seq > %s"
                )
                args: list[Any] = [instance_id, after_seq]
                if session is not None:
                    sql += " AND session = %s"
                    args.append(session)
                cur = await conn.execute(sql + " ORDER BY seq LIMIT %s", (*args, cap))
                rows = await cur.fetchall()
        except psycopg.Error as e:
            raise _translate(e, f"cannot read the ring of instance {instance_id!r}") from e
        frames = tuple(StoredFrame(int(s), str(sess), bytes(b)) for s, sess, b in rows)
        if limit is not None and len(frames) >= cap:
            next_seq = frames[-1].seq if frames else after_seq
        else:
            next_seq = max(last_seq, frames[-1].seq if frames else 0, after_seq)
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
            page = await self.read_frames(instance_id, after_seq, session=session, limit=limit)
            remaining = deadline - loop.time()
            if page.frames or page.gap or remaining <= 0 or closed() or self._closing:
                return page
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), remaining)
            after_seq = page.next_seq if session is not None else after_seq

    async def ring_stats(self, instance_id: str) -> RingStats:
        async with self._ap().connection() as conn:
            cur = await conn.execute(
                "SELECT last_seq, evicted_upto, ring_frames, ring_bytes FROM visus_instances "
                "WHERE id = %s",
                (instance_id,),
            )
            row = await cur.fetchone()
        if row is None:
            raise NotFoundError(f"instance {instance_id!r} not found")
        last, evicted, frames, nbytes = (int(x) for x in row)
        first = last + 1 if frames == 0 else max(evicted + 1, last - frames + 1)
        return RingStats(last_seq=last, first_seq=first, frames=frames, bytes=nbytes)

    async def pending_turns(self, instance_id: str) -> int:
        async with self._ap().connection() as conn:
            cur = await conn.execute(
                "SELECT count(*) FROM visus_turns WHERE instance_id = %s AND state <> 'done'",
                (instance_id,),
            )
            row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def claim_turn(self) -> ClaimedTurn | None:
        """The oldest claimable turn, now ours: a queued one whose session has no
        earlier open turn, or a running one whose owner's lease ran out."""
        try:
            async with self._ap().connection() as conn, conn.transaction():
                cur = await conn.execute(
                    """
                    UPDATE visus_turns SET state = 'running', owner = %(me)s,
                        lease_until = now() + make_interval(secs => %(lease)s),
                        attempts = attempts + 1,
                        taken_over = (visus_turns.state = 'running')
                    WHERE (instance_id, seq) = (
                        SELECT t.instance_id, t.seq FROM visus_turns t
                        WHERE (t.state = 'running' AND t.lease_until < now())
                           OR (t.state = 'queued' AND NOT EXISTS (
                                SELECT 1 FROM visus_turns o
                                WHERE o.instance_id = t.instance_id AND o.session = t.session
                                  AND o.state <> 'done' AND o.seq < t.seq))
                        ORDER BY t.created, t.seq
                        LIMIT 1
                        FOR UPDATE SKIP LOCKED)
                    RETURNING instance_id, seq, session, request, taken_over, stop_requested
                    """,
                    {"me": self.replica, "lease": self.lease_seconds},
                )
                row = await cur.fetchone()
        except psycopg.Error as e:
            raise _translate(e, "cannot claim a turn") from e
        if row is None:
            return None
        return ClaimedTurn(
            instance_id=str(row[0]),
            seq=int(row[1]),
            session=str(row[2]),
            request=bytes(row[3] or b""),
            expired=bool(row[4]),
            owner=self.replica,
            stopped=bool(row[5]),
        )

    async def renew_leases(self) -> int:
        """Extend the lease of every turn this replica runs; return how many."""
        try:
            async with self._ap().connection() as conn:
                cur = await conn.execute(
                    "UPDATE visus_turns SET lease_until = now() + make_interval(secs => %s) "
                    "WHERE owner = %s AND state = 'running'",
                    (self.lease_seconds, self.replica),
                )
                return cur.rowcount
        except psycopg.Error as e:
            raise _translate(e, "cannot renew turn leases") from e

    async def stop_turn(
        self, instance_id: str, session: str, request_id: str
    ) -> Literal["queued", "running"] | None:
        try:
            async with self._ap().connection() as conn, conn.transaction():
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
                    "UPDATE visus_turns SET stop_requested = true "
                    "WHERE instance_id = %s AND seq = %s",
                    (instance_id, seq),
                )
                await conn.execute("SELECT pg_notify('visus_stops', %s)", (f"{instance_id}:{seq}",))
                return "running"
        except psycopg.Error as e:
            raise _translate(e, f"cannot stop a turn of instance {instance_id!r}") from e

    async def stopped_turns(self) -> list[tuple[str, int]]:
        try:
            async with self._ap().connection() as conn:
                cur = await conn.execute(
                    "SELECT instance_id, seq FROM visus_turns WHERE owner = %s "
                    "AND state = 'running' AND stop_requested",
                    (self.replica,),
                )
                return [(str(r[0]), int(r[1])) for r in await cur.fetchall()]
        except psycopg.Error as e:
            raise _translate(e, "cannot read stopped turns") from e

    async def open_turns(self, instance_id: str, session: str) -> list[str]:
        try:
            async with self._ap().connection() as conn:
                # Turns queued before schema v2 have no msg_id: nothing can name them.
                cur = await conn.execute(
                    "SELECT msg_id FROM visus_turns WHERE instance_id = %s AND session = %s "
                    "AND state <> 'done' AND msg_id IS NOT NULL ORDER BY seq",
                    (instance_id, session),
                )
                return [str(r[0]) for r in await cur.fetchall()]
        except psycopg.Error as e:
            raise _translate(e, f"cannot read the open turns of instance {instance_id!r}") from e

    async def aclose(self) -> None:
        self._closing = True
        self._wake_all()
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._listener
        if self._apool is not None:
            await self._apool.close()
            self._apool = None
        self.close()


class PgSessions:
    """A :class:`~visus.record.sessions.SessionLog` in the database (one namespace)."""

    def __init__(self, store: PostgresStore, namespace: str) -> None:
        self.store = store
        self.namespace = namespace

    def __repr__(self) -> str:
        return f"PgSessions(namespace={self.namespace!r})"

    def exists(self, session_id: str) -> bool:
        sid = validate_session_id(session_id)
        with self.store._tx(f"cannot look up session {sid!r}") as conn:
            row = conn.execute(
                "SELECT 1 FROM visus_sessions WHERE namespace = %s AND id = %s",
                (self.namespace, sid),
            ).fetchone()
        return row is not None

    def create(
        self, session_id: str | None = None, *, meta: Mapping[str, Any] | None = None
    ) -> str:
        sid = validate_session_id(session_id) if session_id is not None else _new_id()
        try:
            meta_json = json.dumps(dict(meta or {}), allow_nan=False)
        except (TypeError, ValueError) as e:
            raise InvalidInputError(f"session meta is not JSON: {e}") from e
        now = time.time()
        with self.store._tx(f"cannot create session {sid!r}") as conn:
            row = conn.execute(
                "INSERT INTO visus_sessions (namespace, id, created, modified, meta) "
                "VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING id",
                (self.namespace, sid, now, now, meta_json),
            ).fetchone()
        if row is None:
            raise StoreError(f"session {sid!r} already exists")
        return sid

    def append(self, session_id: str, message: Message) -> None:
        sid = validate_session_id(session_id)
        try:
            record = json.dumps(
                message_to_dict(message),
                ensure_ascii=False,
                separators=(",", ":"),
                allow_nan=False,
            )
        except (TypeError, ValueError) as e:
            raise InvalidInputError(f"cannot record this message as JSON: {e}") from e
        digests = sorted(set(_DIGEST_FIELD.findall(record)))
        with self.store._tx(f"cannot append to session {sid!r}") as conn:
            row = conn.execute(
                "UPDATE visus_sessions SET messages = messages + 1, modified = %s, "
                "turns = greatest(turns, %s), size = size + %s "
                "WHERE namespace = %s AND id = %s RETURNING messages",
                (time.time(), message.turn, len(record), self.namespace, sid),
            ).fetchone()
            if row is None:
                raise NotFoundError(f"no session {sid!r}")
            conn.execute(
                "INSERT INTO visus_messages (namespace, session, n, record) "
                "VALUES (%s, %s, %s, %s)",
                (self.namespace, sid, row[0], record),
            )
            if digests:
                with conn.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO visus_message_blobs (digest, namespace, session) "
                        "VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                        [(d, self.namespace, sid) for d in digests],
                    )

    def load(self, session_id: str, *, blobs: Any = None) -> LoadedSession:
        sid = validate_session_id(session_id)
        with self.store._tx(f"cannot read session {sid!r}") as conn:
            head = conn.execute(
                "SELECT created, meta FROM visus_sessions WHERE namespace = %s AND id = %s",
                (self.namespace, sid),
            ).fetchone()
            if head is None:
                raise NotFoundError(f"no session {sid!r}")
            rows = conn.execute(
                "SELECT n, record FROM visus_messages WHERE namespace = %s AND session = %s "
                "ORDER BY n",
                (self.namespace, sid),
            ).fetchall()
        problems: list[str] = []
        messages: list[Message] = []
        for n, record in rows:
            try:
                messages.append(message_from_dict(json.loads(record)))
            except (InvalidInputError, TypeError, ValueError, RecursionError) as e:
                problems.append(f"message {n}: corrupt record skipped ({e})")
        if blobs is not None:
            messages = degrade_missing_blobs(messages, blobs, problems)
        meta = head[1]
        return LoadedSession(
            id=sid,
            messages=tuple(messages),
            problems=tuple(problems),
            meta=MappingProxyType(dict(meta)) if isinstance(meta, dict) else _EMPTY,
            created=float(head[0]),
        )

    def revision(self, session_id: str) -> Hashable:
        sid = validate_session_id(session_id)
        with self.store._tx(f"cannot read session {sid!r}") as conn:
            row = conn.execute(
                "SELECT messages FROM visus_sessions WHERE namespace = %s AND id = %s",
                (self.namespace, sid),
            ).fetchone()
        return -1 if row is None else int(row[0])

    def turn_count(self, session_id: str) -> int:
        return self.load(session_id).turn_count

    def list(self) -> list[SessionInfo]:
        with self.store._tx("cannot list sessions") as conn:
            rows = conn.execute(
                "SELECT id, messages, modified, size, turns FROM visus_sessions "
                "WHERE namespace = %s ORDER BY modified DESC, id",
                (self.namespace,),
            ).fetchall()
        return [
            SessionInfo(
                id=r[0], messages=int(r[1]), modified=float(r[2]), size=int(r[3]), turns=int(r[4])
            )
            for r in rows
        ]

    def referenced_digests(self) -> set[str]:
        with self.store._tx("cannot collect referenced blobs") as conn:
            rows = conn.execute(
                "SELECT DISTINCT digest FROM visus_message_blobs WHERE namespace = %s",
                (self.namespace,),
            ).fetchall()
        return {str(r[0]) for r in rows}


class PgBlobs:
    """A :class:`~visus.record.blobs.BlobStore` in the database: bytea rows, written
    once, verified against their digest on every read."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store
        self.reads = 0
        self.writes = 0

    def __repr__(self) -> str:
        return "PgBlobs()"

    def put(self, data: bytes, media_type: str) -> str:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"blob data must be bytes, not {type(data).__name__}")
        data = bytes(data)
        digest = hashlib.sha256(data).hexdigest()
        with self.store._tx(f"cannot write blob {digest}") as conn:
            # Written once; a copy of the wrong size (damaged) is replaced by the true bytes.
            row = conn.execute(
                "INSERT INTO visus_blobs (digest, media_type, size, data) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT (digest) DO UPDATE "
                "SET data = EXCLUDED.data, size = EXCLUDED.size "
                "WHERE octet_length(visus_blobs.data) <> EXCLUDED.size RETURNING 1",
                (digest, media_type, len(data), data),
            ).fetchone()
        if row is not None:
            self.writes += 1
        return digest

    def get(self, digest: str) -> bytes:
        validate_digest(digest)
        with self.store._tx(f"cannot read blob {digest}") as conn:
            row = conn.execute(
                "SELECT data FROM visus_blobs WHERE digest = %s", (digest,)
            ).fetchone()
        if row is None:
            raise NotFoundError(f"blob sha256:{digest} is missing from the database")
        data = bytes(row[0])
        self.reads += 1
        actual = hashlib.sha256(data).hexdigest()
        if actual != digest:
            raise IntegrityError(
                f"blob sha256:{digest} does not match its digest: stored bytes hash to "
                f"sha256:{actual}"
            )
        return data

    def has(self, digest: str) -> bool:
        validate_digest(digest)
        with self.store._tx(f"cannot look up blob {digest}") as conn:
            row = conn.execute("SELECT 1 FROM visus_blobs WHERE digest = %s", (digest,))
            return row.fetchone() is not None

    def media_type(self, digest: str) -> str | None:
        validate_digest(digest)
        with self.store._tx(f"cannot look up blob {digest}") as conn:
            row = conn.execute(
                "SELECT media_type FROM visus_blobs WHERE digest = %s", (digest,)
            ).fetchone()
        return None if row is None else str(row[0])

    def digests(self) -> Iterator[str]:
        with self.store._tx("cannot list blobs") as conn:
            rows = conn.execute("SELECT digest FROM visus_blobs ORDER BY digest").fetchall()
        return iter([str(r[0]) for r in rows])

    def gc(self, live: Iterable[str]) -> int:
        """Remove every blob not in ``live`` (prefer :meth:`PostgresStore.gc`, which
        takes the live set from the database itself)."""
        keep = sorted({d for d in live if isinstance(d, str)})
        with self.store._tx("cannot collect blobs") as conn:
            cur = conn.execute("DELETE FROM visus_blobs WHERE NOT (digest = ANY(%s))", (keep,))
            return cur.rowcount

    def corrupt(self, digest: str, data: bytes) -> None:
        """Replace a blob's bytes without rehashing, to test integrity checks."""
        with self.store._tx("cannot corrupt blob") as conn:
            conn.execute("UPDATE visus_blobs SET data = %s WHERE digest = %s", (data, digest))


def _redact(url: str) -> str:
    return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)


def check_url(url: str) -> str:
    """``url`` if psycopg can parse it, else ConfigError naming the problem."""
    try:
        psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.Error as e:
        raise ConfigError(f"store: cannot parse {_redact(url)!r}: {e}") from e
    return url
