"""The PostgreSQL ring takes a batch of frames in one round trip (``visus_append``):
seqs, bodies and eviction come out exactly as the same frames appended one by one."""

from __future__ import annotations

import asyncio
import random

from visus.store import NewFrame
from visus.store.postgres import PostgresStore


def _frames(seed: int, n: int) -> list[NewFrame]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        size = rng.choice([1, 5, 40, 300])
        text = b"x" * size
        out.append(NewFrame(f"s{i % 3}", size, b'{"seq":', b',"t":"%s"}' % text))
    return out


async def test_a_batch_evicts_and_numbers_exactly_as_one_by_one(pg_url: str) -> None:
    store = PostgresStore(pg_url, replica="r", max_frames=7, max_bytes=500)
    await store.start()
    try:
        for iid in ("one", "batch"):
            await asyncio.to_thread(store.put_instance, {"id": iid, "created": "now"})
        frames = _frames(1, 40)
        for f in frames:
            await store.append_frames("one", [f])
        rng = random.Random(2)
        at = 0
        while at < len(frames):
            step = rng.randint(1, 9)  # some batches alone are over both bounds
            first = await store.append_frames("batch", frames[at : at + step])
            assert first == at + 1
            at += step
        one, batch = await store.ring_stats("one"), await store.ring_stats("batch")
        assert one == batch
        assert one.frames <= 7
        assert one.bytes <= 500 or one.frames == 1
        pages = [await store.read_frames(i, 0, session=None, limit=None) for i in ("one", "batch")]
        assert pages[0] == pages[1]
        assert [f.body for f in pages[0].frames] == [
            b'{"seq":%d,"t":"%s"}' % (f.seq, b"x" * frames[f.seq - 1].size) for f in pages[0].frames
        ]
    finally:
        await store.aclose()


async def test_a_turn_another_replica_owns_takes_no_frame(pg_url: str) -> None:
    a = PostgresStore(pg_url, replica="a")
    b = PostgresStore(pg_url, replica="b")
    await a.start()
    await b.start()
    try:
        await asyncio.to_thread(a.put_instance, {"id": "t", "created": "now"})
        seq = await a.append_frames("t", _frames(3, 1), queue=True, request_id="m")
        claimed = await a.claim_turn()
        assert claimed is not None
        assert claimed.seq == seq
        assert await b.append_frames("t", _frames(4, 2), turn=seq) is None  # not b's
        before = await a.ring_stats("t")
        assert await a.append_frames("t", _frames(5, 2), turn=seq, finish=True) == seq + 1
        after = await a.ring_stats("t")
        assert after.last_seq == before.last_seq + 2
        assert (await a.ring_stats("t")).pending == 0  # finished with its last frames
        assert await a.append_frames("t", _frames(6, 1), turn=seq) is None  # done: nobody's
    finally:
        await a.aclose()
        await b.aclose()


async def test_a_batch_claim_takes_one_turn_per_session_in_order(pg_url: str) -> None:
    store = PostgresStore(pg_url, replica="w")
    await store.start()
    try:
        await asyncio.to_thread(store.put_instance, {"id": "q", "created": "now"})
        seqs = {}
        for n, session in enumerate(["s1", "s2", "s1", "s2"]):
            frame = NewFrame(session, 1, b'{"seq":', b"}")
            seqs[n] = await store.append_frames("q", [frame], queue=True, request_id=f"m{n}")
        assert (await store.ring_stats("q")).pending == 4
        first = await store.claim_turns(10)
        assert sorted(t.seq for t in first) == [seqs[0], seqs[1]]  # the second of each waits
        assert await store.claim_turns(10) == []
        done = NewFrame("s1", 1, b'{"seq":', b"}")
        await store.append_frames("q", [done], turn=seqs[0], finish=True)
        (nxt,) = await store.claim_turns(10)
        assert (nxt.seq, nxt.session) == (seqs[2], "s1")
    finally:
        await store.aclose()
