"""The PostgreSQL store's connections and schema upkeep: the bottom of its modules.

:class:`Database` holds one database's two pools: a psycopg ``ConnectionPool`` for
the synchronous calls (sessions, blobs, attachments, instances) and an
``AsyncConnectionPool`` opened on the serving loop (the ring, the turn claims).
:func:`migrate_schema` brings a database to this code's schema.

Connections are in autocommit: a call of one statement is one round trip (no BEGIN,
no COMMIT); only :meth:`Database.tx` opens a transaction, for calls that need several
statements to commit together.

A synchronous call must never run on the serving event loop (one slow query would
stall every stream of the replica): callers there go through ``asyncio.to_thread``.
Once :meth:`Database.start` has run on a loop, a synchronous call made on that loop
is refused or logged (:data:`ON_LOOP`), so a call site that forgot is found.

``store/postgres.py`` and ``store/pg_*.py`` are the only modules importing psycopg
(``pip install -e '.[postgres]'`` in the visus checkout); each of them builds on this
one, none on another.

Example:
    >>> db = Database("postgresql://visus@127.0.0.1/visus", pool_size=2)  # doctest: +SKIP
    >>> with db.tx("cannot count") as conn:  # doctest: +SKIP
    ...     conn.execute("SELECT 1").fetchone()
    (1,)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import traceback
from collections.abc import AsyncIterator, Iterator
from typing import Any, Literal

from visus.errors import StoreError
from visus.store.schema import LOCK_KEY, MIGRATIONS, SCHEMA_VERSION

try:
    import psycopg
    from psycopg_pool import AsyncConnectionPool, ConnectionPool
except ImportError as e:  # pragma: no cover - the extra is missing
    raise ImportError(
        "the PostgreSQL store needs psycopg: pip install -e '.[postgres]' in the checkout"
    ) from e

__all__ = ["ON_LOOP", "Database", "check_version", "migrate_schema", "translate"]

log = logging.getLogger(__name__)

#: What a synchronous call made on the serving event loop does: ``"warn"`` logs it with
#: its call site (once per site), ``"raise"`` refuses it with StoreError (the tests).
ON_LOOP: Literal["warn", "raise"] = "warn"
_warned: set[str] = set()


def translate(e: Exception, what: str) -> StoreError:
    """A psycopg error as the store's own, saying what failed."""
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


def check_version(conn: psycopg.Connection[Any]) -> int:
    """The database's schema version; StoreError unless it is exactly this code's."""
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


class Database:
    """One database's connections: ``pool_size`` synchronous ones at most, and as many
    asynchronous ones once :meth:`start` opened them on the serving loop.

    Example:
        >>> db = Database("postgresql://visus@127.0.0.1/visus", pool_size=2)  # doctest: +SKIP
        >>> with db.conn("cannot count") as conn:  # doctest: +SKIP
        ...     conn.execute("SELECT 1").fetchone()
        (1,)
    """

    def __init__(self, url: str, *, pool_size: int) -> None:
        self.url = url
        self.pool_size = pool_size
        self._pool = ConnectionPool(
            url, min_size=1, max_size=pool_size, open=True, kwargs={"autocommit": True}
        )
        self._apool: AsyncConnectionPool | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _off_loop(self, what: str) -> None:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            return  # a worker thread (or no loop at all): where sync calls belong
        if running is not self._loop:
            return  # not the serving loop (a test's, a CLI's own)
        why = f"{what}: a synchronous database call on the serving event loop"
        if ON_LOOP == "raise":
            raise StoreError(why + " (call it through asyncio.to_thread)")
        site = "".join(traceback.format_stack(limit=6)[:-2])
        if site not in _warned:
            _warned.add(site)
            log.warning("%s; it stalls every stream of this replica while it runs:\n%s", why, site)

    @contextlib.contextmanager
    def conn(self, what: str) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection in autocommit (each statement commits on its own);
        psycopg errors become StoreError(what)."""
        self._off_loop(what)
        try:
            with self._pool.connection() as conn:
                yield conn
        except psycopg.Error as e:
            raise translate(e, what) from e

    @contextlib.contextmanager
    def tx(self, what: str) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection inside one transaction; errors become StoreError(what)."""
        with self.conn(what) as conn, conn.transaction():
            yield conn

    @contextlib.asynccontextmanager
    async def aconn(self, what: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """An async pooled connection in autocommit; errors become StoreError(what)."""
        try:
            async with self.apool.connection() as conn:
                yield conn
        except psycopg.Error as e:
            raise translate(e, what) from e

    @contextlib.asynccontextmanager
    async def atx(self, what: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """An async pooled connection inside one transaction."""
        async with self.aconn(what) as conn, conn.transaction():
            yield conn

    async def start(self) -> None:
        """Open the async pool on the serving loop (from now on a synchronous call made
        on this loop is refused or logged, see :data:`ON_LOOP`)."""
        if self._apool is None:
            self._apool = AsyncConnectionPool(
                self.url,
                min_size=1,
                max_size=self.pool_size,
                open=False,
                kwargs={"autocommit": True},
            )
            await self._apool.open()
            self._loop = asyncio.get_running_loop()

    @property
    def apool(self) -> AsyncConnectionPool:
        """The async pool; StoreError before :meth:`start`."""
        if self._apool is None:
            raise StoreError("the store's ring is not started (call await store.start())")
        return self._apool

    def close(self) -> None:
        self._pool.close()

    async def aclose(self) -> None:
        if self._apool is not None:
            await self._apool.close()
            self._apool = None
        self._loop = None
        await asyncio.to_thread(self.close)
