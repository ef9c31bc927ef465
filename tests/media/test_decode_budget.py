"""Every raster decode has a time and memory budget (issue 23).

A progressive JPEG of many scans held libvips (and Pillow) for a minute in the calling
process, and interlaced 100 MP PNGs decoded side by side held gigabytes. Now a JPEG past
the scan limit is refused at once, a decode too large for the process goes to the
render worker (stopped at its time budget), and what decodes here reserves its buffers
against the process's memory budget first. The bombs are built byte by byte
(``bombs.py``).
"""

from __future__ import annotations

import importlib
import threading
import time

import pytest
from bombs import interlaced_png_header, progressive_jpeg, scan_bomb_past_any_budget
from media_corpus import CLAUDE, decoded, encode, photo, png_header_only
from test_render_budget import warm_both_lanes

from visus import limits
from visus.budget import MEMORY
from visus.errors import BusyError, TooLargeError
from visus.media import _worker, fit, load
from visus.media._cost import DecodeCost, decode_cost
from visus.media.raster import by_vips, identify, read_header
from visus.perception import Reach, Refusal, view

# The module, not the function media re-exports under the same name.
load_mod = importlib.import_module("visus.media.load")
BUDGET = 1.0
# A stopped decode returns within the budget plus this (kill, reap, reply).
SLACK = 1.5


@pytest.fixture
def worker_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of every source sent to the worker to decode."""
    calls: list[int] = []
    real = _worker.decode_in_worker

    def spy(data: bytes, profile: object, region: object = None) -> object:
        calls.append(len(data))
        return real(data, profile, region)  # type: ignore[arg-type]

    monkeypatch.setattr(load_mod, "decode_in_worker", spy)
    return calls


def test_a_jpeg_of_600_scans_is_refused_at_once() -> None:
    # 700 KB; libvips took 22 s here (63 s in the report), Pillow about as long.
    data = progressive_jpeg(10000, 10000, 600)
    assert len(data) < 1_000_000
    for call in (lambda: load(data, profile=CLAUDE), lambda: fit(data, CLAUDE)):
        start = time.monotonic()
        with pytest.raises(TooLargeError, match=r"600 scans.*RASTER_MAX_JPEG_SCANS"):
            call()
        assert time.monotonic() - start < 1.0


def test_view_refuses_the_scan_bomb_as_too_large() -> None:
    result = view(progressive_jpeg(10000, 10000, 600), reach=Reach([]), name="bomb.jpg")
    assert isinstance(result, Refusal)
    assert result.reason == "too_large"
    assert "RASTER_MAX_JPEG_SCANS" in result.message


def test_a_scan_bomb_under_the_limit_is_stopped_at_the_budget_in_the_worker(
    monkeypatch: pytest.MonkeyPatch, worker_calls: list[int]
) -> None:
    # Under the scan limit, and still far more libjpeg passes over 100 MP than the
    # budget allows on any machine (99 scans decoded inside 1 s on a quiet one).
    data = scan_bomb_past_any_budget(monkeypatch)
    warm_both_lanes()  # starting a worker is not the decode
    monkeypatch.setattr(limits, "RENDER_TIME_BUDGET_SECONDS", BUDGET)
    start = time.monotonic()
    with pytest.raises(TooLargeError, match=r"decoding the image took longer than the 1 s"):
        load(data, profile=CLAUDE)
    assert time.monotonic() - start < BUDGET + SLACK
    assert worker_calls == [len(data)]  # never decoded in this process


def test_an_ordinary_progressive_photo_decodes_in_the_process(worker_calls: list[int]) -> None:
    data = encode(photo(3000, 2000), "JPEG", quality=90, progressive=True)
    f = load(data, profile=CLAUDE)
    assert (f.width, f.height, f.source_width) == (1313, 875, 3000)
    assert worker_calls == []


def test_a_decode_too_large_for_the_process_gives_the_same_pixels_in_the_worker(
    monkeypatch: pytest.MonkeyPatch, worker_calls: list[int]
) -> None:
    data = encode(photo(1200, 800), "PNG")
    small = CLAUDE.__class__(max_edge=600, max_pixels=600 * 400, max_bytes=5_000_000)
    here = load(data, profile=small)
    monkeypatch.setattr(limits, "RASTER_INPROCESS_MAX_PIXELS", 1000)
    there = fit(data, small)
    assert worker_calls == [len(data)]
    assert (there.width, there.height, there.media_type) == (
        here.width,
        here.height,
        here.media_type,
    )
    assert decoded(there.data).tobytes() == decoded(here.data).tobytes()


def _cost(data: bytes, size: tuple[int, int] = (1568, 1568)) -> DecodeCost:
    im = identify(data)
    assert im is not None
    header = read_header(im)
    return decode_cost(header, data, size, by_vips=by_vips(header, size))


def test_an_interlaced_100_mp_png_is_costed_whole_and_never_decoded_here() -> None:
    cost = _cost(interlaced_png_header(10000, 10000))
    assert not cost.in_process
    assert cost.buffer_bytes >= 300_000_000
    # 16 MP interlaced is held whole here, under a reservation of all of it; streamed
    # (not interlaced) it holds a band of rows.
    whole = _cost(interlaced_png_header(4000, 4000))
    band = _cost(png_header_only(4000, 4000))
    assert whole.in_process
    assert band.in_process
    assert whole.buffer_bytes - band.buffer_bytes >= 4000 * 4000 * 3 - 4000 * 3 * 256


def test_decodes_here_wait_for_the_memory_budget_then_are_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = encode(photo(2000, 1500), "PNG")
    monkeypatch.setattr(limits, "MEMORY_BUDGET_BYTES", 64 * limits.MB)
    monkeypatch.setattr(limits, "MEMORY_BUDGET_WAIT_SECONDS", 0.3)
    held = MEMORY.reserve(60 * limits.MB, what="another decode")
    try:
        start = time.monotonic()
        with pytest.raises(BusyError, match=r"MEMORY_BUDGET_BYTES.*try again"):
            load(data, profile=CLAUDE)
        assert 0.3 <= time.monotonic() - start < 2.0
        result = view(data, reach=Reach([]), name="shot.png")
        assert isinstance(result, Refusal)
        assert result.reason == "too_large"
        assert "try again" in result.message
        # Room comes back while a decode waits: it goes ahead.
        monkeypatch.setattr(limits, "MEMORY_BUDGET_WAIT_SECONDS", 5.0)
        threading.Timer(0.2, held.release).start()
        assert load(data, profile=CLAUDE).source_width == 2000
    finally:
        held.release()
    assert MEMORY.in_use == 0
