"""Decode bombs, built byte by byte (issue 23): small files whose decode costs far more
than their size says. Used by the tests and by ``python -m benchmarks budgets``.

- :func:`progressive_jpeg`: a progressive JPEG of many scans. Every scan after the first
  is one "end of band" run per 32767 blocks (a few bytes), yet libjpeg (Pillow's and
  libvips's alike) makes a full pass over every block of the image for each one: 600
  scans over 10000 x 10000 x 3 components fit in 700 KB and take libvips ~20 s.
- :func:`interlaced_png`: an Adam7-interlaced PNG, which no decoder can stream: the
  whole image is held in memory (a 100 MP one is 300 KB on disk).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator

__all__ = ["interlaced_png", "interlaced_png_header", "progressive_jpeg"]

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
