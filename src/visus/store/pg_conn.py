"""The PostgreSQL store's connections and schema upkeep: the bottom of its modules.

:class:`Database` holds one database's two pools: a psycopg ``ConnectionPool`` for
the synchronous calls (sessions, blobs, attachments, instances; made off the serving
event loop) and an ``AsyncConnectionPool`` opened on the serving loop (the ring, the
turn claims). :func:`migrate_schema` brings a database to this code's schema.

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

import contextlib
from collections.abc import Iterator
from typing import Any

from visus.errors import StoreError
from visus.store.schema import LOCK_KEY, MIGRATIONS, SCHEMA_VERSION

try:
    import psycopg
    from psycopg_pool import AsyncConnectionPool, ConnectionPool
except ImportError as e:  # pragma: no cover - the extra is missing
    raise ImportError(
        "the PostgreSQL store needs psycopg: pip install -e '.[postgres]' in the checkout"
    ) from e

__all__ = ["Database", "check_version", "migrate_schema", "translate"]


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
    asynchronous ones once :meth:`start` opened them on the serving loop."""

    def __init__(self, url: str, *, pool_size: int) -> None:
        self.url = url
        self.pool_size = pool_size
        self._pool = ConnectionPool(url, min_size=1, max_size=pool_size, open=True)
        self._apool: AsyncConnectionPool | None = None

    @contextlib.contextmanager
    def tx(self, what: str) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection inside one transaction; errors become StoreError(what)."""
        try:
            with self._pool.connection() as conn, conn.transaction():
                yield conn
        except psycopg.Error as e:
            raise translate(e, what) from e

    async def start(self) -> None:
        """Open the async pool (on the loop that will use it)."""
        if self._apool is None:
            self._apool = AsyncConnectionPool(
                self.url, min_size=1, max_size=self.pool_size, open=False
            )
            await self._apool.open()

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
        self.close()
