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
    (
        4,
        # A batch of frames (a turn's coalesced deltas with its final frame, say) in one
        # round trip: the function checks the turn is still the caller's, takes the next
        # seqs, writes each frame's body around its seq (the client sends the bytes
        # before and after it: the seq is known only here), evicts past the ring's
        # bounds exactly as one-by-one appends would (the longest suffix that fits, the
        # newest frame always), queues or finishes the turn and notifies, all in the one
        # transaction of the statement that calls it. NULL: the turn is not the
        # caller's any more (its lease ran out and another replica took it over).
        """
        CREATE FUNCTION visus_append(
            p_instance text, p_sessions text[], p_sizes integer[], p_heads bytea[],
            p_tails bytea[], p_turn bigint, p_owner text, p_finish boolean,
            p_queue boolean, p_msg_id text, p_max_frames integer, p_max_bytes bigint
        ) RETURNS bigint LANGUAGE plpgsql AS $$
        DECLARE
            n integer := cardinality(p_sizes);
            v_last bigint;
            v_first bigint;
            v_frames integer;
            v_bytes bigint;
            v_cut bigint := 0;
            v_gone_frames integer := 0;
            v_gone_bytes bigint := 0;
            r record;
        BEGIN
            IF p_turn IS NOT NULL THEN
                PERFORM 1 FROM visus_turns WHERE instance_id = p_instance AND seq = p_turn
                    AND state = 'running' AND owner = p_owner FOR UPDATE;
                IF NOT FOUND THEN
                    RETURN NULL;
                END IF;
            END IF;
            UPDATE visus_instances SET last_seq = last_seq + n, ring_frames = ring_frames + n,
                ring_bytes = ring_bytes + (SELECT coalesce(sum(s), 0) FROM unnest(p_sizes) s)
                WHERE id = p_instance
                RETURNING last_seq, ring_frames, ring_bytes INTO v_last, v_frames, v_bytes;
            IF NOT FOUND THEN
                RAISE EXCEPTION 'instance % not found', p_instance USING ERRCODE = 'P0002';
            END IF;
            v_first := v_last - n + 1;
            INSERT INTO visus_frames (instance_id, seq, session, size, body)
                SELECT p_instance, v_first + i - 1, p_sessions[i], p_sizes[i],
                    p_heads[i] || convert_to((v_first + i - 1)::text, 'UTF8') || p_tails[i]
                FROM generate_subscripts(p_sizes, 1) i;
            IF v_frames > p_max_frames OR v_bytes > p_max_bytes THEN
                FOR r IN SELECT seq, size FROM visus_frames
                        WHERE instance_id = p_instance AND seq < v_last ORDER BY seq LOOP
                    EXIT WHEN v_frames - v_gone_frames <= p_max_frames
                        AND v_bytes - v_gone_bytes <= p_max_bytes;
                    v_cut := r.seq;
                    v_gone_frames := v_gone_frames + 1;
                    v_gone_bytes := v_gone_bytes + r.size;
                END LOOP;
                IF v_cut > 0 THEN
                    DELETE FROM visus_frames WHERE instance_id = p_instance AND seq <= v_cut;
                    UPDATE visus_instances SET ring_frames = ring_frames - v_gone_frames,
                        ring_bytes = ring_bytes - v_gone_bytes, evicted_upto = v_cut
                        WHERE id = p_instance;
                END IF;
            END IF;
            IF p_queue THEN
                INSERT INTO visus_turns (instance_id, seq, session, state, request, msg_id)
                    VALUES (p_instance, v_first, p_sessions[1], 'queued',
                        p_heads[1] || convert_to(v_first::text, 'UTF8') || p_tails[1], p_msg_id);
                PERFORM pg_notify('visus_turns', p_instance);
            END IF;
            IF p_finish AND p_turn IS NOT NULL THEN
                UPDATE visus_turns SET state = 'done', request = NULL, lease_until = NULL
                    WHERE instance_id = p_instance AND seq = p_turn;
            END IF;
            PERFORM pg_notify('visus_frames', p_instance || ':' || v_last);
            RETURN v_first;
        END
        $$;
        """,
    ),
)

#: The newest schema this code knows.
SCHEMA_VERSION: Final = MIGRATIONS[-1][0]
