"""Redteam (issue 23): reading a raster's header is bounded, whatever it holds.

Pillow parses a header in Python, one read per PNG chunk, GIF block or TIFF directory,
in the calling process and outside any budget: 57 MB of 12-byte PNG chunks before the
image took 28 s, 60 MB of GIF comment blocks 15 s, a TIFF of 500,000 directories over
5 minutes, and 60 MB of ``a b`` lines 51 s (Pillow's IM Tools plugin reads any text as
a header, one byte per read) before the text was refused. EPS is handed to Ghostscript,
an outside program, when Pillow loads it.
"""

from __future__ import annotations

import io
import struct
import time
import zlib

import pytest
from PIL import Image, ImageFile

from tests.timing import within
from visus import limits, media
from visus.errors import TooLargeError

#: Wall time a refusal may take on a 2-core machine (times the load: within()).
BOUND = 5.0
PROFILE = media.Profile(max_edge=1568, max_pixels=1_150_000, max_bytes=5_000_000)


def _png(size: tuple[int, int] = (8, 8)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, "red").save(buf, "PNG")
    return buf.getvalue()


def _chunk(kind: bytes, body: bytes) -> bytes:
    crc = zlib.crc32(kind + body) & 0xFFFFFFFF
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)


def png_of_tiny_chunks(count: int) -> bytes:
    """A valid PNG with ``count`` tIME chunks between its header and its image."""
    png = _png()
    return png[:33] + _chunk(b"tIME", b"\x07\xd0\x01\x01\x00\x00\x00") * count + png[33:]


def gif_of_comments(count: int) -> bytes:
    """A valid 10x10 GIF whose one frame comes after ``count`` comment blocks."""
    head = b"GIF89a" + struct.pack("<HHBBB", 10, 10, 0x80, 0, 0) + b"\0\0\0\xff\xff\xff"
    frame = b"\x2c" + struct.pack("<HHHHB", 0, 0, 1, 1, 0) + b"\x02\x02\x44\x01\x00"
    return head + b"\x21\xfe\x01a\x00" * count + frame + b"\x3b"


def tiff_of_directories(count: int) -> bytes:
    """A valid little-endian TIFF of ``count`` 1x1 grey pages, one directory each."""
    entries = [(256, 1), (257, 1), (258, 8), (259, 1), (262, 1), (273, 8), (277, 1), (279, 1)]
    size = 2 + 12 * len(entries) + 4
    out = [b"II*\x00" + struct.pack("<I", 16) + b"\x00" * 8]
    for i in range(count):
        ifd = struct.pack("<H", len(entries))
        for tag, value in entries:
            kind = 4 if tag in (273, 279) else 3
            packed = struct.pack("<I", value) if kind == 4 else struct.pack("<HH", value, 0)
            ifd += struct.pack("<HHI", tag, kind, 1) + packed
        out.append(ifd + struct.pack("<I", 16 + (i + 1) * size if i < count - 1 else 0))
    return b"".join(out)


@pytest.mark.parametrize(
    "make",
    [lambda: png_of_tiny_chunks(3_000_000), lambda: gif_of_comments(12_000_000)],
    ids=["png chunks", "gif blocks"],
)
def test_a_header_of_millions_of_parts_is_refused_within_the_budget(make: object) -> None:
    data = make()  # type: ignore[operator]
    for step in (media.probe, lambda d: media.load(d, profile=PROFILE)):
        started = time.monotonic()
        with pytest.raises(TooLargeError, match="header"):
            step(data)
        assert time.monotonic() - started < within(BOUND)


def test_a_tiff_of_half_a_million_pages_shows_its_first_within_the_budget() -> None:
    data = tiff_of_directories(500_000)
    started = time.monotonic()
    found = media.probe(data)
    assert found.kind == "raster"
    assert (found.width, found.height) == (1, 1)
    assert found.frame_count is not None
    assert found.frame_count > 1
    assert time.monotonic() - started < within(BOUND)


def test_text_is_not_read_as_an_image_header() -> None:
    data = b"a b\n" * 15_000_000  # 60 MB of lines Pillow's IM Tools plugin would parse
    started = time.monotonic()
    assert media.probe(data).kind == "text"
    assert time.monotonic() - started < within(BOUND)


def test_eps_is_never_handed_to_an_outside_program() -> None:
    eps = b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 100 100\n0 0 moveto showpage\n"
    # Pillow would identify it, and its load would start Ghostscript: it stays text.
    assert media.probe(eps).kind == "text"


def test_ordinary_rasters_and_animations_still_count_their_frames() -> None:
    frames = [Image.new("RGB", (32, 32), (i * 40, 0, 0)) for i in range(5)]
    buf = io.BytesIO()
    frames[0].save(buf, "GIF", save_all=True, append_images=frames[1:])
    assert media.probe(buf.getvalue()).frame_count == 5
    long_gif = io.BytesIO()
    many = [Image.new("L", (4, 4), i % 256) for i in range(2000)]
    many[0].save(long_gif, "GIF", save_all=True, append_images=many[1:])
    assert media.probe(long_gif.getvalue()).frame_count == 2000
    assert media.probe(png_of_tiny_chunks(1000)).kind == "raster"
    assert getattr(limits, "RASTER_HEADER_MAX_READS", 10**6) > 2000


def _pdf(*objects: bytes) -> bytes:
    out, offsets = b"%PDF-1.7\n", []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    trailer = f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n"
    return out + trailer.encode()


def test_probing_a_pdf_reads_no_page_content() -> None:
    # Three million drawing operators in 300 KB: PDFium parses them when a page loads
    # (19 s here, holding the process-wide PDFium lock); a probe needs only the size.
    ops = zlib.compress(b"0 0 m 14400 14400 l 0 14400 l h f\n" * 3_000_000, 9)
    stream = b"<< /Length %d /Filter /FlateDecode >>\nstream\n%s\nendstream" % (len(ops), ops)
    data = _pdf(
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /CropBox [10 10 310 410] "
        b"/Rotate 90 /Contents 4 0 R >>",
        stream,
    )
    started = time.monotonic()
    found = media.probe(data)
    assert time.monotonic() - started < within(BOUND)
    assert (found.kind, found.width, found.height, found.page_count) == ("pdf", 400, 300, 1)


class _LaterPlugin(ImageFile.ImageFile):
    """A format an application registers after visus is imported (as pillow-heif does)."""

    format = "VISUSTESTFMT"

    def _open(self) -> None:
        assert self.fp is not None
        if self.fp.read(12) != b"VISUSTESTFMT":
            raise SyntaxError("not this format")
        self._mode, self._size = "L", (3, 2)
        self.tile = [ImageFile._Tile("raw", (0, 0, 3, 2), 12, ("L", 0, 1))]


def test_a_plugin_registered_later_is_opened_too() -> None:
    Image.register_open(_LaterPlugin.format, _LaterPlugin)
    try:
        found = media.probe(b"VISUSTESTFMT" + bytes(6))
    finally:
        Image.OPEN.pop(_LaterPlugin.format)
        Image.ID.remove(_LaterPlugin.format)
    assert (found.kind, found.width, found.height) == ("raster", 3, 2)
