"""Builders for the media test corpus: every input is made here, nothing is downloaded."""

from __future__ import annotations

import io
import random
import struct
import zlib

import pypdfium2 as pdfium
from PIL import Image

from visus.media import Profile

CLAUDE = Profile(max_edge=1568, max_pixels=1_150_000, max_bytes=5 * 1024 * 1024)


def photo(w: int, h: int, seed: int = 1) -> Image.Image:
    """Photo-like RGB: smooth gradients plus noise, so it has many distinct colours."""
    rng = random.Random(seed)
    noise = Image.frombytes("RGB", (w, h), rng.randbytes(w * h * 3))
    gx = Image.linear_gradient("L").resize((w, h))
    gy = gx.transpose(Image.Transpose.ROTATE_90).resize((w, h))
    base = Image.merge("RGB", (gx, gy, Image.new("L", (w, h), 128)))
    return Image.blend(base, noise, 0.25)


def screenshot(w: int, h: int) -> Image.Image:
    """Flat UI-like RGB: a few exact colours in blocks and thin lines."""
    im = Image.new("RGB", (w, h), (250, 250, 250))
    from PIL import ImageDraw

    d = ImageDraw.Draw(im)
    d.rectangle((0, 0, w, max(1, h // 12)), fill=(40, 60, 120))
    for y in range(h // 8, h, max(4, h // 30)):
        d.line((w // 10, y, w - w // 10, y), fill=(30, 30, 30), width=1)
    d.rectangle((w // 3, h // 3, w // 2, h // 2), fill=(200, 40, 40))
    return im


def encode(im: Image.Image, fmt: str, **params: object) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **params)
    return buf.getvalue()


def png_header_only(width: int, height: int) -> bytes:
    """A PNG whose IHDR claims ``width`` x ``height`` with a tiny IDAT: a bomb header."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body))
            + kind
            + body
            + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)
        )

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\x00" * 64)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def pdf_bytes(pages: int, size: tuple[float, float] = (612, 792), draw: bool = False) -> bytes:
    """A PDF with ``pages`` blank pages (page 1 gets a black square when ``draw``)."""
    doc = pdfium.PdfDocument.new()
    try:
        for i in range(pages):
            page = doc.new_page(*size)
            if draw and i == 0:
                obj = pdfium.PdfImage.new(doc)
                bitmap = pdfium.PdfBitmap.from_pil(Image.new("RGB", (10, 10), (0, 0, 0)))
                obj.set_bitmap(bitmap)
                bitmap.close()
                obj.set_matrix(pdfium.PdfMatrix().scale(size[0] / 2, size[1] / 2))
                page.insert_obj(obj)
                page.gen_content()
            page.close()
        buf = io.BytesIO()
        doc.save(buf)
        return buf.getvalue()
    finally:
        doc.close()


def decoded(data: bytes) -> Image.Image:
    im = Image.open(io.BytesIO(data))
    im.load()
    return im


def pixel(im: Image.Image, xy: tuple[int, int]) -> tuple[int, ...]:
    value = im.getpixel(xy)
    assert isinstance(value, tuple)
    return tuple(int(v) for v in value)


def near(actual: tuple[int, ...], expected: tuple[int, ...], tolerance: int = 60) -> bool:
    return len(actual) == len(expected) and all(
        abs(a - e) <= tolerance for a, e in zip(actual, expected, strict=True)
    )
