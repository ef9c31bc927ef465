from __future__ import annotations

import asyncio
import base64

import pytest

from tests.timing import within
from visus import limits
from visus.tether.frames import AssistantDelta, AssistantDone, Frame, Image, encode_payload
from visus.tether.ring import Ring, RingPool


def text(t: str, session: str = "s") -> Frame:
    return Frame(AssistantDelta(t), session, "m")


def image_frame(size: int) -> Frame:
    data = base64.b64encode(b"\0" * size).decode()
    return Frame(AssistantDone("chart", (Image("image/png", data),)), "s", "m")


async def test_seq_is_monotonic_and_read_pages() -> None:
    ring = Ring()
    for i in range(5):
        f = await ring.append(text(str(i)))
        assert f.seq == i + 1
        assert f.ts
    page = ring.read(2, limit=2)
    assert [f.seq for f in page.frames] == [3, 4]
    assert page.next_seq == 4
    assert not page.gap
    page = ring.read(page.next_seq)
    assert [f.seq for f in page.frames] == [5]
    assert page.next_seq == 5
    frames, next_seq, gap = ring.read(3)
    assert ([f.seq for f in frames], next_seq, gap) == ([4, 5], 5, False)
    empty = ring.read(5)
    assert empty.frames == ()
    assert empty.next_seq == 5
    assert not empty.gap


async def test_session_filter_moves_the_cursor_past_other_sessions() -> None:
    ring = Ring()
    for s in "abab":
        await ring.append(text(s, session=s))
    page = ring.read(0, session="a")
    assert [f.seq for f in page.frames] == [1, 3]
    assert page.next_seq == 4  # the b frame at 4 need not be scanned again
    assert ring.read(4, session="a").frames == ()


async def test_count_cap_evicts_oldest_and_reports_gap() -> None:
    ring = Ring(max_frames=3)
    for i in range(5):
        await ring.append(text(str(i)))
    assert len(ring) == 3
    assert ring.first_seq == 3
    page = ring.read(0)
    assert page.gap
    assert [f.seq for f in page.frames] == [3, 4, 5]
    assert not ring.read(2).gap  # seqs 1 and 2 were seen already
    assert ring.read(1).gap


async def test_real_byte_budget_evicts_old_image_frames_while_text_survives() -> None:
    # The real bounds: 1000 frames, 128 MB. Thirteen 10 MB images (13.3 MB of base64
    # each) are ~173 MB; then 900 small text frames; then four more images.
    ring = Ring()
    assert ring.max_bytes == limits.RING_MAX_BYTES
    assert ring.max_frames == limits.RING_MAX_FRAMES
    img = image_frame(10 * limits.MB)
    img_size = len(encode_payload(img.payload))
    for _ in range(13):
        await ring.append(img)
    kept_images = len(ring)
    assert kept_images == limits.RING_MAX_BYTES // img_size == 9
    assert ring.bytes <= limits.RING_MAX_BYTES
    texts = [await ring.append(text(f"line {i}")) for i in range(900)]
    for _ in range(kept_images):
        await ring.append(img)
    held = ring.read(0)
    assert held.gap
    first_text = texts[0].seq
    # Every early image frame is gone, every text frame survives: the byte budget
    # turned the ring over by evicting images, while a count-only ring of 1000 frames
    # would still hold all 22 images (over 300 MB).
    assert [f.seq for f in held.frames if f.seq < first_text] == []
    assert [f.seq for f in held.frames if f.type == "assistant.delta"] == [t.seq for t in texts]
    assert [f.type for f in held.frames[-kept_images:]] == ["assistant.done"] * kept_images
    assert ring.bytes <= limits.RING_MAX_BYTES
    assert len(ring) == 900 + kept_images < limits.RING_MAX_FRAMES


async def test_images_go_first_text_frames_outlive_them() -> None:
    ring = Ring(max_frames=1000, max_bytes=1_000_000)
    for _ in range(3):
        await ring.append(image_frame(300_000))  # 400 kB payload each
    assert [f.seq for f in ring.read(0).frames] == [2, 3]  # two 400 kB payloads fit 1 MB
    texts = [await ring.append(text(f"t{i}")) for i in range(300)]
    a = await ring.append(image_frame(300_000))
    b = await ring.append(image_frame(300_000))
    frames = ring.read(0).frames
    # Oldest first: the early images leave one per new image; every text frame stays.
    assert [f.seq for f in frames] == [t.seq for t in texts] + [a.seq, b.seq]
    assert ring.bytes <= ring.max_bytes
    # 300 text frames cost less than one image frame.
    assert sum(len(encode_payload(t.payload)) for t in texts) < 400_000


async def test_newest_frame_stays_even_when_over_budget() -> None:
    ring = Ring(max_bytes=1000)
    await ring.append(text("a"))
    big = await ring.append(image_frame(10_000))
    assert [f.seq for f in ring.read(0).frames] == [big.seq]
    assert ring.bytes > ring.max_bytes
    small = await ring.append(text("b"))
    assert [f.seq for f in ring.read(0).frames] == [small.seq]


async def test_wait_read_wakes_on_append_and_times_out() -> None:
    ring = Ring()
    t0 = asyncio.get_running_loop().time()
    page = await ring.wait_read(0, timeout=0.05)
    assert page.frames == ()
    assert asyncio.get_running_loop().time() - t0 >= 0.04

    async def later() -> None:
        await asyncio.sleep(0.05)
        await ring.append(text("other", session="x"))
        await asyncio.sleep(0.05)
        await ring.append(text("mine", session="y"))

    task = asyncio.create_task(later())
    page = await ring.wait_read(0, session="y", timeout=5)
    await task
    assert [f.payload for f in page.frames] == [AssistantDelta("mine")]


