"""The PostgreSQL store's schema: migrated on open, once; newer or missing ones refused."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from typer.testing import CliRunner

from tests.pgcluster import Cluster, create_database, drop_database
from tests.timing import within
from visus.cli import app
from visus.errors import StoreError
from visus.store import NewFrame
from visus.store.postgres import PostgresStore
from visus.store.schema import MIGRATIONS, SCHEMA_VERSION


def _frame(session: str = "s", text: str = "x") -> NewFrame:
    """A frame to append: the store writes ``{"seq":<n>,"text":...}``."""
    return NewFrame(session, len(text), b'{"seq":', b',"text":"%s"}' % text.encode())


def _older(url: str, version: int) -> None:
    """The schema as a replica of ``version`` left it."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE visus_schema (version integer NOT NULL)")
        for _, sql in MIGRATIONS[:version]:
            conn.execute(sql)  # type: ignore[arg-type]
        conn.execute("INSERT INTO visus_schema VALUES (%s)", (version,))


def _version(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT version FROM visus_schema").fetchone()
        assert row is not None
        return int(row[0])


def test_open_migrates_once_and_refuses_a_newer_schema(pg_cluster: Cluster) -> None:
    url = create_database(pg_cluster)
    try:
        with pytest.raises(StoreError, match="visus store migrate"):
            PostgresStore(url, migrate=False)  # an empty database is not run against
        first = PostgresStore(url)
        assert (first.migrated_from, first.schema_version) == (0, SCHEMA_VERSION)
        second = PostgresStore(url, migrate=False)
        assert second.migrated_from == SCHEMA_VERSION
        first.close()
        second.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("UPDATE visus_schema SET version = %s", (SCHEMA_VERSION + 1,))
        for migrate in (True, False):
            with pytest.raises(StoreError, match=f"version {SCHEMA_VERSION + 1}"):
                PostgresStore(url, migrate=migrate)
        assert _version(url) == SCHEMA_VERSION + 1  # untouched
    finally:
        drop_database(pg_cluster, url)


def test_cli_store_migrate_and_gc(pg_cluster: Cluster) -> None:
    url = create_database(pg_cluster)
    runner = CliRunner()
    try:
        out = runner.invoke(app, ["store", "migrate", "--store", url])
        assert out.exit_code == 0, out.output
        assert f"from version 0 to {SCHEMA_VERSION}" in out.output
        out = runner.invoke(app, ["store", "migrate"], env={"VISUS_STORE": url})
        assert out.exit_code == 0
        assert "nothing to do" in out.output
        store = PostgresStore(url)
        digest = store.blobs().put(b"orphan", "image/png")
        store.close()
        out = runner.invoke(app, ["gc", "--store", url, "--grace", "0"])
        assert out.exit_code == 0, out.output
        assert "removed 1 unreferenced blob from the database" in out.output
        store = PostgresStore(url)
        assert not store.blobs().has(digest)
        store.close()
        bad = runner.invoke(app, ["store", "migrate", "--store", "mysql://x/y"])
        assert bad.exit_code == 2
        assert "postgresql://" in bad.output
    finally:
        drop_database(pg_cluster, url)


def test_a_version_1_database_keeps_its_turns_when_migrated(pg_cluster: Cluster) -> None:
    """Migration 2 (stops by msg_id) on a database a version-1 replica wrote."""
    url = create_database(pg_cluster)
    try:
        _older(url, 1)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO visus_instances (id, config, created) VALUES ('i', '{}', 'now')"
            )
            conn.execute(
                "INSERT INTO visus_turns (instance_id, seq, session, state, request) "
                "VALUES ('i', 1, 's', 'queued', 'x')"
            )
        store = PostgresStore(url)
        assert (store.migrated_from, store.schema_version) == (1, SCHEMA_VERSION)
        store.close()
        with psycopg.connect(url) as conn:
            row = conn.execute(
                "SELECT state, request, msg_id, stop_requested FROM visus_turns"
            ).fetchone()
        assert row == ("queued", b"x", None, False)  # still runs; only a stop cannot name it
    finally:
        drop_database(pg_cluster, url)


