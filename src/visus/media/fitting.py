"""Fit a decoded image into a :class:`Profile`: size, then an encoding that fits the bytes.

The encoder is picked by content: PNG for line art, screenshots, text renders and
transparency; JPEG (WebP when JPEG is not accepted) for photographs. If the bytes do
not fit, quality drops first, then the dimensions, until they do; every step makes
the output strictly smaller, so the loop ends.
"""

from __future__ import annotations

import functools
import heapq
import io
import math
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal

from PIL import Image

from visus.errors import InvalidInputError, TooLargeError
from visus.media import _vips
from visus.media.types import Profile

__all__ = [
    "Content",
    "Encoded",
    "check_profile",
    "classify",
    "encode",
    "resize",
    "target_size",
]

Content = Literal["photo", "graphic"]

_PNG, _JPEG, _WEBP, _GIF = "image/png", "image/jpeg", "image/webp", "image/gif"
_ENCODABLE = frozenset({_PNG, _JPEG, _WEBP, _GIF})
_LOSSY_QUALITIES = (85, 75, 60, 45, 30)
# Each retry at smaller dimensions shrinks both sides by at least this factor.
_MAX_SHRINK = 0.85
_MIN_SHRINK = 0.25
# The content measure samples at most this many pixels per side (nearest neighbour).
_SAMPLE_EDGE = 96
# Output rows per band when resampling (see resize).
_BAND_ROWS = 32
# Threads that resample bands of one image at once.
_MAX_RESIZE_THREADS = 4
# Modes Pillow resamples with alpha premultiplied, and the premultiplied mode.
_PREMULTIPLIED = {"RGBA": "RGBa", "LA": "La"}
# A graphic has most of its pixels in few exact colours (flat fills, text on a background).
_TOP_COLOURS = 16
_GRAPHIC_SHARE = 0.5


@dataclass(frozen=True, slots=True)
class Encoded:
    data: bytes
    media_type: str
    width: int
    height: int


def check_profile(profile: Profile) -> None:
    """Raise :class:`InvalidInputError` for a profile no image can meet."""
    if profile.max_edge < 1 or profile.max_pixels < 1 or profile.max_bytes < 1:
        raise InvalidInputError(f"profile bounds must be positive: {profile}")
    if not profile.media_types & _ENCODABLE:
        raise InvalidInputError(
            f"profile accepts none of {sorted(_ENCODABLE)}: {sorted(profile.media_types)}"
        )


def target_size(width: int, height: int, max_edge: int, max_pixels: int) -> tuple[int, int]:
    """The largest size with the aspect of ``width`` x ``height`` inside both bounds.

    Never upscales. Example:
        >>> target_size(4000, 3000, 1568, 1_150_000)
        (1238, 928)
    """
    width, height = max(1, width), max(1, height)
    scale = min(1.0, max_edge / max(width, height), math.sqrt(max_pixels / (width * height)))
    w = max(1, min(width, math.floor(width * scale)))
    h = max(1, min(height, math.floor(height * scale)))
    # Float rounding (and the 1 px floor for extreme aspects) can leave us a hair over.
    while w * h > max_pixels or max(w, h) > max_edge:
        if w >= h and w > 1:
            w -= 1
        elif h > 1:
            h -= 1
        else:
            break
    return w, h


def classify(im: Image.Image) -> Content:
    """``graphic`` when a few exact colours cover most pixels, else ``photo``.

    Example:
        >>> classify(Image.new("RGB", (50, 50), "white"))
        'graphic'
    """
    w, h = im.size
    sample = im.resize((min(w, _SAMPLE_EDGE), min(h, _SAMPLE_EDGE)), Image.Resampling.NEAREST)
    if sample.mode not in ("RGB", "RGBA"):
        sample = sample.convert("RGBA")
    n = sample.width * sample.height
    colours = sample.getcolors(n) or []
    top = sum(heapq.nlargest(_TOP_COLOURS, (c for c, _ in colours)))
    return "graphic" if top >= _GRAPHIC_SHARE * n else "photo"


def _has_alpha(im: Image.Image) -> bool:
    return im.mode == "RGBA" and im.getchannel("A").getextrema() != (255, 255)


def _order(content: Content, alpha: bool) -> tuple[str, ...]:
    if alpha or content == "graphic":
        return (_PNG, _WEBP, _GIF, _JPEG)
    return (_JPEG, _WEBP, _PNG, _GIF)


def _flatten(im: Image.Image) -> Image.Image:
    if im.mode != "RGBA":
        return im if im.mode == "RGB" else im.convert("RGB")
    base = Image.new("RGB", im.size, (255, 255, 255))
    base.paste(im, mask=im.getchannel("A"))
    return base


def _save(im: Image.Image, fmt: str, **params: object) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **params)
    return buf.getvalue()


