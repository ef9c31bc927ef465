"""A valid PNG whose zTXt/iTXt/iCCP chunk inflates past Pillow's text bounds is
perceived with the chunk dropped (not refused as undecodable), with bounded work."""

from __future__ import annotations

import io
import struct
import time
import tracemalloc
import zlib

import pytest
from PIL import Image, PngImagePlugin

from visus import limits
from visus.errors import MediaError
from visus.media import Profile, fit, load, probe
from visus.media._png import without_unusable_chunks

PROFILE = Profile(1568, 1568 * 1568, 5_000_000)
BLUE = (0, 128, 255)
#: 50 MB of zeros, deflated to ~50 KB.
BOMB = zlib.compress(b"\0" * (50 * 1024 * 1024), 9)


def _chunk(kind: bytes, body: bytes) -> bytes:
    crc = zlib.crc32(kind + body) & 0xFFFFFFFF
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)


def png_with(*extra: bytes, after_idat: bool = False) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (64, 48), BLUE).save(buf, "PNG")
    raw = buf.getvalue()
    chunks, pos = [], 8
    while pos < len(raw):
        (n,) = struct.unpack(">I", raw[pos : pos + 4])
        chunks.append(raw[pos : pos + 12 + n])
        pos += 12 + n
    at = len(chunks) - 1 if after_idat else 1  # before IEND, or right after IHDR
    return raw[:8] + b"".join(chunks[:at]) + b"".join(extra) + b"".join(chunks[at:])


CASES = {
    "zTXt": png_with(_chunk(b"zTXt", b"Comment\0\0" + BOMB)),
    "zTXt after IDAT": png_with(_chunk(b"zTXt", b"Comment\0\0" + BOMB), after_idat=True),
    "iTXt compressed": png_with(_chunk(b"iTXt", b"XML\0\1\0en\0\0" + BOMB)),
    "iCCP": png_with(_chunk(b"iCCP", b"icc\0\0" + BOMB)),
    # each under the 1 MB chunk bound, together past the 64 MB text memory bound
    "many chunks": png_with(
        *[_chunk(b"zTXt", b"k\0\0" + zlib.compress(b"\0" * 1_000_000, 9))] * 80
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_png_with_an_oversized_metadata_chunk_is_perceived(name: str) -> None:
    data = CASES[name]
    tracemalloc.start()
    try:
        fitted = load(data, profile=PROFILE)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (fitted.width, fitted.height) == (64, 48)
    assert Image.open(io.BytesIO(fitted.data)).convert("RGB").getpixel((10, 10)) == BLUE
    assert peak < 16 * 1024 * 1024  # the 50 MB (or 80 MB) of text is never inflated
    # the oversized chunk is not passed on either (of 80 chunks, those Pillow would
    # hold within its text memory bound stay)
    assert len(fitted.data) < (len(data) if name == "many chunks" else 1024)
    assert probe(data).kind == "raster"


def test_small_metadata_chunks_are_kept_and_the_bytes_untouched() -> None:
    data = png_with(_chunk(b"zTXt", b"Comment\0\0" + zlib.compress(b"hello" * 100)))
    assert without_unusable_chunks(data) is data
    assert without_unusable_chunks(b"not a png") == b"not a png"


def _damaged(kind: bytes, body: bytes) -> bytes:
    """A chunk whose CRC does not match its bytes."""
    good = _chunk(kind, body)
    return good[:-4] + struct.pack(">I", (int.from_bytes(good[-4:], "big") ^ 0xFF) & 0xFFFFFFFF)


DAMAGED = {
    "iCCP before IDAT": png_with(_damaged(b"iCCP", b"icc\0\0" + zlib.compress(b"x" * 100))),
    "tEXt before IDAT": png_with(_damaged(b"tEXt", b"Comment\0hello")),
    "tIME after IDAT": png_with(
        _damaged(b"tIME", b"\x07\xea\x0b\x18\x00\x00\x00"), after_idat=True
    ),
}


@pytest.mark.parametrize("name", sorted(DAMAGED))
def test_png_with_a_damaged_ancillary_chunk_is_perceived(name: str) -> None:
    # Pillow alone refuses these files; the PNG spec (and libpng, and browsers) skip
    # a damaged ancillary chunk, so visus does too, on every path.
    data = DAMAGED[name]
    if "before" in name:
        with pytest.raises((OSError, SyntaxError)):
            Image.open(io.BytesIO(data)).load()
    fitted = load(data, profile=PROFILE)
    assert (fitted.width, fitted.height) == (64, 48)
    assert Image.open(io.BytesIO(fitted.data)).convert("RGB").getpixel((10, 10)) == BLUE
    small = Profile(32, 32 * 32, 100_000)  # a real re-fit, not the bytes passed through
    assert (fit(data, small).width, probe(data).kind) == (32, "raster")


def test_a_damaged_critical_chunk_is_left_to_the_decoder() -> None:
    good = png_with()
    for kind in (b"IHDR", b"IDAT"):
        at = good.index(kind) - 4
        (n,) = struct.unpack(">I", good[at : at + 4])
        end = at + 12 + n
        bad = good[: end - 4] + bytes(b ^ 0xFF for b in good[end - 4 : end]) + good[end:]
        assert without_unusable_chunks(bad) is bad  # never dropped nor "repaired"
        if kind == b"IHDR":  # a damaged header is refused, as a decoder must
            with pytest.raises(MediaError):
                load(bad, profile=PROFILE)


def _apng_with_damaged(kind: bytes, nth: int) -> bytes:
    """A 3-frame APNG (red, green, blue) whose ``nth`` ``kind`` chunk has a wrong CRC."""
    frames = [Image.new("RGB", (40, 30), c) for c in ((255, 0, 0), (0, 255, 0), (0, 0, 255))]
    buf = io.BytesIO()
    frames[0].save(buf, "PNG", save_all=True, append_images=frames[1:], duration=100)
    data, pos, seen = bytearray(buf.getvalue()), 8, 0
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos : pos + 4])
        end = pos + 12 + n
        if data[pos + 4 : pos + 8] == kind:
            if seen == nth:
                data[end - 1] ^= 0xFF
                return bytes(data)
            seen += 1
        pos = end
    raise AssertionError(f"no {kind!r} number {nth}")


