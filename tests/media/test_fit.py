from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from media_corpus import CLAUDE, decoded, encode, photo, screenshot
from PIL import Image

from visus.errors import InvalidInputError, TooLargeError
from visus.media import Profile, classify, fit, load, target_size
from visus.media.fitting import encode as fit_encode

ALL = frozenset({"image/png", "image/jpeg", "image/webp", "image/gif"})


def test_target_size_examples() -> None:
    assert target_size(4000, 3000, 1568, 1_150_000) == (1238, 928)
    assert target_size(100, 50, 1568, 1_150_000) == (100, 50)  # never upscales
    assert target_size(30_000, 1, 1568, 10**6) == (1568, 1)
    assert target_size(1, 30_000, 100, 50) == (1, 50)


def test_content_classification() -> None:
    assert classify(photo(400, 300)) == "photo"
    assert classify(screenshot(400, 300)) == "graphic"
    assert classify(Image.new("RGB", (10, 10), "white")) == "graphic"


def test_photo_becomes_jpeg_and_screenshot_png() -> None:
    big = Profile(max_edge=800, max_pixels=800 * 600, max_bytes=5_000_000)
    assert load(encode(photo(1600, 1200), "PNG"), profile=big).media_type == "image/jpeg"
    assert load(encode(screenshot(1600, 1200), "JPEG"), profile=big).media_type == "image/png"


def test_photo_becomes_webp_when_jpeg_is_not_accepted() -> None:
    p = Profile(
        max_edge=400,
        max_pixels=400 * 300,
        max_bytes=5_000_000,
        media_types=frozenset({"image/png", "image/webp"}),
    )
    assert load(encode(photo(800, 600), "PNG"), profile=p).media_type == "image/webp"


def test_transparency_stays_png_and_is_flattened_for_jpeg_only_targets() -> None:
    im = Image.new("RGBA", (600, 400), (255, 0, 0, 0))
    im.paste((0, 0, 255, 255), (0, 0, 300, 400))
    data = encode(im, "PNG")
    small = Profile(max_edge=300, max_pixels=300 * 200, max_bytes=1_000_000)
    assert load(data, profile=small).media_type == "image/png"
    jpeg_only = Profile(300, 300 * 200, 1_000_000, frozenset({"image/jpeg"}))
    f = load(data, profile=jpeg_only)
    assert f.media_type == "image/jpeg"
    out = decoded(f.data).convert("RGB")
    assert out.getpixel((250, 100)) == (255, 255, 255)  # transparent became white


def test_bytes_budget_forces_lower_quality_then_smaller_size() -> None:
    data = encode(photo(2000, 1500), "JPEG", quality=95)
    roomy = load(data, profile=CLAUDE)
    lower_quality = load(data, profile=Profile(1568, 1_150_000, 100_000))
    smaller = load(data, profile=Profile(1568, 1_150_000, 30_000))
    assert roomy.size > 100_000
    assert lower_quality.size <= 100_000
    assert (lower_quality.width, lower_quality.height) == (roomy.width, roomy.height)
    assert smaller.size <= 30_000
    assert smaller.width < roomy.width  # the lowest quality was not enough: size gave


def test_png_only_target_with_tight_budget_still_fits() -> None:
    p = Profile(1568, 1_150_000, 40_000, frozenset({"image/png"}))
    f = load(encode(photo(1000, 800), "JPEG"), profile=p)
    assert f.media_type == "image/png"
    assert f.size <= 40_000


def test_impossible_budget_is_too_large_not_a_loop() -> None:
    with pytest.raises(TooLargeError):
        fit(encode(photo(50, 50), "PNG"), Profile(100, 10_000, 10, frozenset({"image/jpeg"})))


@pytest.mark.parametrize(
    "profile",
    [
        Profile(0, 10, 10),
        Profile(10, 10, 0),
        Profile(10, 10, 10, frozenset({"image/tiff"})),
    ],
)
def test_profiles_no_image_can_meet_are_invalid_input(profile: Profile) -> None:
    with pytest.raises(InvalidInputError):
        load(encode(photo(8, 8), "PNG"), profile=profile)


def test_same_input_same_bytes() -> None:
    im = photo(900, 700)
    p = Profile(500, 200_000, 50_000)
    assert fit_encode(im, p).data == fit_encode(im, p).data


_IMAGES = {
    "photo": lambda w, h: photo(w, h, seed=w * 7 + h),
    "graphic": screenshot,
    "alpha": lambda w, h: Image.new("RGBA", (w, h), (10, 200, 30, 120)),
}


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    kind=st.sampled_from(sorted(_IMAGES)),
    w=st.integers(1, 900),
    h=st.integers(1, 900),
    max_edge=st.integers(1, 1200),
    max_pixels=st.integers(1, 1_500_000),
    max_bytes=st.integers(2_000, 3_000_000),
    types=st.sets(st.sampled_from(sorted(ALL)), min_size=1),
)
def test_fitted_output_respects_every_bound(
    kind: str,
    w: int,
    h: int,
    max_edge: int,
    max_pixels: int,
    max_bytes: int,
    types: set[str],
) -> None:
    profile = Profile(max_edge, max_pixels, max_bytes, frozenset(types))
    f = fit(encode(_IMAGES[kind](w, h), "PNG"), profile)
    assert f.size <= max_bytes
    assert max(f.width, f.height) <= max_edge
    assert f.width * f.height <= max_pixels
    assert f.media_type in types
    out = decoded(f.data)
    assert out.size == (f.width, f.height)
    assert f.media_type == Image.MIME[out.format or ""]