def _encodings(im: Image.Image, media_type: str, content: Content) -> Iterator[bytes]:
    """Successively smaller encodings of ``im`` in ``media_type``, best first."""
    if media_type == _JPEG:
        flat = _flatten(im)
        # 4:2:0 chroma is invisible in photos; text and lines keep full chroma.
        subsampling = 2 if content == "photo" else 0
        for q in _LOSSY_QUALITIES:
            yield _save(flat, "JPEG", quality=q, subsampling=subsampling)
    elif media_type == _WEBP:
        if content == "graphic" or _has_alpha(im):
            yield _save(im, "WEBP", lossless=True, quality=80, method=4)
        for q in _LOSSY_QUALITIES:
            yield _save(im, "WEBP", quality=q, method=4)
    elif media_type == _PNG:
        yield _vips.png(im)
        # Screenshots and line art lose little in a 256-colour palette.
        yield _save(_palette(im), "PNG", compress_level=9)
    else:
        yield _save(_palette(im), "GIF")


def _palette(im: Image.Image) -> Image.Image:
    return im.quantize(256, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)


def resize(im: Image.Image, size: tuple[int, int], content: Content) -> Image.Image:
    """``im`` resampled to ``size`` with Lanczos, for photos and graphics alike (crisp
    text and edges; photos as sharp as a full-resolution Lanczos: bilinear measured
    SSIM 0.915 against it on a 12 MP photo, Lanczos 0.959).

    Large images are resampled in horizontal bands (Pillow's ``box`` reads the filter's
    support from outside each band, so the seams are invisible): the intermediate of
    the two-pass resample then stays a band high instead of a whole image, and the
    bands run on a small thread pool (Pillow releases the GIL while it resamples), which
    pays for Lanczos's wider kernel.
    """
    if im.size == size:
        return im
    resample = Image.Resampling.LANCZOS
    w, h = im.size
    tw, th = size
    if th <= _BAND_ROWS:
        return im.resize(size, resample, reducing_gap=3.0)
    im.load()
    mode = im.mode
    if mode in _PREMULTIPLIED:
        # Pillow premultiplies alpha on every resize call: per band, that was a copy of
        # the whole image per thread (a 36 MP RGBA source took 290 MB more). Once here.
        im = im.convert(_PREMULTIPLIED[mode])
    out = Image.new(im.mode, size)
    step = h / th

    def band(y0: int) -> Image.Image:
        y1 = min(th, y0 + _BAND_ROWS)
        return im.resize(
            (tw, y1 - y0), resample, box=(0, y0 * step, w, y1 * step), reducing_gap=3.0
        )

    starts = range(0, th, _BAND_ROWS)
    for y0, piece in zip(starts, _pool().map(band, starts), strict=True):
        out.paste(piece, (0, y0))
    return out.convert(mode) if out.mode != mode else out


@functools.cache
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(
        max_workers=min(_MAX_RESIZE_THREADS, os.cpu_count() or 1),
        thread_name_prefix="visus-resize",
    )


def encode(im: Image.Image, profile: Profile, *, content: Content | None = None) -> Encoded:
    """Resize and encode ``im`` (RGB or RGBA) so the result meets every bound of ``profile``.

    ``content`` forces the encoder family (``graphic`` for text renders); by default it
    is measured. Raises :class:`TooLargeError` only when even a 1 x 1 image cannot
    meet ``profile.max_bytes``.

    Example:
        >>> p = Profile(max_edge=100, max_pixels=5000, max_bytes=10_000)
        >>> e = encode(Image.new("RGB", (400, 200), "red"), p)
        >>> (e.media_type, e.width, e.height)
        ('image/png', 100, 50)
    """
    check_profile(profile)
    if im.mode not in ("RGB", "RGBA"):
        im = im.convert("RGBA" if "A" in im.getbands() else "RGB")
    alpha = _has_alpha(im)
    if im.mode == "RGBA" and not alpha:
        im = im.convert("RGB")
    kind = content or classify(im)
    media_type = next(t for t in _order(kind, alpha) if t in profile.media_types)
    size = target_size(im.width, im.height, profile.max_edge, profile.max_pixels)
    while True:
        resized = resize(im, size, kind)
        smallest = 0
        for data in _encodings(resized, media_type, kind):
            if len(data) <= profile.max_bytes:
                return Encoded(data, media_type, size[0], size[1])
            smallest = len(data) if not smallest else min(smallest, len(data))
        if size == (1, 1):
            raise TooLargeError(
                f"no {media_type} encoding fits max_bytes={profile.max_bytes}, "
                f"even at 1 x 1 ({smallest} bytes)"
            )
        # Bytes scale roughly with pixels: aim under the budget, always shrinking.
        factor = min(_MAX_SHRINK, max(_MIN_SHRINK, 0.9 * math.sqrt(profile.max_bytes / smallest)))
        size = (max(1, math.floor(size[0] * factor)), max(1, math.floor(size[1] * factor)))
