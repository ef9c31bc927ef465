"""Blobs on PostgreSQL are content-addressed: a blob already stored is not sent again
(by this replica or another), a large one is streamed by COPY in chunks, and a damaged
copy (wrong size) is replaced whichever way the true bytes come."""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from visus.store import pg_blobs
from visus.store.postgres import PostgresStore


@pytest.fixture
def streamed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Sizes of the blobs written by COPY (the real function runs)."""
    sizes: list[int] = []
    real = pg_blobs._stream

    def spy(conn: object, digest: str, media_type: str, data: memoryview) -> None:
        sizes.append(len(data))
        real(conn, digest, media_type, data)  # type: ignore[arg-type]

    monkeypatch.setattr(pg_blobs, "_stream", spy)
    return sizes


def _sent(store: PostgresStore, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The bytes of every bytes-like parameter ``store``'s sync calls send."""
    sent: list[int] = []
    real = store.db.conn

    @contextlib.contextmanager
    def conn(what: str) -> Iterator[Any]:
        with real(what) as c:
            execute = c.execute

            def spy(query: Any, params: Any = None, **kw: Any) -> Any:
                values = params.values() if isinstance(params, dict) else params or ()
                sent.extend(len(v) for v in values if isinstance(v, bytes | memoryview))
                return execute(query, params, **kw)

            c.execute = spy  # type: ignore[method-assign]
            try:
                yield c
            finally:
                del c.execute

    monkeypatch.setattr(store.db, "conn", conn)
    return sent


def test_a_stored_blob_is_not_sent_again_by_any_replica(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = PostgresStore(pg_url, replica="a"), PostgresStore(pg_url, replica="b")
    sent = _sent(b, monkeypatch)
    try:
        data = os.urandom(5000)
        mine = a.blobs()
        digest = mine.put(data, "image/png")
        assert mine.writes == 1
        assert mine.put(data, "image/png") == digest
        assert mine.writes == 1
        again = b.blobs()  # another replica: nothing in its memory
        assert again.put(data, "image/png") == digest
        assert again.put(bytearray(data), "image/png") == digest
        assert again.writes == 0  # asked by digest first, found, not sent
        assert sent == []  # not a byte of it went to the database
        again.put(os.urandom(300), "image/png")  # a new one is sent (the spy sees it)
        assert sent == [300]
        assert again.get(digest) == data
    finally:
        a.close()
        b.close()


def test_a_large_blob_is_streamed_and_read_back_whole(pg_url: str, streamed: list[int]) -> None:
    store = PostgresStore(pg_url, replica="r")
    try:
        big = os.urandom(pg_blobs.STREAM_OVER * 3 + 17)
        small = os.urandom(1000)
        blobs = store.blobs()
        digest = blobs.put(big, "application/pdf")
        blobs.put(small, "image/png")
        assert streamed == [len(big)]  # the small one went in one statement
        assert digest == hashlib.sha256(big).hexdigest()
        fresh = PostgresStore(pg_url, replica="s")  # no cache: from the database
        try:
            assert fresh.blobs().get(digest) == big
            assert fresh.blobs().media_type(digest) == "application/pdf"
        finally:
            fresh.close()
    finally:
        store.close()


@pytest.mark.parametrize("size", [100, pg_blobs.STREAM_OVER + 1])
def test_a_damaged_copy_is_replaced_by_the_true_bytes(
    pg_url: str, streamed: list[int], size: int
) -> None:
    store = PostgresStore(pg_url, replica="r")
    try:
        data = os.urandom(size)
        digest = store.blobs().put(data, "image/png")
        with psycopg.connect(pg_url, autocommit=True) as conn:  # truncated on disk
            conn.execute(
                "UPDATE visus_blobs SET data = substring(data from 1 for 10) WHERE digest = %s",
                (digest,),
            )
        fresh = PostgresStore(pg_url, replica="s")
        try:
            blobs = fresh.blobs()
            assert blobs.put(data, "image/png") == digest
            assert blobs.writes == 1  # the damaged copy did not count as stored
            again = PostgresStore(pg_url, replica="t")
            try:
                assert again.blobs().get(digest) == data
            finally:
                again.close()
        finally:
            fresh.close()
    finally:
        store.close()
