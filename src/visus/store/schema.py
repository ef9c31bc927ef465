"""The PostgreSQL store's schema: numbered migrations, applied in order, once.

``visus_schema`` holds one row with the version the database is at. A store opening
a database runs the migrations it lacks under an advisory lock (two replicas starting
at once migrate once) and refuses a database at a version newer than it knows: an
older replica never writes into a schema it does not understand.
"""

from __future__ import annotations

from typing import Final

__all__ = ["LOCK_KEY", "MIGRATIONS", "SCHEMA_VERSION"]

#: pg_advisory_xact_lock key serialising migrations ("visus" in ASCII).
LOCK_KEY: Final = 0x7669737573

#: (version, statements). Never edit a released migration; append a new one.
MIGRATIONS: Final[tuple[tuple[int, str], ...]] = (
    (
        1,
        """
        CREATE TABLE visus_instances (
            id            text PRIMARY KEY,
            config        jsonb NOT NULL,
            created       text NOT NULL,
            last_seq      bigint NOT NULL DEFAULT 0,
            evicted_upto  bigint NOT NULL DEFAULT 0,
            ring_frames   integer NOT NULL DEFAULT 0,
            ring_bytes    bigint NOT NULL DEFAULT 0
        );
        CREATE TABLE visus_frames (
            instance_id  text NOT NULL REFERENCES visus_instances(id) ON DELETE CASCADE,
            seq          bigint NOT NULL,
            session      text NOT NULL,
            size         integer NOT NULL,
            body         bytea NOT NULL,
            PRIMARY KEY (instance_id, seq)
        );
        CREATE TABLE visus_turns (
            instance_id  text NOT NULL REFERENCES visus_instances(id) ON DELETE CASCADE,
            seq          bigint NOT NULL,
            session      text NOT NULL,
            state        text NOT NULL CHECK (state IN ('queued', 'running', 'done')),
            owner        text,
            lease_until  timestamptz,
            attempts     integer NOT NULL DEFAULT 0,
            taken_over   boolean NOT NULL DEFAULT false,
            request      bytea,
            created      timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (instance_id, seq)
        );
        CREATE INDEX visus_turns_open ON visus_turns (state, instance_id, session, seq)
            WHERE state <> 'done';
        CREATE TABLE visus_sessions (
            namespace  text NOT NULL,
            id         text NOT NULL,
            created    double precision NOT NULL,
            modified   double precision NOT NULL,
            meta       jsonb NOT NULL DEFAULT '{}',
            messages   integer NOT NULL DEFAULT 0,
            turns      integer NOT NULL DEFAULT 0,
            size       bigint NOT NULL DEFAULT 0,
            PRIMARY KEY (namespace, id)
        );
        CREATE TABLE visus_messages (
            namespace  text NOT NULL,
            session    text NOT NULL,
            n          integer NOT NULL,
            record     text NOT NULL,
            PRIMARY KEY (namespace, session, n),
            FOREIGN KEY (namespace, session) REFERENCES visus_sessions (namespace, id)
                ON DELETE CASCADE
        );
        CREATE TABLE visus_blobs (
            digest      text PRIMARY KEY CHECK (digest ~ '^[0-9a-f]{64}$'),
            media_type  text NOT NULL,
            size        integer NOT NULL,
            data        bytea NOT NULL,
            created     timestamptz NOT NULL DEFAULT now()
        );
        CREATE TABLE visus_message_blobs (
            digest     text NOT NULL,
            namespace  text NOT NULL,
            session    text NOT NULL,
            PRIMARY KEY (digest, namespace, session),
            FOREIGN KEY (namespace, session) REFERENCES visus_sessions (namespace, id)
                ON DELETE CASCADE
        );
        CREATE INDEX visus_message_blobs_session ON visus_message_blobs (namespace, session);
        -- Images are compressed already: store them out of line without trying pglz.
        ALTER TABLE visus_blobs ALTER COLUMN data SET STORAGE EXTERNAL;
        ALTER TABLE visus_frames ALTER COLUMN body SET STORAGE EXTERNAL;
        ALTER TABLE visus_turns ALTER COLUMN request SET STORAGE EXTERNAL;
        """,
    ),
    (
        2,
        # A stop (turn.cancel) names the request's msg_id, from any replica.
        """
        ALTER TABLE visus_turns ADD COLUMN msg_id text;
        ALTER TABLE visus_turns ADD COLUMN stop_requested boolean NOT NULL DEFAULT false;
        """,
    ),
    (
        3,
        # A session's attachments, shared by every replica (they were files in each
        # replica's own data folder). ``n`` keeps upload order; names are unique per
        # session (clashes are renamed before the insert, case-insensitively). The
        # bytes keep the default storage: unlike images, attachments are often text
        # that pglz compresses.
        """
        CREATE TABLE visus_attachments (
            namespace      text NOT NULL,
            session        text NOT NULL,
            n              integer NOT NULL,
            name           text NOT NULL,
            original_name  text NOT NULL,
            mime_type      text NOT NULL,
            size           integer NOT NULL,
            sha256         text NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
            data           bytea NOT NULL,
            created        timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (namespace, session, n),
            UNIQUE (namespace, session, name)
        );
        """,
    ),
)

#: The newest schema this code knows.
SCHEMA_VERSION: Final = MIGRATIONS[-1][0]