@pytest.mark.parametrize(("kind", "nth"), [(b"fcTL", 0), (b"fcTL", 1), (b"fdAT", 0), (b"acTL", 0)])
def test_an_apng_with_a_damaged_frame_chunk_becomes_its_still_image(kind: bytes, nth: int) -> None:
    # Frames are numbered across fcTL and fdAT: dropping one alone would leave a
    # sequence Pillow refuses, so the animation goes whole and the first frame stays.
    data = _apng_with_damaged(kind, nth)
    fitted = load(data, profile=PROFILE)
    assert (fitted.width, fitted.height, fitted.frame_count) == (40, 30, 1)
    assert Image.open(io.BytesIO(fitted.data)).convert("RGB").getpixel((5, 5)) == (255, 0, 0)
    assert probe(data).frame_count == 1


def test_many_chunks_each_under_the_chunk_bound_cost_a_bounded_inflate() -> None:
    """Issue 33, item 2: 9,000 zTXt chunks each inflating to just under Pillow's 1 MB
    chunk bound (9.5 MB of file). The running total counted only kept chunks, so every
    chunk past the memory bound was still inflated, to be dropped: 9 GB, 19 CPU-s. Now
    every inflated byte counts, and past ``RASTER_PNG_MAX_METADATA_BYTES`` the rest
    are dropped unread. No machine inflates 9 GB within the bound below."""
    stream = zlib.compress(b"\0" * (PngImagePlugin.MAX_TEXT_CHUNK - 1), 9)
    data = png_with(*[_chunk(b"zTXt", b"Comment\0\0" + stream)] * 9000)
    assert len(data) > 9 * 1024 * 1024
    start = time.process_time()
    kept = without_unusable_chunks(data)
    spent = time.process_time() - start
    assert spent < 1.0, f"{spent:.1f} CPU-s"
    assert kept.count(b"zTXt") <= limits.RASTER_PNG_MAX_METADATA_BYTES // len(stream) + 1
    fitted = load(data, profile=PROFILE)
    assert Image.open(io.BytesIO(fitted.data)).convert("RGB").getpixel((10, 10)) == BLUE
