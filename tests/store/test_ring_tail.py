"""A replica's own streams read what it just appended from memory (``ring_tail``), and
never miss what another replica wrote: a frame committed elsewhere, a notification
heard before the append it reports returned, a listener that lost its connection."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from tests.timing import within
from visus import limits
from visus.store import NewFrame
from visus.store.base import StoredFrame
from visus.store.postgres import PostgresStore
from visus.store.ring_tail import RingTails


def _f(seq: int, body: bytes = b"x", session: str = "s") -> StoredFrame:
    return StoredFrame(seq, session, body)


def _new(text: str, session: str = "s") -> NewFrame:
    return NewFrame(session, len(text), b'{"seq":', b',"own":"%s"}' % text.encode())


def test_a_tail_answers_only_what_it_holds_gap_free() -> None:
    tails = RingTails()
    tails.add("i", [_f(5), _f(6)])
    tails.add("i", [_f(9)])  # not contiguous: the tail starts again at 9
    assert tails.page("i", 6, session=None, cap=10, waiting=False) is None
    page = tails.page("i", 8, session=None, cap=10, waiting=False)
    assert page is not None
    assert [f.seq for f in page.frames] == [9]
    tails.add("i", [_f(9), _f(10), _f(11, session="own")])  # overlap: only the new ones
    page = tails.page("i", 8, session="s", cap=10, waiting=False)
    assert page is not None
    assert [f.seq for f in page.frames] == [9, 10]
    assert page.next_seq == 11  # a session's reader skips the others' frames
    capped = tails.page("i", 8, session=None, cap=2, waiting=False)
    assert capped is not None
    assert (capped.next_seq, len(capped.frames)) == (10, 2)
    assert tails.page("i", 12, session=None, cap=10, waiting=True) is None  # ahead of it


def test_nothing_newer_is_said_only_to_a_waiting_reader_and_only_if_nothing_was_heard() -> None:
    tails = RingTails()
    tails.heard("i", 3)  # heard before the append that wrote it returned
    tails.add("i", [_f(1), _f(2)])
    assert tails.page("i", 2, session=None, cap=10, waiting=True) is None
    tails.add("i", [_f(3)])
    empty = tails.page("i", 3, session=None, cap=10, waiting=True)
    assert empty is not None
    assert empty.frames == ()
    assert tails.page("i", 3, session=None, cap=10, waiting=False) is None  # read-your-writes
    tails.clear()  # the listener was lost
    assert tails.page("i", 2, session=None, cap=10, waiting=True) is None


def test_a_tail_is_bounded() -> None:
    tails = RingTails()
    big = b"y" * (limits.PG_TAIL_FRAME_BYTES + 1)
    tails.add("i", [_f(1), _f(2, big), _f(3)])  # the big frame is not kept
    assert tails.page("i", 1, session=None, cap=10, waiting=False) is None
    page = tails.page("i", 2, session=None, cap=10, waiting=False)
    assert page is not None
    assert [f.seq for f in page.frames] == [3]
    n = limits.PG_TAIL_FRAMES + 10
    tails.add("j", [_f(k) for k in range(1, n + 1)])
    assert tails.page("j", 9, session=None, cap=1000, waiting=False) is None
    kept = tails.page("j", 10, session=None, cap=1000, waiting=False)
    assert kept is not None
    assert len(kept.frames) == limits.PG_TAIL_FRAMES
    for k in range(limits.PG_TAIL_INSTANCES + 1):
        tails.add(f"k{k}", [_f(1)])
    assert tails.page("i", 2, session=None, cap=10, waiting=False) is None  # dropped


def _count_reads(store: PostgresStore) -> list[int]:
    reads: list[int] = []
    real = store.read_frames

    async def counted(*a: Any, **kw: Any) -> Any:
        reads.append(1)
        return await real(*a, **kw)

    store.read_frames = counted  # type: ignore[method-assign]
    return reads


@pytest.fixture
async def pair(pg_url: str) -> AsyncIterator[tuple[PostgresStore, PostgresStore]]:
    """Two replicas on one database, their listeners connected."""
    a = PostgresStore(pg_url, replica="a")
    b = PostgresStore(pg_url, replica="b")
    await a.start()
    await b.start()
    try:
        deadline = time.monotonic() + within(10)
        while time.monotonic() < deadline:
            if a._epoch >= 0 and b._epoch >= 0:
                break
            await asyncio.sleep(0.02)
        yield a, b
    finally:
        await a.aclose()
        await b.aclose()


async def test_own_frames_come_from_memory_and_others_from_the_database(
    pair: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = pair
    await asyncio.to_thread(a.put_instance, {"id": "own", "created": "now"})
    reads = _count_reads(a)
    await a.append_frames("own", [_new("one"), _new("two")])
    page = await a.wait_frames("own", 0, session=None, limit=100, timeout=5)
    assert [f.body for f in page.frames] == [b'{"seq":1,"own":"one"}', b'{"seq":2,"own":"two"}']
    assert reads == []  # its own frames, from memory
    waiting = asyncio.create_task(a.wait_frames("own", 2, session=None, limit=100, timeout=30))
    await asyncio.sleep(0.1)
    await b.append_frames("own", [_new("three")])  # another replica's frame
    page = await asyncio.wait_for(waiting, within(5))
    assert [f.body for f in page.frames] == [b'{"seq":3,"own":"three"}']
    assert reads  # read from the database, woken by the notification


async def test_a_lost_listener_misses_nothing(
    pair: tuple[PostgresStore, PostgresStore], pg_url: str
) -> None:
    a, b = pair
    await asyncio.to_thread(a.put_instance, {"id": "lost", "created": "now"})
    await a.append_frames("lost", [_new("one")])
    page = await a.wait_frames("lost", 0, session=None, limit=100, timeout=5)
    assert len(page.frames) == 1
    with psycopg.connect(pg_url, autocommit=True) as conn:  # every listener dies
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE query LIKE 'LISTEN%%' AND pid <> pg_backend_pid()"
        )
    await b.append_frames("lost", [_new("two")])  # its notification may never reach a
    # Found on reconnecting (well before the wait's own 30 s), not at its end.
    waiting = a.wait_frames("lost", 1, session=None, limit=100, timeout=30)
    page = await asyncio.wait_for(waiting, 10)
    assert [f.seq for f in page.frames] == [2]
