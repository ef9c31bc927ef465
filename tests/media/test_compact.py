"""media.compact: an image re-encoded smaller at the same size, by its content, the same
bytes every time (bytes before pixels)."""

from __future__ import annotations

import io
import random

import pytest
from PIL import Image, ImageDraw

from visus.errors import MediaError
from visus.media.compact import compact

WEBP = frozenset({"image/png", "image/jpeg", "image/webp"})
JPEG = frozenset({"image/png", "image/jpeg"})


def _png(im: Image.Image) -> bytes:
    buf = io.BytesIO()
    im.save(buf, "PNG", compress_level=1)
    return buf.getvalue()


def _noise(w: int = 400, h: int = 300) -> Image.Image:
    return Image.frombytes("RGB", (w, h), random.Random(3).randbytes(w * h * 3))


def _text() -> Image.Image:
    im = Image.new("RGB", (600, 300), (250, 250, 250))
    d = ImageDraw.Draw(im)
    for i in range(12):
        d.text((10, 10 + 22 * i), f"line {i}: total = sum(order.amount)", fill=(20, 20, 20))
    return im


def test_a_photo_goes_lossy_smaller_at_its_size_the_same_bytes_every_time() -> None:
    png = _png(_noise())
    for types, media_type in ((WEBP, "image/webp"), (JPEG, "image/jpeg")):
        first = compact(png, types)
        assert first is not None
        assert (first.media_type, first.width, first.height) == (media_type, 400, 300)
        assert len(first.data) < len(png) * 0.7
        again = compact(png, types)
        assert again is not None
        assert again.data == first.data


def test_a_graphic_keeps_its_pixels_as_lossless_webp_or_stays_as_it_is() -> None:
    im = _text()
    png = _png(im)
    small = compact(png, WEBP)
    assert small is not None
    assert small.media_type == "image/webp"
    assert len(small.data) < len(png)
    assert Image.open(io.BytesIO(small.data)).convert("RGB").tobytes() == im.tobytes()
    assert compact(png, JPEG) is None  # no lossy encoding for text where WebP is refused


def test_transparency_is_kept_and_nothing_larger_is_returned() -> None:
    clear = Image.new("RGBA", (200, 100), (0, 0, 0, 0))
    ImageDraw.Draw(clear).ellipse((20, 20, 80, 80), fill=(200, 30, 30, 255))
    small = compact(_png(clear), WEBP)
    assert small is not None
    assert Image.open(io.BytesIO(small.data)).mode == "RGBA"
    assert compact(_png(clear), JPEG) is None
    tiny = _png(Image.new("RGB", (8, 8), "white"))
    assert compact(tiny, WEBP) is None or len(compact(tiny, WEBP).data) < len(tiny)  # type: ignore[union-attr]


def test_what_is_no_image_is_refused() -> None:
    with pytest.raises(MediaError):
        compact(b"not an image at all", WEBP)
