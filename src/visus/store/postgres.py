"""The PostgreSQL store: instances, sessions, blobs, attachments, the tether ring and
turn claims in one database that any number of ``visus serve`` replicas share.

:class:`PostgresStore` composes the parts, each in its own module over the
connections of :mod:`visus.store.pg_conn`: sessions (:mod:`~visus.store.pg_sessions`),
blobs (:mod:`~visus.store.pg_blobs`), attachments (:mod:`~visus.store.pg_attachments`)
and the ring with its turn claims (:mod:`~visus.store.pg_ring`); instances are here.

Example:
    >>> store = PostgresStore("postgresql://visus@127.0.0.1:5432/visus")  # doctest: +SKIP
    >>> store.schema_version == SCHEMA_VERSION  # doctest: +SKIP
    True
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from visus import limits
from visus.record.sessions import validate_session_id
from visus.store.base import Collected, redact_url, validate_namespace
from visus.store.pg_attachments import PgAttachments
from visus.store.pg_blobs import BlobCache, PgBlobs
from visus.store.pg_conn import Database, check_version, migrate_schema, translate
from visus.store.pg_ring import DEFAULT_LEASE_SECONDS, PgRing
from visus.store.pg_sessions import PgSessions
from visus.store.schema import SCHEMA_VERSION

try:
    import psycopg
except ImportError as e:  # pragma: no cover - the extra is missing
    raise ImportError(
        "the PostgreSQL store needs psycopg: pip install -e '.[postgres]' in the checkout"
    ) from e

__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "SCHEMA_VERSION",
    "PgBlobs",
    "PgSessions",
    "PostgresStore",
    "migrate_schema",
]


class PostgresStore(PgRing):
    """:class:`~visus.store.base.Store` and :class:`~visus.store.base.SharedRingStore`
    on one PostgreSQL database.

    ``migrate`` false refuses to run against a database whose schema is not exactly
    this code's (``visus store migrate`` brings it there). A replica opens at most
    ``2 * pool_size + 1`` connections: two pools (sync calls, the async ring) and the
    one that LISTENs.
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
        max_turns: int | None = None,
    ) -> None:
        self.url = url
        #: Turns this replica runs at once (its TurnWorker's concurrency); None: default.
        self.max_turns = max_turns
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                if migrate:
                    self.migrated_from, self.schema_version = migrate_schema(conn)
                else:
                    self.schema_version = check_version(conn)
                    self.migrated_from = self.schema_version
        except psycopg.Error as e:
            raise translate(e, f"cannot open the store at {redact_url(url)}") from e
        super().__init__(
            Database(url, pool_size=pool_size),
            replica=replica,
            lease_seconds=lease_seconds,
            max_frames=max_frames,
            max_bytes=max_bytes,
        )
        #: Verified blob bytes this process wrote or read, shared by its PgBlobs.
        self._blob_cache = BlobCache()

    def __repr__(self) -> str:
        return f"PostgresStore({redact_url(self.url)!r}, replica={self.replica!r})"

    def sessions(self, namespace: str = "") -> PgSessions:
        return PgSessions(self.db, validate_namespace(namespace))

    def attachments(self, namespace: str, session_id: str) -> PgAttachments:
        """Session ``session_id``'s attachments, in the database (every replica sees them)."""
        ns, sid = validate_namespace(namespace), validate_session_id(session_id)
        return PgAttachments(self.db, ns, sid)

    def blobs(self, namespace: str = "") -> PgBlobs:
        """Blobs are content-addressed and shared by every namespace in the database."""
        validate_namespace(namespace)
        return PgBlobs(self.db, self._blob_cache)

    # --- instances -----------------------------------------------------------------

    def put_instance(self, config: Mapping[str, Any]) -> None:
        with self.db.conn(f"cannot save instance {config.get('id')!r}") as conn:
            conn.execute(
                "INSERT INTO visus_instances (id, config, created) VALUES (%s, %s, %s) "
                "ON CONFLICT (id) DO UPDATE SET config = EXCLUDED.config",
                (str(config["id"]), json.dumps(dict(config)), str(config.get("created", ""))),
            )

    def get_instance(self, instance_id: str) -> dict[str, Any] | None:
        with self.db.conn(f"cannot read instance {instance_id!r}") as conn:
            row = conn.execute(
                "SELECT config FROM visus_instances WHERE id = %s", (instance_id,)
            ).fetchone()
        return None if row is None else dict(row[0])

    def list_instances(self) -> list[dict[str, Any]]:
        with self.db.conn("cannot list instances") as conn:
            rows = conn.execute("SELECT config FROM visus_instances ORDER BY created, id")
            return [dict(r[0]) for r in rows]

    def delete_instance(self, instance_id: str) -> bool:
        """Delete the instance, its ring, its turns, its sessions and their attachments;
        tell every replica."""
        ns = f"instances/{instance_id}"
        with self.db.tx(f"cannot delete instance {instance_id!r}") as conn:
            cur = conn.execute("DELETE FROM visus_instances WHERE id = %s", (instance_id,))
            conn.execute("DELETE FROM visus_sessions WHERE namespace = %s", (ns,))
            conn.execute("DELETE FROM visus_attachments WHERE namespace = %s", (ns,))
            conn.execute("SELECT pg_notify('visus_instances', %s)", (instance_id,))
            return cur.rowcount > 0

    def gc(self, *, grace_seconds: float = 3600.0) -> Collected:
        """Delete blobs no session message names and older than ``grace_seconds`` (a
        turn may have stored an image it has not yet recorded); say how many went and
        how many unnamed ones stayed for being younger."""
        unnamed = "NOT EXISTS (SELECT 1 FROM visus_message_blobs m WHERE m.digest = b.digest)"
        with self.db.conn("cannot collect blobs") as conn:
            cur = conn.execute(
                "DELETE FROM visus_blobs b WHERE b.created < now() - make_interval(secs => %s) "
                f"AND {unnamed}",
                (float(grace_seconds),),
            )
            removed = cur.rowcount
            row = conn.execute(
                f"SELECT count(*) FROM visus_blobs b WHERE {unnamed}"  # what the grace kept
            ).fetchone()
        self._blob_cache.clear()
        return Collected(removed, int(row[0]) if row else 0)

    def close(self) -> None:
        self.db.close()
