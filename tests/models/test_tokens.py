"""Image-token formulas against the providers' worked examples.

Sources (as summarised in docs/WIRES.md):
- OpenAI images-vision guide, "Calculating costs": tile models (gpt-4o 85 + 170 per
  512 px tile) and patch models (32 px patches, 1536 budget, multipliers).
- Anthropic Claude vision guide: tokens = ceil(w/28) * ceil(h/28) after the image is
  shrunk to the native limit; its table of the largest sizes that are not resized.
- Gemini token docs: <= 384 px both sides -> 258; else 768 px tiles at 258 each;
  Gemini 3 media_resolution low/medium/high = 280/560/1120.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from visus.errors import InvalidInputError
from visus.models import (
    AnthropicPatches,
    GeminiTiles,
    ModelSpec,
    OpenAIPatches,
    get_model,
    image_tokens,
    pick_detail,
)


# --- OpenAI tile models -------------------------------------------------------------
def test_openai_guide_1024_square_high_is_765() -> None:
    # 1024 fits 2048; short side 1024 -> 768: 768x768 = 2x2 tiles: 85 + 4*170.
    assert image_tokens(get_model("gpt-4o"), 1024, 1024, detail="high") == 765


def test_openai_guide_2048x4096_is_1105() -> None:
    # fit 2048 -> 1024x2048; short side -> 768x1536 = 2x3 tiles: 85 + 6*170.
    assert image_tokens(get_model("gpt-4o"), 2048, 4096) == 1105


def test_openai_guide_low_detail_is_base_only() -> None:
    assert image_tokens(get_model("gpt-4o"), 4096, 8192, detail="low") == 85
    assert image_tokens(get_model("gpt-5"), 4096, 8192, detail="low") == 70
    assert image_tokens(get_model("o3"), 4096, 8192, detail="low") == 75


def test_openai_base_and_tile_per_model() -> None:
    # 1024x1024 -> 4 tiles for every tile model; base/tile from WIRES.md.
    assert image_tokens(get_model("gpt-4.1"), 1024, 1024) == 85 + 4 * 170
    assert image_tokens(get_model("gpt-5"), 1024, 1024) == 70 + 4 * 140
    assert image_tokens(get_model("o3"), 1024, 1024) == 75 + 4 * 150


def test_openai_small_image_is_never_scaled_up() -> None:
    # 300x200 stays as is: one tile.
    assert image_tokens(get_model("gpt-4o"), 300, 200) == 85 + 170
    # 600x200: short side 200 < 768, not scaled: 2x1 tiles.
    assert image_tokens(get_model("gpt-4o"), 600, 200) == 85 + 2 * 170


# --- OpenAI patch models ------------------------------------------------------------
def _raw_patches(multiplier: float = 1.0) -> ModelSpec:
    return ModelSpec(name="p", provider="openai", tokens=OpenAIPatches(multiplier=multiplier))


def test_openai_guide_patches_1024_square_is_1024() -> None:
    # 32x32 patches of 32 px, under the 1536 budget.
    assert image_tokens(_raw_patches(), 1024, 1024) == 1024


def test_openai_guide_patches_1800x2400_is_1452() -> None:
    # 57x75 = 4275 > 1536: shrink sqrt(1024*1536/(1800*2400)) -> 1086x1448, then so
    # the width holds 33 whole patches -> 1056x1408 = 33 x 44 = 1452 patches.
    assert image_tokens(_raw_patches(), 1800, 2400) == 1452


def test_openai_patch_multipliers() -> None:
    assert image_tokens(get_model("gpt-4.1-mini"), 1024, 1024) == math.ceil(1024 * 1.62)
    assert image_tokens(get_model("gpt-4.1-nano"), 1024, 1024) == math.ceil(1024 * 2.46)
    assert image_tokens(get_model("o4-mini"), 1800, 2400) == math.ceil(1452 * 1.72)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 20_000), st.integers(1, 20_000))
def test_patches_never_exceed_budget(w: int, h: int) -> None:
    assert 1 <= image_tokens(_raw_patches(), w, h) <= 1536


# --- Anthropic -----------------------------------------------------------------------
def test_anthropic_examples() -> None:
    sonnet = get_model("claude-sonnet-4-6")
    assert image_tokens(sonnet, 1000, 1000) == 36 * 36 == 1296
    assert image_tokens(sonnet, 1092, 1092) == 39 * 39 == 1521
    assert image_tokens(sonnet, 200, 200) == 8 * 8


@pytest.mark.parametrize(
    ("w", "h", "tokens"),
    [
        # The vision guide's largest sizes per aspect ratio that are not resized.
        (1092, 1092, 39 * 39),
        (951, 1268, 34 * 46),
        (896, 1344, 32 * 48),
        (819, 1456, 30 * 52),
        (784, 1568, 28 * 56),
    ],
)
def test_anthropic_guide_max_unresized_sizes(w: int, h: int, tokens: int) -> None:
    spec = get_model("claude-haiku-4-5")
    assert image_tokens(spec, w, h) == tokens <= 1568
    assert image_tokens(spec, h, w) == tokens


def test_anthropic_big_square_shrinks_to_native_budget() -> None:
    # 3000 px -> 1568 edge (3136 patches) -> budget: largest square under 1568 tokens
    # is 1092 px (39 x 39 patches).
    assert image_tokens(get_model("claude-sonnet-4-5"), 3000, 3000) == 1521


def test_anthropic_newest_opus_native_limit() -> None:
    opus = get_model("claude-opus-4-7")
    # 2576 square -> 92x92 patches > 4784 -> largest square under budget is 69x69.
    assert image_tokens(opus, 2576, 2576) == 69 * 69
    # 1568 x 784 fits: 56 x 28 patches.
    assert image_tokens(opus, 1568, 784) == 56 * 28
    # The same image costs the 1568-token models their budget-limited count.
    assert image_tokens(get_model("claude-opus-4-5"), 2576, 2576) == 1521


def test_anthropic_long_edge_shrink_keeps_aspect() -> None:
    # 3136 x 392 -> 1568 x 196: 56 x 7 patches.
    assert image_tokens(get_model("claude-sonnet-4-6"), 3136, 392) == 56 * 7


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 30_000), st.integers(1, 30_000))
def test_anthropic_never_over_budget(w: int, h: int) -> None:
    spec = ModelSpec(name="c", provider="anthropic", tokens=AnthropicPatches())
    assert 1 <= image_tokens(spec, w, h) <= 1568


# --- OpenAI detail "original" -------------------------------------------------------
def test_gpt54_high_keeps_2500_patches_and_original_10000() -> None:
    gpt = get_model("gpt-5.4")
    # 1600 x 1000: 50 x 32 = 1600 patches, inside high's budget: whole at high.
    assert pick_detail(gpt, 1600, 1000) == "high"
    assert image_tokens(gpt, 1600, 1000, detail="high") == 1600
    # 3840 x 2160: 120 x 68 = 8160 patches. High would shrink it to 2500 patches or
    # fewer; original keeps it whole, and visus picks original and counts it so.
    assert pick_detail(gpt, 3840, 2160) == "original"
    assert image_tokens(gpt, 3840, 2160, detail="original") == 8160
    assert image_tokens(gpt, 3840, 2160, detail="high") <= 2500
    # Past original's bounds the API shrinks it to 10,000 patches at most.
    assert image_tokens(gpt, 6000, 6000, detail="original") <= 10_000


def test_models_without_original_ignore_it() -> None:
    mini = get_model("gpt-5.4-mini")
    assert pick_detail(mini, 3840, 2160) == "auto"
    assert image_tokens(mini, 3840, 2160, detail="original") == image_tokens(mini, 3840, 2160)
    # High detail also caps the edge at 2048 px before counting patches.
    assert image_tokens(mini, 4000, 100) == math.ceil(64 * 2 * 1.62)


# --- Gemini ---------------------------------------------------------------------------
def test_gemini_2_tiles() -> None:
    flash = get_model("gemini-2.5-flash")
    assert image_tokens(flash, 384, 384) == 258
    assert image_tokens(flash, 100, 50) == 258
    assert image_tokens(flash, 385, 100) == 258  # one 768 tile
    assert image_tokens(flash, 1024, 1024) == 4 * 258
    assert image_tokens(flash, 3000, 1000) == 4 * 2 * 258


def test_gemini_3_media_resolution() -> None:
    pro3 = get_model("gemini-3-pro")
    assert image_tokens(pro3, 4000, 3000) == 1120  # image default: high
    assert image_tokens(pro3, 10, 10, detail="low") == 280
    medium = ModelSpec(name="g", provider="gemini", tokens=GeminiTiles(media_resolution="medium"))
    assert image_tokens(medium, 1000, 1000) == 560
    assert image_tokens(medium, 1000, 1000, detail="high") == 1120
    assert image_tokens(pro3, 1000, 1000, detail="ultra_high") == 2240
    assert pick_detail(pro3, 4000, 3000) == "high"  # sent per image
    assert pick_detail(get_model("gemini-2.5-flash"), 4000, 3000) == "auto"


# --- flat and errors ------------------------------------------------------------------
def test_flat_models() -> None:
    assert image_tokens(get_model("ollama:llava"), 5000, 10) == 576


@pytest.mark.parametrize(("w", "h"), [(0, 10), (10, 0), (-1, 5)])
def test_bad_sizes_raise(w: int, h: int) -> None:
    with pytest.raises(InvalidInputError):
        image_tokens(get_model("gpt-4o"), w, h)


def test_bad_detail_raises() -> None:
    with pytest.raises(InvalidInputError, match="detail"):
        image_tokens(get_model("gpt-4o"), 10, 10, detail="ultra")


def test_auto_means_what_the_model_makes_of_it_and_no_detail_what_visus_sends() -> None:
    gpt54, gpt55 = get_model("gpt-5.4"), get_model("gpt-5.5")
    # auto is high on gpt-5.4 and original on gpt-5.5 (images-vision guide).
    assert image_tokens(gpt54, 3840, 2160, detail="auto") <= 2500
    assert image_tokens(gpt55, 3840, 2160, detail="auto") == 8160
    # No detail: what visus sends it at (pick_detail): original for both.
    assert image_tokens(gpt54, 3840, 2160) == image_tokens(gpt55, 3840, 2160) == 8160
