"""Decode bombs, built byte by byte (issue 23): small files whose decode costs far more
than their size says. Used by the tests and by ``python -m benchmarks budgets``.

- :func:`progressive_jpeg`: a progressive JPEG of many scans. Every scan after the first
  is one "end of band" run per 32767 blocks (a few bytes), yet libjpeg (Pillow's and
  libvips's alike) makes a full pass over every block of the image for each one: 600
  scans over 10000 x 10000 x 3 components fit in 700 KB and take libvips ~20 s.
- :func:`interlaced_png`: an Adam7-interlaced PNG, which no decoder can stream: the
  whole image is held in memory (a 100 MP one is 300 KB on disk).
- :func:`scan_bomb_past_any_budget`: the progressive JPEG a test of the render
  worker's time budget decodes, certainly longer than that budget on any machine.

And issue 33's: :func:`objstm_pdf` (a PDF whose object stream inflates to gigabytes),
:func:`ztxt_png` (thousands of zTXt chunks each just under Pillow's chunk bound) and
:func:`palette_gif` (a one-colour GIF: 6000 x 6000 in 27 KB).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from visus import limits

if TYPE_CHECKING:
    import pytest

__all__ = [
    "BUDGET_BOMB_SCANS",
    "encoded_video",
    "interlaced_png",
    "interlaced_png_header",
    "objstm_pdf",
    "palette_gif",
    "progressive_jpeg",
    "scan_bomb_past_any_budget",
    "ztxt_png",
]

#: Scans of :func:`scan_bomb_past_any_budget`. libjpeg spends about 14 ms of CPU a scan
#: over 100 MP on a CI core (400 scans: 5.8 s), so 4000 scans are about a minute of CPU
#: there and half a minute on a core twice as fast. 99 scans (the production limit's
#: side) took 3 s on a loaded machine and under 1 s on a quiet one: too close to a 1 s
#: budget to say which way a test goes.
BUDGET_BOMB_SCANS = 4000

_EOB_RUN_MAX = 32767  # EOB14 with 14 extra bits: the longest run one symbol codes


def _segment(marker: int, body: bytes) -> bytes:
    return struct.pack(">HH", 0xFF00 | marker, len(body) + 2) + body


class _Bits:
    """An entropy-coded segment: bits MSB first, a 0x00 stuffed after every 0xFF."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.acc = 0
        self.n = 0

    def put(self, value: int, length: int) -> None:
        self.acc = (self.acc << length) | value
        self.n += length
        while self.n >= 8:
            self.n -= 8
            byte = (self.acc >> self.n) & 0xFF
            self.out.append(byte)
            if byte == 0xFF:
                self.out.append(0)
        self.acc &= (1 << self.n) - 1

    def done(self) -> bytes:
        if self.n:
            self.put((1 << (8 - self.n)) - 1, 8 - self.n)  # pad with 1-bits
        return bytes(self.out)


def _eob_scan(blocks: int) -> bytes:
    """One AC scan whose every block is empty: EOB runs over ``blocks`` blocks."""
    bits = _Bits()
    left = blocks
    while left:
        run = min(left, _EOB_RUN_MAX)
        n = run.bit_length() - 1
        bits.put(n, 4)  # the AC table below codes EOBn as the 4-bit value n
        if n:
            bits.put(run - (1 << n), n)
        left -= run
    return bits.done()


