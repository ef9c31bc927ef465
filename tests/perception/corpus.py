"""Builders for the bad-input corpus: every input is made here, nothing is downloaded.

Each builder returns the bytes of one file. Images are small but not flat (noise
or gradients), so truncating them cuts real compressed data.
"""

from __future__ import annotations

import io
import random
import struct
import zlib

import pypdfium2 as pdfium
from PIL import Image

RASTER_FORMATS = ["png", "jpeg", "gif", "webp", "bmp", "tiff", "avif", "ppm", "ico", "tga"]

RED = (220, 20, 20)
BLUE = (20, 40, 220)


def noise_image(width: int, height: int, *, seed: int = 1, mode: str = "RGB") -> Image.Image:
    """Deterministic noise over a gradient: compresses poorly, like a photo."""
    rng = random.Random(seed)
    noise = Image.frombytes("RGB", (width, height), rng.randbytes(width * height * 3))
    gradient = Image.linear_gradient("L").resize((width, height)).convert("RGB")
    img = Image.blend(gradient, noise, 0.3)
    return img.convert(mode) if mode != "RGB" else img


def encode(img: Image.Image, fmt: str, **params: object) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format=fmt.upper() if fmt != "jpeg" else "JPEG", **params)
    return buf.getvalue()


def raster(fmt: str, width: int = 96, height: int = 64) -> bytes:
    """One still image in ``fmt``."""
    img = noise_image(width, height)
    if fmt == "gif":
        img = img.convert("P")
    if fmt == "ico":
        return encode(img, "ico", sizes=[(width, height)])
    return encode(img, fmt)


def halves(
    left: tuple[int, int, int], right: tuple[int, int, int], size: tuple[int, int]
) -> Image.Image:
    w, h = size
    img = Image.new("RGB", size, right)
    img.paste(left, (0, 0, w // 2, h))
    return img


def exif_rotated_jpeg() -> bytes:
    """Stored 200x100, red left half; EXIF orientation 6 (rotate 90° clockwise to show).

    Shown correctly it is 100x200 with red on top.
    """
    img = halves(RED, BLUE, (200, 100))
    exif = Image.Exif()
    exif[0x0112] = 6
    return encode(img, "jpeg", exif=exif.tobytes(), quality=95)


def cmyk_jpeg() -> bytes:
    img = Image.new("CMYK", (80, 60), (0, 255, 255, 0))  # magenta + yellow ink: red
    return encode(img, "jpeg")


def png_16bit() -> bytes:
    img = Image.new("I;16", (64, 48))
    img.putdata([(x * 1000 + y * 10) % 65536 for y in range(48) for x in range(64)])
    return encode(img, "png")


def palette_png_transparent() -> bytes:
    img = Image.new("P", (40, 30), 0)
    img.putpalette([255, 0, 0, 0, 0, 255] + [0, 0, 0] * 254)
    img.paste(1, (0, 0, 20, 30))  # left half: index 1 (blue, opaque); right: 0 (clear)
    buf = io.BytesIO()
    img.save(buf, format="PNG", transparency=0)
    return buf.getvalue()


def la_png() -> bytes:
    img = Image.new("LA", (30, 30), (128, 100))
    return encode(img, "png")


def animated(fmt: str, frames: int = 3) -> bytes:
    """An animation of ``frames`` frames in gif, webp or png (APNG)."""
    colours = [RED, BLUE, (20, 200, 20), (240, 240, 20)]
    imgs = [Image.new("RGB", (48, 32), colours[i % len(colours)]) for i in range(frames)]
    buf = io.BytesIO()
    imgs[0].save(
        buf, format=fmt.upper(), save_all=True, append_images=imgs[1:], duration=100, loop=0
    )
    return buf.getvalue()


def _chunk(kind: bytes, payload: bytes) -> bytes:
    body = kind + payload
    return struct.pack(">I", len(payload)) + body + struct.pack(">I", zlib.crc32(body))


def png_bomb(width: int = 40_000, height: int = 40_000) -> bytes:
    """A PNG whose header claims ``width x height`` with a tiny IDAT: never decode it."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\x00" * 1024)
    return (
        b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")
    )


def truncated(data: bytes) -> bytes:
    return data[: len(data) // 2]


def random_binary(n: int = 4096, seed: int = 7) -> bytes:
    return random.Random(seed).randbytes(n)


def source_code(lines: int = 300) -> bytes:
    return "".join(
        f"def f{i}(x):\n    return x * {i}  # line {2 * i + 2}\n" for i in range(lines // 2)
    ).encode()


def svg(body: str = '<rect x="10" y="10" width="80" height="40" fill="#1f8a80"/>') -> bytes:
    return (
        '<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" '
        f'width="120" height="80" viewBox="0 0 120 80">{body}</svg>'
    ).encode()


def svg_with_href(href: str) -> bytes:
    """An SVG whose whole canvas is an <image> pointing at ``href``."""
    return svg(f'<image href="{href}" xlink:href="{href}" x="0" y="0" width="120" height="80"/>')


def svg_billion_laughs() -> bytes:
    ents = ['<!ENTITY lol "lol">']
    ents += [
        f'<!ENTITY lol{i} "{("&lol" + (str(i - 1) if i > 1 else "") + ";") * 10}">'
        for i in range(1, 10)
    ]
    doctype = "<!DOCTYPE svg [" + "".join(ents) + "]>"
    return (
        f'<?xml version="1.0"?>{doctype}<svg xmlns="http://www.w3.org/2000/svg" width="100" '
        'height="100"><text x="0" y="50">&lol9;</text></svg>'
    ).encode()


def svg_external_entity(path: str) -> bytes:
    return (
        f'<?xml version="1.0"?><!DOCTYPE svg [<!ENTITY xxe SYSTEM "file://{path}">]>'
        '<svg xmlns="http://www.w3.org/2000/svg" width="100" height="100">'
        '<text x="0" y="50">&xxe;</text></svg>'
    ).encode()


def pdf(pages: int = 3, size: tuple[float, float] = (200, 300)) -> bytes:
    doc = pdfium.PdfDocument.new()
    try:
        for _ in range(pages):
            page = doc.new_page(*size)
            page.close()
        buf = io.BytesIO()
        doc.save(buf)
    finally:
        doc.close()
    return buf.getvalue()


def decode(data: bytes) -> Image.Image:
    """Open an encoded result fully (to check what a model would receive)."""
    img = Image.open(io.BytesIO(data))
    img.load()
    return img
