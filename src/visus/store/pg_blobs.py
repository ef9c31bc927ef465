"""Blobs in the PostgreSQL store: content-addressed bytea rows every namespace and
replica shares, verified against their digest on every read.

Example:
    >>> blobs = PgBlobs(Database(url, pool_size=2))  # doctest: +SKIP
    >>> blobs.get(blobs.put(b"GIF89a...", "image/gif"))  # doctest: +SKIP
    b'GIF89a...'
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator

from visus.errors import IntegrityError, NotFoundError
from visus.record.blobs import validate_digest
from visus.store.pg_conn import Database

__all__ = ["PgBlobs"]


class PgBlobs:
    """A :class:`~visus.record.blobs.BlobStore` in the database: bytea rows, written
    once, verified against their digest on every read."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.reads = 0
        self.writes = 0

    def __repr__(self) -> str:
        return "PgBlobs()"

    def put(self, data: bytes, media_type: str) -> str:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"blob data must be bytes, not {type(data).__name__}")
        data = bytes(data)
        digest = hashlib.sha256(data).hexdigest()
        with self.db.tx(f"cannot write blob {digest}") as conn:
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
        with self.db.tx(f"cannot read blob {digest}") as conn:
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
        with self.db.tx(f"cannot look up blob {digest}") as conn:
            row = conn.execute("SELECT 1 FROM visus_blobs WHERE digest = %s", (digest,))
            return row.fetchone() is not None

    def media_type(self, digest: str) -> str | None:
        validate_digest(digest)
        with self.db.tx(f"cannot look up blob {digest}") as conn:
            row = conn.execute(
                "SELECT media_type FROM visus_blobs WHERE digest = %s", (digest,)
            ).fetchone()
        return None if row is None else str(row[0])

    def digests(self) -> Iterator[str]:
        with self.db.tx("cannot list blobs") as conn:
            rows = conn.execute("SELECT digest FROM visus_blobs ORDER BY digest").fetchall()
        return iter([str(r[0]) for r in rows])

    def gc(self, live: Iterable[str]) -> int:
        """Remove every blob not in ``live`` (prefer :meth:`PostgresStore.gc`, which
        takes the live set from the database itself)."""
        keep = sorted({d for d in live if isinstance(d, str)})
        with self.db.tx("cannot collect blobs") as conn:
            cur = conn.execute("DELETE FROM visus_blobs WHERE NOT (digest = ANY(%s))", (keep,))
            return cur.rowcount

    def corrupt(self, digest: str, data: bytes) -> None:
        """Replace a blob's bytes without rehashing, to test integrity checks."""
        with self.db.tx("cannot corrupt blob") as conn:
            conn.execute("UPDATE visus_blobs SET data = %s WHERE digest = %s", (data, digest))