def progressive_jpeg(width: int, height: int, scans: int, components: int = 3) -> bytes:
    """A valid progressive JPEG (flat grey) of ``scans`` scans; width and height
    multiples of 8. The first scan codes every DC coefficient (1 bit a block); every
    other scan codes AC coefficients 1-63 of one component, all zero."""
    blocks = (width // 8) * (height // 8)
    ids = range(1, components + 1)
    out = [b"\xff\xd8", _segment(0xDB, b"\x00" + b"\x01" * 64)]
    sof = struct.pack(">BHHB", 8, height, width, components)
    out.append(_segment(0xC2, sof + b"".join(bytes([c, 0x11, 0]) for c in ids)))
    # DC table 0: one 1-bit code, for category 0. AC table 0: EOB0..EOB14 as 4-bit codes.
    out.append(_segment(0xC4, b"\x00" + bytes([1] + [0] * 15) + b"\x00"))
    ac_counts = bytes([0, 0, 0, 15] + [0] * 12)
    out.append(_segment(0xC4, b"\x10" + ac_counts + bytes(n << 4 for n in range(15))))
    dc_bits = blocks * components
    dc = bytes(dc_bits // 8) + (bytes([(1 << (8 - dc_bits % 8)) - 1]) if dc_bits % 8 else b"")
    dc_head = bytes([components]) + b"".join(bytes([c, 0]) for c in ids) + b"\x00\x00\x00"
    out += [_segment(0xDA, dc_head), dc]
    ac = _eob_scan(blocks)
    for i in range(scans - 1):
        out += [_segment(0xDA, bytes([1, ids[i % components], 0, 1, 63, 0])), ac]
    out.append(b"\xff\xd9")
    return b"".join(out)


def _chunk(kind: bytes, data: bytes) -> bytes:
    crc = zlib.crc32(kind + data) & 0xFFFFFFFF
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)


# Adam7: (x0, y0, dx, dy) of each of the seven passes.
_ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2))
_ADAM7 += ((0, 1, 1, 2),)


def _passes(width: int, height: int) -> Iterator[bytes]:
    for x0, y0, dx, dy in _ADAM7:
        w, h = -(-(width - x0) // dx), -(-(height - y0) // dy)
        if w > 0 and h > 0:
            row = bytes(1 + 3 * w)  # filter type 0, black RGB pixels
            rows_per_piece = max(1, (1 << 22) // len(row))
            for y in range(0, h, rows_per_piece):
                yield row * min(rows_per_piece, h - y)


def interlaced_png(width: int, height: int) -> bytes:
    """A black RGB PNG, Adam7-interlaced, compressed as it is built (never held raw)."""
    z = zlib.compressobj(9)
    idat = b"".join(z.compress(piece) for piece in _passes(width, height)) + z.flush()
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 1)
    head = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr)
    return head + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")