async def test_a_stopped_turn_taken_over_from_a_dead_replica_says_so(pg_cluster: Cluster) -> None:
    """A stop asked while replica A ran the turn, then A died: the replica that takes
    the turn over learns it was stopped (so it ends as cancelled, not interrupted)."""
    url = create_database(pg_cluster)
    # Long enough that B's claim right after A's renewal comes within it on a loaded
    # machine; A's death is then waited out.
    lease = within(0.5)
    a = PostgresStore(url, replica="a", lease_seconds=lease)
    b = PostgresStore(url, replica="b", lease_seconds=lease)
    try:
        await a.start()
        await b.start()
        await asyncio.to_thread(a.put_instance, {"id": "i", "created": "now"})
        seq = await a.append_frames("i", [_frame()], queue=True, request_id="m1")
        claimed = await a.claim_turn()
        assert claimed is not None
        assert (claimed.seq, claimed.expired, claimed.stopped) == (seq, False, False)
        assert await b.stop_turn("i", "s", "m1") == "running"
        assert await a.renew_leases() == [("i", seq)]  # renewed, and it was asked to stop
        assert await b.claim_turn() is None  # A's lease still runs
        await asyncio.sleep(lease + 0.3)  # A died: it renews nothing
        taken = await b.claim_turn()
        assert taken is not None
        assert (taken.seq, taken.expired, taken.stopped, taken.owner) == (seq, True, True, "b")
        assert await a.stop_turn("i", "s", "nobody") is None
    finally:
        await a.aclose()
        await b.aclose()
        drop_database(pg_cluster, url)


def test_a_version_2_database_keeps_its_sessions_and_gains_attachments(
    pg_cluster: Cluster,
) -> None:
    """Migration 3 (attachments in the database) on a database a version-2 replica wrote."""
    url = create_database(pg_cluster)
    try:
        _older(url, 2)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO visus_sessions (namespace, id, created, modified) "
                "VALUES ('instances/i', 'chat', 1, 1)"
            )
        with pytest.raises(StoreError, match="visus store migrate"):
            PostgresStore(url, migrate=False)  # a v3 replica never runs on a v2 schema
        store = PostgresStore(url)
        assert (store.migrated_from, store.schema_version) == (2, SCHEMA_VERSION)
        assert store.sessions("instances/i").exists("chat")
        chat = store.attachments("instances/i", "chat")
        chat.put("a.txt", "aGk=", "text/plain")
        store.close()
        again = PostgresStore(url, migrate=False)
        assert again.attachments("instances/i", "chat").read_bytes("a.txt") == b"hi"
        again.close()
        assert _version(url) == SCHEMA_VERSION
    finally:
        drop_database(pg_cluster, url)


async def test_a_version_3_database_keeps_its_ring_and_turns_when_migrated(
    pg_cluster: Cluster,
) -> None:
    """Migration 4 (``visus_append``: a batch of frames in one round trip) on a database
    a version-3 replica wrote: its frames, seqs and queued turn go on as they were."""
    url = create_database(pg_cluster)
    try:
        _older(url, 3)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO visus_instances (id, config, created, last_seq, ring_frames, "
                "ring_bytes) VALUES ('i', '{}', 'now', 2, 2, 2)"
            )
            for seq in (1, 2):  # written by a v3 replica: the whole body in one piece
                conn.execute(
                    "INSERT INTO visus_frames VALUES ('i', %s, 's', 1, %s)",
                    (seq, b'{"seq":%d,"text":"old"}' % seq),
                )
            conn.execute(
                "INSERT INTO visus_turns (instance_id, seq, session, state, request, msg_id) "
                "VALUES ('i', 2, 's', 'queued', 'x', 'm2')"
            )
        with pytest.raises(StoreError, match="visus store migrate"):
            PostgresStore(url, migrate=False)  # a v4 replica never runs on a v3 schema
        store = PostgresStore(url, replica="r")
        assert (store.migrated_from, store.schema_version) == (3, SCHEMA_VERSION)
        await store.start()
        try:
            first = await store.append_frames("i", [_frame(text="a"), _frame(text="b")])
            assert first == 3
            page = await store.read_frames("i", 0, session=None, limit=None)
            assert [f.body for f in page.frames] == [
                b'{"seq":1,"text":"old"}',
                b'{"seq":2,"text":"old"}',
                b'{"seq":3,"text":"a"}',
                b'{"seq":4,"text":"b"}',
            ]
            claimed = await store.claim_turn()
            assert claimed is not None
            assert (claimed.seq, claimed.request, claimed.expired) == (2, b"x", False)
            stats = await store.ring_stats("i")
            assert (stats.last_seq, stats.frames, stats.bytes) == (4, 4, 4)
        finally:
            await store.aclose()
        assert _version(url) == SCHEMA_VERSION
    finally:
        drop_database(pg_cluster, url)