async def test_poller_ahead_of_the_ring_gets_everything_with_gap() -> None:
    ring = Ring()
    await ring.append(text("after restart"))
    page = ring.read(500)
    assert page.gap
    assert [f.seq for f in page.frames] == [1]


def test_bounds_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least one"):
        Ring(max_frames=0)


async def test_read_stops_at_max_bytes_but_always_gives_one_frame() -> None:
    ring = Ring()
    for _ in range(4):
        await ring.append(image_frame(300_000))  # ~400 KB of payload each
    one = encode_payload(ring.read(0).frames[0].payload)
    page = ring.read(0, max_bytes=2 * len(one) + 10)
    assert [f.seq for f in page.frames] == [1, 2]
    assert page.next_seq == 2
    assert page.more
    page = ring.read(0, max_bytes=1)  # a frame bigger than the budget still comes
    assert [f.seq for f in page.frames] == [1]
    assert page.more
    page = ring.read(2, max_bytes=10 * len(one))
    assert [f.seq for f in page.frames] == [3, 4]
    assert not page.more
    # other sessions' frames cost nothing: next_seq runs past them
    await ring.append(text("other", session="t"))
    page = ring.read(3, session="t", max_bytes=1)
    assert ([f.seq for f in page.frames], page.next_seq) == ([5], 5)


async def test_readers_cancelled_while_they_wait_leave_nothing_behind() -> None:
    """Issue 33, item 6: SSE readers waiting with a timeout, cancelled as their tabs
    close while frames arrive. With ``asyncio.wait_for`` around ``Condition.wait()`` a
    reader cancelled while its wait timed out raised ``RuntimeError: Lock is not
    acquired`` and left the lock held by an orphan: the next append (every POST to the
    instance) hung for ever. Round 0 of this test was enough."""
    import random

    ring = Ring()
    rng = random.Random(1)
    errors: list[BaseException] = []

    async def reader() -> None:
        cursor = ring.last_seq
        while True:
            try:
                page = await ring.wait_read(cursor, timeout=0.01)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # what the Condition raised
                errors.append(e)
                return
            cursor = page.next_seq

    async def writer() -> None:
        while True:
            await ring.append(text("x"))
            await asyncio.sleep(rng.random() * 0.01)

    writing = asyncio.create_task(writer())
    try:
        for _ in range(60):
            readers = [asyncio.create_task(reader()) for _ in range(20)]
            await asyncio.sleep(rng.random() * 0.02)
            for task in readers:
                task.cancel()
                await asyncio.sleep(rng.random() * 0.001)
            await asyncio.gather(*readers, return_exceptions=True)
            assert not errors, errors
    finally:
        writing.cancel()
        await asyncio.gather(writing, return_exceptions=True)
    # The ring still takes frames at once, and a new reader is woken by the next one.
    waiting = asyncio.create_task(ring.wait_read(ring.last_seq, timeout=30))
    await asyncio.sleep(0)
    stored = await asyncio.wait_for(ring.append(text("after")), within(1))
    page = await asyncio.wait_for(waiting, within(5))
    assert [f.seq for f in page.frames] == [stored.seq]


async def test_rings_of_one_pool_keep_its_bytes_oldest_first() -> None:
    """Issue 33: each ring had its own 128 MB and a client creates any number of
    instances. Rings of one pool hold its bytes together: the frame appended longest
    ago in any of them goes first; a ring emptied so tells its readers (gap)."""
    size = len(encode_payload(image_frame(1000).payload))
    pool = RingPool(max_bytes=3 * size)
    rings = [Ring(pool=pool) for _ in range(3)]
    for ring in rings:
        await ring.append(image_frame(1000))
    assert pool.bytes == 3 * size
    await rings[1].append(image_frame(1000))  # the first ring's frame is the oldest
    assert [len(r) for r in rings] == [0, 2, 1]
    assert pool.bytes <= 3 * size
    assert rings[0].read(0).gap
    await rings[1].append(image_frame(1000))  # now its own first one is
    assert [len(r) for r in rings] == [0, 2, 1]
    assert rings[1].read(0).gap
    big = RingPool(max_bytes=size // 2)  # one frame over the whole pool stays
    alone = Ring(pool=big)
    await alone.append(image_frame(1000))
    assert len(alone) == 1
    await alone.close()  # a closed ring's bytes no longer count
    assert big.bytes == 0


async def test_a_turn_gives_its_bytes_back_however_it_ends() -> None:
    """Issue 33: a turn holds its message in instance.TURNS until it ends; one that
    ends in an error, and a message the ring failed to take, leave nothing held."""
    from tests.tether.test_clear_errors import Raising
    from visus.tether.frames import UserMessagePayload
    from visus.tether.instance import TURNS, Instance
    from visus.tether.runner import InstanceConfig

    config = InstanceConfig(id="i-1", model="m", created="t", data_dir="/nonexistent")
    inst = Instance(config, Raising(RuntimeError("boom")))
    before = TURNS.in_use
    frame = Frame(UserMessagePayload("hi"), "s", "m1")
    await inst.accept(frame, ())
    assert TURNS.in_use == before + 2 * limits.TETHER_TURN_MIN_BYTES
    deadline = asyncio.get_running_loop().time() + within(30)
    while inst.pending:  # the turn fails at once; a loaded machine may take a while
        assert asyncio.get_running_loop().time() < deadline, "the turn did not end"
        await asyncio.sleep(0.01)
    assert TURNS.in_use == before

    class Broken(Ring):
        def append_nowait(self, frame: Frame) -> Frame:
            raise RuntimeError("the ring failed")

    inst.ring = Broken()
    with pytest.raises(RuntimeError, match="the ring failed"):
        await inst.accept(Frame(UserMessagePayload("hi"), "s", "m2"), ())
    assert TURNS.in_use == before