def interlaced_png_header(width: int, height: int) -> bytes:
    """Only the signature, the IHDR of an interlaced RGB PNG and IEND: what a decoder
    reads before it decides anything (no pixel data at all)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 1)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IEND", b"")


def _pdf_object(number: int, head: bytes, stream: bytes | None = None) -> bytes:
    body = head if stream is None else head + b"\nstream\n" + stream + b"\nendstream"
    return b"%d 0 obj\n" % number + body + b"\nendobj\n"


def objstm_pdf(inflated: int) -> bytes:
    """A one-page PDF whose catalog and page tree sit in an object stream (``/ObjStm``)
    that inflates to about ``inflated`` bytes: the objects, then blanks. Opening it (a
    page count, a probe) makes PDFium inflate the whole stream; ``inflated`` of 2 GB
    fits in ~2 MB. The cross-reference is a stream (objects in an object stream have
    no offset of their own)."""
    objs = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>",
    ]
    offsets, pos = [], 0
    for o in objs:
        offsets.append(pos)
        pos += len(o) + 1
    table = b" ".join(b"%d %d" % (n + 1, off) for n, off in enumerate(offsets)) + b"\n"
    body = table + b"\n".join(objs) + b"\n"
    stream = _blank_deflate(body, inflated)
    out = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    at4 = len(out)
    head = b"<< /Type /ObjStm /N 3 /First %d /Filter /FlateDecode /Length %d >>" % (
        len(table),
        len(stream),
    )
    out += _pdf_object(4, head, stream)
    at5 = len(out)
    # Cross-reference stream rows (type, field 2, field 3) of 1, 4 and 2 bytes.
    rows = [struct.pack(">BIH", 0, 0, 65535)]
    rows += [struct.pack(">BIH", 2, 4, i) for i in range(3)]
    rows += [struct.pack(">BIH", 1, at4, 0), struct.pack(">BIH", 1, at5, 0)]
    xref = b"".join(rows)
    head = b"<< /Type /XRef /Size 6 /Root 1 0 R /W [1 4 2] /Length %d >>" % len(xref)
    out += _pdf_object(5, head, xref)
    out += b"startxref\n%d\n%%%%EOF\n" % at5
    return bytes(out)


def _blank_deflate(head: bytes, size: int) -> bytes:
    """A zlib stream of ``head`` then blanks, ``size`` bytes in all, built fast: one
    16 MB block of blanks is compressed once (after a full flush, so it stands alone)
    and repeated; the checksum is computed over what it stands for."""
    blank = b" " * (1 << 24)
    z = zlib.compressobj(9, zlib.DEFLATED, -15)
    parts = [z.compress(head) + z.flush(zlib.Z_FULL_FLUSH)]
    check = zlib.adler32(head)
    block = z.compress(blank) + z.flush(zlib.Z_FULL_FLUSH)
    whole, rest = divmod(max(0, size - len(head)), len(blank))
    parts += [block] * whole
    for _ in range(whole):
        check = zlib.adler32(blank, check)
    parts.append(z.compress(blank[:rest]) + z.flush())
    check = zlib.adler32(blank[:rest], check)
    return b"\x78\xda" + b"".join(parts) + struct.pack(">I", check)


def scan_bomb_past_any_budget(monkeypatch: pytest.MonkeyPatch) -> bytes:
    """A 10000 x 10000 progressive JPEG of :data:`BUDGET_BOMB_SCANS` scans, with
    ``limits.RASTER_MAX_JPEG_SCANS`` raised to let it through: a bomb under the scan
    limit, as 99 scans are under the production one, whose decode outlasts any time
    budget a test sets by far, however fast the machine."""
    monkeypatch.setattr(limits, "RASTER_MAX_JPEG_SCANS", BUDGET_BOMB_SCANS)
    return progressive_jpeg(10000, 10000, BUDGET_BOMB_SCANS)


def ztxt_png(chunks: int = 9000) -> bytes:
    """A 64 x 48 PNG carrying ``chunks`` zTXt chunks, each inflating to just under
    Pillow's 1 MB chunk bound (~1 KB deflated): 9,000 are 9.5 MB, 9 GB inflated."""
    from PIL import PngImagePlugin

    stream = zlib.compress(b"\0" * (PngImagePlugin.MAX_TEXT_CHUNK - 1), 9)
    ztxt = _chunk(b"zTXt", b"Comment\0\0" + stream)
    raw = b"".join(_passes_png(64, 48))
    return raw[:33] + ztxt * chunks + raw[33:]


def _passes_png(width: int, height: int) -> Iterator[bytes]:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    yield b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr)
    rows = (b"\x00" + b"\x00\x80\xff" * width) * height
    yield _chunk(b"IDAT", zlib.compress(rows))
    yield _chunk(b"IEND", b"")


def palette_gif(side: int) -> bytes:
    """A one-colour ``side`` x ``side`` palette GIF (6000 px: 27 KB, 36 MP)."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("P", (side, side), 3).save(buf, "GIF")
    return buf.getvalue()


def encoded_video(
    codec: str, container: str, width: int, height: int, frames: int, pix_fmt: str
) -> bytes:
    """``frames`` black frames of ``width`` x ``height`` at one a second, encoded with
    ``codec`` in ``container`` by PyAV (which the test skips without): black compresses
    to almost nothing (sixteen 9000 x 9000 MJPEG frames are 20 MB, 120 MB each decoded)."""
    import io

    import pytest

    av = pytest.importorskip("av")
    np = pytest.importorskip("numpy")
    buf = io.BytesIO()
    with av.open(buf, "w", format=container) as out:
        stream = out.add_stream(codec, rate=1)
        stream.width, stream.height, stream.pix_fmt = width, height, pix_fmt
        gray = pix_fmt == "gray"
        shape = (height, width) if gray else (height, width, 3)
        pixels = np.zeros(shape, np.uint8)
        frame = av.VideoFrame.from_ndarray(pixels, format="gray" if gray else "rgb24")
        for i in range(frames):
            frame.pts = i
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buf.getvalue()
