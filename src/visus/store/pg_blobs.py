"""Blobs in the PostgreSQL store: content-addressed bytea rows every namespace and
replica shares, verified against their digest when read.

A put asks first whether the digest is stored (one short statement): a blob already
there is never sent again. A new one goes in one statement, or, past
:data:`STREAM_OVER` bytes, streamed by ``COPY`` in chunks so no whole second copy is
built on the way. Reads come back in binary (no hex text twice the size) and the
blobs this process wrote or read stay in a small in-memory cache
(:data:`~visus.limits.PG_BLOB_CACHE_BYTES`): a turn lowers its live images on every
step, and content-addressed bytes never change.

Example:
    >>> blobs = PgBlobs(Database(url, pool_size=2))  # doctest: +SKIP
    >>> blobs.get(blobs.put(b"GIF89a...", "image/gif"))  # doctest: +SKIP
    b'GIF89a...'
"""

from __future__ import annotations

import hashlib
import struct
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from typing import Any

from visus import limits
from visus.errors import IntegrityError, NotFoundError
from visus.record.blobs import validate_digest
from visus.store.pg_conn import Database

try:
    import psycopg
except ImportError as e:  # pragma: no cover - the extra is missing
    raise ImportError(
        "the PostgreSQL store needs psycopg: pip install -e '.[postgres]' in the checkout"
    ) from e

__all__ = ["STREAM_OVER", "BlobCache", "PgBlobs"]

#: Blobs larger than this are streamed with COPY, in chunks of this size.
STREAM_OVER = 1024 * 1024

# Stored with the right size: then it is touched (a blob re-put is in use: blob
# collection must not take it before the message naming it is recorded), at most once
# a minute so a blob viewed on every step is not rewritten on every step.
_PRESENT = """
    WITH touched AS (
        UPDATE visus_blobs SET created = now()
        WHERE digest = %(d)s AND octet_length(data) = %(n)s
          AND created < now() - interval '1 minute')
    SELECT EXISTS (SELECT 1 FROM visus_blobs WHERE digest = %(d)s AND octet_length(data) = %(n)s)
"""
# Written once; a copy of the wrong size (damaged) is replaced by the true bytes.
_INSERT = (
    "INSERT INTO visus_blobs (digest, media_type, size, data) VALUES (%s, %s, %s, %b) "
    "ON CONFLICT (digest) DO UPDATE SET data = EXCLUDED.data, size = EXCLUDED.size "
    "WHERE octet_length(visus_blobs.data) <> EXCLUDED.size"
)
_COPY = "COPY visus_blobs (digest, media_type, size, data) FROM STDIN (FORMAT BINARY)"


class BlobCache:
    """The blobs one process wrote or read and verified, newest kept, up to
    ``max_bytes`` in all (thread-safe: the store is called from worker threads).

    Example:
        >>> cache = BlobCache(max_bytes=4)
        >>> cache.put("a", b"12"); cache.put("b", b"345"); cache.get("a") is None
        True
    """

    def __init__(self, max_bytes: int = limits.PG_BLOB_CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, bytes] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def get(self, digest: str) -> bytes | None:
        with self._lock:
            data = self._items.get(digest)
            if data is not None:
                self._items.move_to_end(digest)
            return data

    def put(self, digest: str, data: bytes) -> None:
        if len(data) > self.max_bytes // 4:
            return  # one big blob would push out everything else
        with self._lock:
            if digest in self._items:
                self._items.move_to_end(digest)
                return
            self._items[digest] = data
            self._size += len(data)
            while self._size > self.max_bytes:
                _, old = self._items.popitem(last=False)
                self._size -= len(old)

    def forget(self, digest: str) -> None:
        with self._lock:
            old = self._items.pop(digest, None)
            self._size -= len(old) if old is not None else 0

    def clear(self) -> None:
        """Forget everything (blobs were collected)."""
        with self._lock:
            self._items.clear()
            self._size = 0


