from __future__ import annotations

import contextlib
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from media_corpus import CLAUDE, encode, pdf_bytes, photo, screenshot

from visus import limits
from visus.errors import (
    InvalidInputError,
    MediaError,
    TooLargeError,
    UndecodableError,
    UnsupportedTypeError,
)
from visus.media import Profile, fit, load, probe

SVG = (
    b'<svg xmlns="http://www.w3.org/2000/svg" width="120" height="80">'
    b'<circle cx="40" cy="40" r="30" fill="teal"/></svg>'
)


def test_each_kind_is_found_by_trying_decoders() -> None:
    cases = {
        "raster": encode(photo(64, 48), "WEBP"),
        "pdf": pdf_bytes(2),
        "svg": SVG,
        "text": b"just words\n",
    }
    for kind, data in cases.items():
        assert load(data, profile=CLAUDE).source_kind == kind
        assert probe(data).kind == kind
    assert probe(cases["pdf"]).media_type == "application/pdf"
    assert probe(SVG).media_type == "image/svg+xml"
    assert probe(SVG).width == 120


def test_zero_bytes_is_undecodable() -> None:
    with pytest.raises(UndecodableError, match="empty"):
        load(b"", profile=CLAUDE)
    with pytest.raises(UndecodableError):
        probe(b"")


@pytest.mark.parametrize("seed", range(8))
def test_random_binary_is_unsupported(seed: int) -> None:
    data = random.Random(seed).randbytes(4096)
    with pytest.raises(UnsupportedTypeError):
        load(data, profile=CLAUDE)
    with pytest.raises(UnsupportedTypeError):
        fit(data, CLAUDE)


def test_fit_refuses_non_rasters() -> None:
    for data in (SVG, b"text", pdf_bytes(1)):
        with pytest.raises(UnsupportedTypeError):
            fit(data, CLAUDE)


def test_source_over_the_byte_bound_is_too_large(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "MAX_SOURCE_BYTES", 1000)
    with pytest.raises(TooLargeError):
        load(b"x" * 1001, profile=CLAUDE)


def test_page_for_a_non_pdf_is_invalid_input() -> None:
    with pytest.raises(InvalidInputError):
        load(SVG, profile=CLAUDE, page=2)
    assert load(SVG, profile=CLAUDE, page=1).source_kind == "svg"


def test_render_withheld_still_views_rasters() -> None:
    f = load(encode(screenshot(200, 100), "PNG"), profile=CLAUDE, render=False)
    assert f.source_kind == "raster"


def test_bytearray_and_memoryview_are_accepted() -> None:
    data = encode(photo(30, 20), "PNG")
    assert load(bytearray(data), profile=CLAUDE).width == 30
    assert probe(memoryview(data)).width == 30  # type: ignore[arg-type]


_SEEDS = {
    "png": encode(photo(40, 30), "PNG"),
    "jpeg": encode(photo(40, 30), "JPEG"),
    "gif": encode(screenshot(40, 30), "GIF"),
    "webp": encode(photo(40, 30), "WEBP"),
    "tiff": encode(photo(40, 30), "TIFF"),
    "bmp": encode(photo(20, 10), "BMP"),
    "pdf": pdf_bytes(1, draw=True),
    "svg": SVG,
}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.sampled_from(sorted(_SEEDS)),
    cut=st.floats(0, 1),
    flips=st.lists(st.tuples(st.floats(0, 1), st.integers(1, 255)), max_size=6),
)
def test_mutated_inputs_never_escape_as_foreign_errors(
    seed: str, cut: float, flips: list[tuple[float, int]]
) -> None:
    data = bytearray(_SEEDS[seed])
    for where, xor in flips:
        data[min(len(data) - 1, int(where * len(data)))] ^= xor
    data = data[: max(0, int(cut * len(data)))] if cut < 0.98 else data
    small = Profile(max_edge=64, max_pixels=64 * 64, max_bytes=50_000)
    for call in (lambda: load(bytes(data), profile=small), lambda: probe(bytes(data))):
        try:
            result = call()
        except (MediaError, InvalidInputError):
            continue
        if hasattr(result, "data"):
            assert result.size <= small.max_bytes
            assert result.width * result.height <= small.max_pixels


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=2048))
def test_arbitrary_bytes_never_escape_as_foreign_errors(data: bytes) -> None:
    with contextlib.suppress(MediaError, InvalidInputError):
        load(data, profile=CLAUDE)


def test_every_kind_is_deterministic() -> None:
    for data in (encode(photo(900, 700), "JPEG"), pdf_bytes(1, draw=True), SVG, b"x = 1\n"):
        first, second = load(data, profile=CLAUDE), load(data, profile=CLAUDE)
        assert first.data == second.data
        assert first.digest == second.digest
