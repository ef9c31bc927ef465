"""media.changes: where two images differ, exactly, cut out of the new one.

The crops pasted onto the base give the new image pixel for pixel (no threshold: the
nearsame set's changed digit moves fewer pixels than a caret blink), for every change
of that set as ``view`` fits it for Claude.
"""

from __future__ import annotations

import io
import tempfile

import pytest
from PIL import Image

from tests.nearsame import PAIRS, Screen, draw
from visus import limits
from visus.errors import MediaError
from visus.media.changes import changed_regions
from visus.perception import Reach, Refusal, view


def _png(im: Image.Image) -> bytes:
    buf = io.BytesIO()
    im.save(buf, "PNG")
    return buf.getvalue()


def _rgb(data: bytes) -> Image.Image:
    return Image.open(io.BytesIO(data)).convert("RGB")


def _pasted(base: bytes, regions: tuple[tuple[int, int], ...], crops: tuple[bytes, ...]) -> bytes:
    out = _rgb(base)
    for at, crop in zip(regions, crops, strict=True):
        out.paste(_rgb(crop), at)
    return out.tobytes()


def _fitted(png: bytes) -> bytes:
    seen = view(png, reach=Reach([tempfile.mkdtemp()]), model="claude-sonnet-4-6", name="s.png")
    assert not isinstance(seen, Refusal), seen
    return seen.data


def test_every_nearsame_change_is_cut_out_exactly_and_small() -> None:
    base = _fitted(draw(Screen()))
    whole = _rgb(base).size
    for name, _, variant in PAIRS:
        new = _fitted(draw(variant))
        found = changed_regions(base, new)
        assert found is not None, name
        assert found.share < 0.01, (name, found.regions)
        corners = tuple((r.x0, r.y0) for r in found.regions)
        assert _pasted(base, corners, found.crops) == _rgb(new).tobytes(), name
        for region, crop in zip(found.regions, found.crops, strict=True):
            assert _rgb(crop).size == (region.width, region.height)
            assert 0 <= region.x0 < region.x1 <= whole[0]
            assert 0 <= region.y0 < region.y1 <= whole[1]


def test_one_level_of_one_pixel_is_a_change_and_equal_pixels_are_none() -> None:
    base = Image.new("RGB", (300, 200), (200, 200, 200))
    nudged = base.copy()
    nudged.putpixel((150, 100), (200, 200, 201))
    found = changed_regions(_png(base), _png(nudged))
    assert found is not None
    (region,) = found.regions
    assert region.x0 <= 150 < region.x1
    assert region.y0 <= 100 < region.y1
    # The same pixels in other bytes (another encoder setting) are no change at all.
    buf = io.BytesIO()
    base.save(buf, "PNG", compress_level=1)
    assert changed_regions(_png(base), buf.getvalue()) is None


def test_a_changed_page_or_another_size_gives_none() -> None:
    base = Image.effect_noise((320, 240), 40).convert("RGB")
    other = Image.effect_noise((320, 240), 41).convert("RGB")
    assert changed_regions(_png(base), _png(other)) is None  # everything changed
    assert changed_regions(_png(base), _png(base.resize((320, 241)))) is None


def test_far_apart_changes_stay_apart_up_to_the_region_cap() -> None:
    base = Image.new("RGB", (1200, 900), "white")
    new = base.copy()
    spots = [(20, 20), (1150, 20), (20, 850), (1150, 850), (600, 450)]
    for x, y in spots[:2]:
        new.paste((0, 0, 0), (x, y, x + 10, y + 10))
    two = changed_regions(_png(base), _png(new))
    assert two is not None
    assert len(two.regions) == 2
    for x, y in spots[2:]:
        new.paste((0, 0, 0), (x, y, x + 10, y + 10))
    capped = changed_regions(_png(base), _png(new))
    assert capped is None or len(capped.regions) <= limits.CHANGES_MAX_REGIONS
    assert changed_regions(_png(base), _png(new), max_share=1.0) is not None


def test_bytes_that_are_no_image_or_too_many_pixels_are_refused() -> None:
    png = _png(Image.new("RGB", (10, 10)))
    with pytest.raises(MediaError):
        changed_regions(b"not an image", png)
    side = int(limits.CHANGES_MAX_PIXELS**0.5) + 1
    big = Image.new("1", (side, side))  # 1-bit: a few hundred kilobytes of PNG
    with pytest.raises(MediaError, match="CHANGES_MAX_PIXELS"):
        changed_regions(_png(big), _png(big))
