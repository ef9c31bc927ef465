"""Bytes before pixels: an image re-encoded smaller at the same size, its words still legible.

A request over its byte budget (Anthropic: 32 MB) used to lose its oldest images. Most of
those bytes are an encoding's, not the pixels': a screenshot of noise or a photo saved
as PNG is several times the size of a lossy encoding a model reads as well, and a
screenshot of text is half again as small as lossless WebP. :func:`compact` re-encodes an
image by its content (:func:`visus.media.classify`), in the encoding
``python -m benchmarks bytes`` measured (benchmarks/RESULTS.md "bytes": the reference
model's OCR on noise, a photo with a caption and a fitted editor screen with 7 px text):

* a graphic (text, lines, flat fills; or with transparency): lossless WebP, the same
  pixels; where WebP is not taken it stays as it is (PNG is already lossless);
* a photo or noise: WebP at quality 90, the smallest WebP quality that still read every
  word the PNG reads on all three images, the 7 px editor text included (the photos
  alone read at 40 already; a photo may carry small text); else JPEG at quality 90 with
  full-resolution colour (every word on both photos).

Same pixel count, same tokens; only bytes change, and only when fewer. Deterministic: the
same image gives the same bytes every time (one encoder, fixed settings), so a history
re-sent at every step keeps a prompt cache hitting. The decode runs in this process
under a reservation of the memory budget, for images within
:data:`visus.limits.RASTER_INPROCESS_MAX_PIXELS` (what a model is sent is far smaller).

Example:
    >>> import io
    >>> from PIL import Image
    >>> noise = Image.effect_noise((300, 200), 64).convert("RGB")
    >>> buf = io.BytesIO(); noise.save(buf, "PNG"); png = buf.getvalue()
    >>> small = compact(png, frozenset({"image/png", "image/jpeg"}))
    >>> small.media_type, (small.width, small.height), len(small.data) < len(png)
    ('image/jpeg', (300, 200), True)
    >>> compact(png, frozenset({"image/png"})) is None  # nothing smaller it may use
    True
"""

from __future__ import annotations

import io

from PIL import Image

from visus import limits
from visus.budget import MEMORY
from visus.errors import TooLargeError, UnsupportedTypeError
from visus.media import raster
from visus.media._guard import translated
from visus.media.fitting import classify
from visus.media.types import Fitted, Profile

__all__ = ["compact"]

#: Pillow format and options per (content, media type), WebP first (see the module's
#: docstring and benchmarks/RESULTS.md "bytes" for the qualities).
_ENCODINGS: dict[tuple[str, str], tuple[str, dict[str, object]]] = {
    ("graphic", "image/webp"): ("WEBP", {"lossless": True, "quality": 80, "method": 4}),
    ("photo", "image/webp"): ("WEBP", {"quality": 90, "method": 4}),
    ("photo", "image/jpeg"): ("JPEG", {"quality": 90, "subsampling": 0}),
}


def _choice(content: str, media_types: frozenset[str]) -> tuple[str, str, dict[str, object]] | None:
    for media_type in ("image/webp", "image/jpeg"):
        found = _ENCODINGS.get((content, media_type))
        if found is not None and media_type in media_types:
            return (media_type, *found)
    return None


def compact(data: bytes, media_types: frozenset[str]) -> Fitted | None:
    """``data`` re-encoded at its own size, or ``None`` when that is not smaller or no
    encoding for its content is in ``media_types``: a graphic (a screenshot of text)
    losslessly as WebP, a photo (or noise) lossy as WebP, else JPEG.

    Raises :class:`~visus.errors.MediaError` for bytes that are no raster image or one
    past :data:`~visus.limits.RASTER_INPROCESS_MAX_PIXELS`.
    """
    with translated("image"):
        im = raster.identify(data)
        if im is None:
            raise UnsupportedTypeError("not a raster image Pillow can decode")
        with im:
            header = raster.read_header(im)
            w, h = header.width, header.height
            if w * h > limits.RASTER_INPROCESS_MAX_PIXELS:
                raise TooLargeError(
                    f"an image of {w} x {h} is past the {limits.RASTER_INPROCESS_MAX_PIXELS:,} "
                    "pixels it is re-encoded at (limits.RASTER_INPROCESS_MAX_PIXELS)"
                )
            with MEMORY.reserve(w * h * 4 * 3, what=f"re-encoding a {w} x {h} image"):
                own = Profile(max(w, h), w * h, len(data))
                decoded = raster.decode(header, own)
                content = "graphic" if decoded.mode == "RGBA" else classify(decoded)
                choice = _choice(content, media_types)
                if choice is None:
                    return None
                media_type, fmt, options = choice
                out = _encode(decoded, fmt, options)
    if len(out) >= len(data):
        return None
    return Fitted(
        data=out,
        media_type=media_type,
        width=w,
        height=h,
        source_width=w,
        source_height=h,
        source_kind="raster",
        frame_count=1,
    )


def _encode(im: Image.Image, fmt: str, options: dict[str, object]) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **options)
    return buf.getvalue()