class PgBlobs:
    """A :class:`~visus.record.blobs.BlobStore` in the database: bytea rows, written
    once, verified against their digest when read (and then cached)."""

    def __init__(self, db: Database, cache: BlobCache | None = None) -> None:
        self.db = db
        self.cache = cache if cache is not None else BlobCache()
        self.reads = 0
        self.writes = 0

    def __repr__(self) -> str:
        return "PgBlobs()"

    def put(self, data: bytes, media_type: str) -> str:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"blob data must be bytes, not {type(data).__name__}")
        view = memoryview(data).cast("B")
        digest = hashlib.sha256(view).hexdigest()
        with self.db.conn(f"cannot write blob {digest}") as conn:
            row = conn.execute(_PRESENT, {"d": digest, "n": len(view)}).fetchone()
            if not (row and row[0]):
                if len(view) > STREAM_OVER:
                    _stream(conn, digest, media_type, view)
                else:
                    conn.execute(_INSERT, (digest, media_type, len(view), view))
                self.writes += 1
        if isinstance(data, bytes):
            self.cache.put(digest, data)
        return digest

    def get(self, digest: str) -> bytes:
        validate_digest(digest)
        cached = self.cache.get(digest)
        if cached is not None:
            return cached
        with self.db.conn(f"cannot read blob {digest}") as conn:
            row = conn.execute(
                "SELECT data FROM visus_blobs WHERE digest = %s", (digest,), binary=True
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
        self.cache.put(digest, data)
        return data

    def has(self, digest: str) -> bool:
        validate_digest(digest)
        with self.db.conn(f"cannot look up blob {digest}") as conn:
            row = conn.execute("SELECT 1 FROM visus_blobs WHERE digest = %s", (digest,))
            return row.fetchone() is not None

    def media_type(self, digest: str) -> str | None:
        validate_digest(digest)
        with self.db.conn(f"cannot look up blob {digest}") as conn:
            row = conn.execute(
                "SELECT media_type FROM visus_blobs WHERE digest = %s", (digest,)
            ).fetchone()
        return None if row is None else str(row[0])

    def digests(self) -> Iterator[str]:
        with self.db.conn("cannot list blobs") as conn:
            rows = conn.execute("SELECT digest FROM visus_blobs ORDER BY digest").fetchall()
        return iter([str(r[0]) for r in rows])

    def gc(self, live: Iterable[str]) -> int:
        """Remove every blob not in ``live`` (prefer :meth:`PostgresStore.gc`, which
        takes the live set from the database itself)."""
        keep = sorted({d for d in live if isinstance(d, str)})
        with self.db.conn("cannot collect blobs") as conn:
            cur = conn.execute("DELETE FROM visus_blobs WHERE NOT (digest = ANY(%s))", (keep,))
        self.cache.clear()
        return cur.rowcount

    def corrupt(self, digest: str, data: bytes) -> None:
        """Replace a blob's bytes without rehashing, to test integrity checks."""
        with self.db.conn("cannot corrupt blob") as conn:
            conn.execute("UPDATE visus_blobs SET data = %s WHERE digest = %s", (data, digest))
        self.cache.forget(digest)


def _stream(conn: psycopg.Connection[Any], digest: str, media_type: str, data: memoryview) -> None:
    """Write one blob row with ``COPY ... (FORMAT BINARY)``, its bytes in chunks."""
    digest_b, type_b = digest.encode(), media_type.encode()
    head = b"".join(
        [
            b"PGCOPY\n\xff\r\n\x00",  # signature
            struct.pack("!ii", 0, 0),  # flags, header extension
            struct.pack("!h", 4),  # fields in the row
            struct.pack("!i", len(digest_b)),
            digest_b,
            struct.pack("!i", len(type_b)),
            type_b,
            struct.pack("!ii", 4, len(data)),  # size (int4)
            struct.pack("!i", len(data)),  # data (bytea) follows
        ]
    )
    try:
        with conn.transaction():
            # A copy of the wrong size (damaged) goes; the right one was not found.
            conn.execute("DELETE FROM visus_blobs WHERE digest = %s", (digest,))
            with conn.cursor() as cur, cur.copy(_COPY) as copy:
                copy.write(head)
                for start in range(0, len(data), STREAM_OVER):
                    copy.write(data[start : start + STREAM_OVER])
                copy.write(struct.pack("!h", -1))  # end of data
    except psycopg.errors.UniqueViolation:
        pass  # another replica stored the same bytes at the same moment
