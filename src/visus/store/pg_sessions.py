"""Sessions (their messages) in the PostgreSQL store: one namespace's
:class:`~visus.record.sessions.SessionLog`.

``visus_sessions`` holds a row per session (its counters and meta), ``visus_messages``
its messages in order (``n`` from 1), ``visus_message_blobs`` which blobs they name
(what blob collection keeps).

Example:
    >>> log = PgSessions(Database(url, pool_size=2), "instances/i-1")  # doctest: +SKIP
    >>> log.create("chat")  # doctest: +SKIP
    'chat'
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Hashable, Mapping
from types import MappingProxyType
from typing import Any

from visus.errors import InvalidInputError, NotFoundError, StoreError
from visus.record.codec import message_from_dict, message_to_dict
from visus.record.messages import Message
from visus.record.sessions import (
    LoadedSession,
    SessionInfo,
    _new_id,
    check_title,
    degrade_bad_blobs,
    validate_session_id,
)
from visus.store.pg_conn import Database

__all__ = ["PgSessions"]

_DIGEST_FIELD = re.compile(r'"digest"\s*:\s*"([0-9a-f]{64})"')
_EMPTY: Mapping[str, Any] = MappingProxyType({})


class PgSessions:
    """A :class:`~visus.record.sessions.SessionLog` in the database (one namespace).

    Every call is one statement (autocommit): an append updates the session's row,
    inserts the message and names its blobs in one statement, so it commits whole or
    not at all. ``revision`` is the session's message count.
    """

    def __init__(self, db: Database, namespace: str) -> None:
        self.db = db
        self.namespace = namespace

    def __repr__(self) -> str:
        return f"PgSessions(namespace={self.namespace!r})"

    def exists(self, session_id: str) -> bool:
        sid = validate_session_id(session_id)
        with self.db.conn(f"cannot look up session {sid!r}") as conn:
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
        with self.db.conn(f"cannot create session {sid!r}") as conn:
            row = conn.execute(
                "INSERT INTO visus_sessions (namespace, id, created, modified, meta) "
                "VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING id",
                (self.namespace, sid, now, now, meta_json),
            ).fetchone()
        if row is None:
            raise StoreError(f"session {sid!r} already exists")
        return sid

    def append(self, session_id: str, message: Message) -> int:
        """Record ``message``; return the session's revision after it (its count)."""
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
        with self.db.conn(f"cannot append to session {sid!r}") as conn:
            row = conn.execute(
                """
                WITH s AS (
                    UPDATE visus_sessions SET messages = messages + 1, modified = %(now)s,
                        turns = greatest(turns, %(turn)s), size = size + %(size)s
                    WHERE namespace = %(ns)s AND id = %(sid)s RETURNING messages),
                m AS (
                    INSERT INTO visus_messages (namespace, session, n, record)
                    SELECT %(ns)s, %(sid)s, messages, %(record)s FROM s RETURNING n),
                b AS (
                    INSERT INTO visus_message_blobs (digest, namespace, session)
                    SELECT d, %(ns)s, %(sid)s FROM unnest(%(digests)s::text[]) d
                    WHERE EXISTS (SELECT 1 FROM s)
                    ON CONFLICT DO NOTHING)
                SELECT n FROM m
                """,
                {
                    "now": time.time(),
                    "turn": message.turn,
                    "size": len(record),
                    "ns": self.namespace,
                    "sid": sid,
                    "record": record,
                    "digests": digests,
                },
            ).fetchone()
        if row is None:
            raise NotFoundError(f"no session {sid!r}")
        return int(row[0])

    def load(self, session_id: str, *, blobs: Any = None) -> LoadedSession:
        sid = validate_session_id(session_id)
        with self.db.conn(f"cannot read session {sid!r}") as conn:
            # One statement, so the head and the messages are of one snapshot.
            rows = conn.execute(
                "SELECT s.created, s.meta, m.n, m.record FROM visus_sessions s "
                "LEFT JOIN visus_messages m ON m.namespace = s.namespace AND m.session = s.id "
                "WHERE s.namespace = %s AND s.id = %s ORDER BY m.n",
                (self.namespace, sid),
            ).fetchall()
        if not rows:
            raise NotFoundError(f"no session {sid!r}")
        problems: list[str] = []
        messages: list[Message] = []
        for _, _, n, record in rows:
            if n is None:
                continue  # a session without messages
            try:
                messages.append(message_from_dict(json.loads(record)))
            except (InvalidInputError, TypeError, ValueError, RecursionError) as e:
                problems.append(f"message {n}: corrupt record skipped ({e})")
        if blobs is not None:
            messages = degrade_bad_blobs(messages, blobs, problems)
        meta = rows[0][1]
        return LoadedSession(
            id=sid,
            messages=tuple(messages),
            problems=tuple(problems),
            meta=MappingProxyType(dict(meta)) if isinstance(meta, dict) else _EMPTY,
            created=float(rows[0][0]),
        )

    def revision(self, session_id: str) -> Hashable:
        sid = validate_session_id(session_id)
        with self.db.conn(f"cannot read session {sid!r}") as conn:
            row = conn.execute(
                "SELECT messages FROM visus_sessions WHERE namespace = %s AND id = %s",
                (self.namespace, sid),
            ).fetchone()
        return -1 if row is None else int(row[0])

    def turn_count(self, session_id: str) -> int:
        sid = validate_session_id(session_id)
        with self.db.conn(f"cannot read session {sid!r}") as conn:
            row = conn.execute(
                "SELECT turns FROM visus_sessions WHERE namespace = %s AND id = %s",
                (self.namespace, sid),
            ).fetchone()
        if row is None:
            raise NotFoundError(f"no session {sid!r}")
        return int(row[0])

    def list(self) -> list[SessionInfo]:
        with self.db.conn("cannot list sessions") as conn:
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

    def title(self, session_id: str) -> str | None:
        sid = validate_session_id(session_id)
        with self.db.tx(f"cannot read session {sid!r}") as conn:
            row = conn.execute(
                "SELECT meta->>'title' FROM visus_sessions WHERE namespace = %s AND id = %s",
                (self.namespace, sid),
            ).fetchone()
        return None if row is None or not row[0] else str(row[0])

    def set_title(self, session_id: str, title: str | None) -> None:
        sid = validate_session_id(session_id)
        clean = check_title(title)
        with self.db.tx(f"cannot set the title of session {sid!r}") as conn:
            row = conn.execute(
                "UPDATE visus_sessions SET meta = CASE WHEN %s::text IS NULL THEN meta - 'title' "
                "ELSE jsonb_set(meta, '{title}', to_jsonb(%s::text)) END "
                "WHERE namespace = %s AND id = %s RETURNING id",
                (clean, clean, self.namespace, sid),
            ).fetchone()
        if row is None:
            raise NotFoundError(f"no session {sid!r}")

    def delete(self, session_id: str) -> bool:
        """Remove the session, its messages and attachments (blobs wait for ``gc``)."""
        sid = validate_session_id(session_id)
        with self.db.tx(f"cannot delete session {sid!r}") as conn:
            conn.execute(
                "DELETE FROM visus_attachments WHERE namespace = %s AND session = %s",
                (self.namespace, sid),
            )
            row = conn.execute(
                "DELETE FROM visus_sessions WHERE namespace = %s AND id = %s RETURNING id",
                (self.namespace, sid),
            ).fetchone()
        return row is not None

    def referenced_digests(self) -> set[str]:
        with self.db.conn("cannot collect referenced blobs") as conn:
            rows = conn.execute(
                "SELECT DISTINCT digest FROM visus_message_blobs WHERE namespace = %s",
                (self.namespace,),
            ).fetchall()
        return {str(r[0]) for r in rows}
