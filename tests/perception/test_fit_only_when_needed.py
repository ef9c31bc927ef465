"""view fits only when fitting changes what the provider accepts or bills (issue 26)."""

from __future__ import annotations

import io
from pathlib import Path

from PIL import Image, ImageDraw

from visus.models import get_model, image_tokens, pick_detail
from visus.perception import Perception, Reach, view


def _screenshot(path: Path, w: int, h: int) -> bytes:
    im = Image.new("RGB", (w, h), "white")
    draw = ImageDraw.Draw(im)
    for y in range(0, h, 18):
        draw.text((8, y), f"row {y}: settings, profile, sign out, help, search", fill="black")
    buf = io.BytesIO()
    im.save(buf, "PNG", optimize=True)
    path.write_bytes(buf.getvalue())
    return buf.getvalue()


def test_a_screenshot_gpt41_bills_the_same_either_way_is_sent_as_it_is(tmp_path: Path) -> None:
    original = _screenshot(tmp_path / "shot.png", 1600, 1000)
    seen = view("shot.png", reach=Reach([tmp_path]), model="gpt-4.1")
    assert isinstance(seen, Perception)
    assert seen.data == original  # not re-encoded (which made it about twice the bytes)
    assert (seen.width, seen.height, seen.tokens) == (1600, 1000, 1105)


def test_it_is_still_fitted_where_the_fit_changes_the_bill_or_what_is_accepted(
    tmp_path: Path,
) -> None:
    original = _screenshot(tmp_path / "big.png", 3000, 1000)
    reach = Reach([tmp_path])
    # Past the 2048 px square gpt-4.1 takes as it is: fitted.
    seen = view("big.png", reach=reach, model="gpt-4.1")
    assert isinstance(seen, Perception)
    assert seen.data != original
    assert max(seen.width, seen.height) <= 2048
    # Claude shrinks anything past its native size itself (with latency): fitted to it.
    seen = view("big.png", reach=reach, model="claude-sonnet-4-6")
    assert isinstance(seen, Perception)
    assert 1500 < max(seen.width, seen.height) <= 1568


def test_gpt54_sees_a_4k_screen_whole_at_detail_original(tmp_path: Path) -> None:
    _screenshot(tmp_path / "4k.png", 3840, 2160)
    seen = view("4k.png", reach=Reach([tmp_path]), model="gpt-5.4")
    assert isinstance(seen, Perception)
    assert (seen.width, seen.height) == (3840, 2160)
    spec = get_model("gpt-5.4")
    assert pick_detail(spec, 3840, 2160) == "original"
    assert seen.tokens == image_tokens(spec, 3840, 2160, detail="original") == 120 * 68
