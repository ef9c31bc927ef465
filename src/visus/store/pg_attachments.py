"""A session's attachments in the PostgreSQL store (schema v3, ``visus_attachments``).

The same names, caps and errors as the file store's
:class:`~visus.attachments.AttachmentStore` (both run
:func:`~visus.attachments.prepare_upload` and :func:`~visus.attachments.admit`); what
differs is the lock. A put takes a transaction-scoped advisory lock on its session
(namespace and id), after one on its namespace (the caps over all its sessions), reads
the session's entries, admits the upload and inserts it in one transaction, so two
replicas uploading at once are serialised: the caps hold and no two files share a name.
Bytes are verified against their sha256 on every read, like blobs.

No psycopg import here: the connection comes from
:meth:`~visus.store.pg_conn.Database.tx`, which translates its errors.

Example:
    >>> store = PostgresStore("postgresql://visus@127.0.0.1/visus")  # doctest: +SKIP
    >>> chat = store.attachments("instances/i-1", "chat")  # doctest: +SKIP
    >>> chat.put("a.txt", "aGk=", "text/plain").name  # doctest: +SKIP
    'a.txt'
"""

from __future__ import annotations

import hashlib
from typing import Any

from visus.attachments.store import AttachmentCaps, AttachmentInfo, admit, prepare_upload
from visus.errors import NotFoundError, StoreError
from visus.store.pg_conn import Database

__all__ = ["PgAttachments"]

#: First key of the two-key advisory lock a put holds on its session. Two-int4 keys
#: never meet the one-bigint key migrations lock on (PostgreSQL keeps them apart).
_LOCK_CLASS = 0x76697361  # "visa"

_COLUMNS = "name, size, mime_type, sha256, original_name"


def _info(row: Any) -> AttachmentInfo:
    return AttachmentInfo(
        name=str(row[0]),
        size=int(row[1]),
        mime_type=str(row[2]),
        sha256=str(row[3]),
        original_name=str(row[4]),
    )


class PgAttachments:
    """:class:`~visus.attachments.SessionAttachments` of one session in the database."""

    def __init__(
        self,
        db: Database,
        namespace: str,
        session_id: str,
        caps: AttachmentCaps | None = None,
    ) -> None:
        self.db = db
        self.namespace = namespace
        self.session_id = session_id
        self.caps = caps or AttachmentCaps()

    def __repr__(self) -> str:
        return f"PgAttachments(namespace={self.namespace!r}, session={self.session_id!r})"

    def put(self, filename: str, content_base64: str, mime_type: str) -> AttachmentInfo:
        """Store a file; returns its info (``name`` may differ from ``filename``).

        Re-sending the same name with the same bytes returns the existing entry.
        Raises ``InvalidInputError`` (bad base64 or MIME type), ``TooLargeError``
        (per-file cap) or ``LimitError`` (per-session bytes or file count).
        """
        up = prepare_upload(filename, content_base64, mime_type, self.caps)
        key = f"{self.namespace}/{self.session_id}"
        with self.db.tx(f"cannot store attachment {up.wanted!r}") as conn:
            # The namespace first (its sessions' caps together), then the session.
            lock = "SELECT pg_advisory_xact_lock(%s, hashtext(%s))"
            conn.execute(lock, (_LOCK_CLASS + 1, self.namespace))
            conn.execute(lock, (_LOCK_CLASS, key))
            files = self._rows(conn)
            info, new = admit(files, up, self.caps)
            if new:
                count, size = conn.execute(
                    "SELECT count(*), coalesce(sum(size), 0) FROM visus_attachments "
                    "WHERE namespace = %s",
                    (self.namespace,),
                ).fetchone() or (0, 0)
                self.caps.check_instance(int(count), int(size), up)
                conn.execute(
                    "INSERT INTO visus_attachments (namespace, session, n, name, "
                    "original_name, mime_type, size, sha256, data) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    (
                        self.namespace,
                        self.session_id,
                        len(files) + 1,
                        info.name,
                        info.original_name,
                        info.mime_type,
                        info.size,
                        info.sha256,
                        up.data,
                    ),
                )
        return info

    def _rows(self, conn: Any) -> list[AttachmentInfo]:
        rows = conn.execute(
            f"SELECT {_COLUMNS} FROM visus_attachments WHERE namespace = %s AND session = %s "
            "ORDER BY n",
            (self.namespace, self.session_id),
        ).fetchall()
        return [_info(r) for r in rows]

    def list(self) -> list[AttachmentInfo]:
        """Every attachment, oldest first (without reading any bytes)."""
        with self.db.conn("cannot list attachments") as conn:
            return self._rows(conn)

    def info(self, name: str) -> AttachmentInfo:
        """The entry for ``name`` (exact stored name); ``NotFoundError`` if absent."""
        with self.db.conn(f"cannot look up attachment {name!r}") as conn:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM visus_attachments "
                "WHERE namespace = %s AND session = %s AND name = %s",
                (self.namespace, self.session_id, name),
            ).fetchone()
        if row is None:
            raise NotFoundError(f"no attachment named {name!r}")
        return _info(row)

    def read_bytes(self, name: str) -> bytes:
        """The attachment's bytes, checked against the sha256 recorded at upload."""
        with self.db.conn(f"cannot read attachment {name!r}") as conn:
            row = conn.execute(
                "SELECT sha256, data FROM visus_attachments "
                "WHERE namespace = %s AND session = %s AND name = %s",
                (self.namespace, self.session_id, name),
            ).fetchone()
        if row is None:
            raise NotFoundError(f"no attachment named {name!r}")
        data = bytes(row[1])
        if hashlib.sha256(data).hexdigest() != str(row[0]):
            raise StoreError(f"attachment {name!r} does not match its recorded sha256")
        return data
