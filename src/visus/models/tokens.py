"""Image-token estimates: what one image of ``width x height`` costs a model.

Each formula follows the provider's published guide (see docs/WIRES.md); the
parameters are data on the model's :class:`~visus.models.spec.ModelSpec`.

Example:
    >>> from visus.models.spec import ModelSpec, OpenAITiles
    >>> gpt4o = ModelSpec(name="gpt-4o", provider="openai", vision=True, tokens=OpenAITiles())
    >>> image_tokens(gpt4o, 1024, 1024)
    765
    >>> image_tokens(gpt4o, 1024, 1024, detail="low")
    85
"""

from __future__ import annotations

import math
from typing import assert_never

from visus.errors import InvalidInputError
from visus.models.spec import (
    AnthropicPatches,
    FlatTokens,
    GeminiTiles,
    ModelSpec,
    OpenAIPatches,
    OpenAITiles,
)

__all__ = ["DETAILS", "image_tokens", "pick_detail"]

#: Accepted ``detail`` values: OpenAI's levels (``original`` on the models that take
#: it) and Gemini 3's media resolutions (``low``, ``medium``, ``high``, ``ultra_high``).
#: Formulas without a notion of detail ignore it.
DETAILS = frozenset({"auto", "low", "medium", "high", "ultra_high", "original"})


def pick_detail(spec: ModelSpec, width: int, height: int) -> str:
    """The detail to send a ``width x height`` image at so the model reads what is sent.

    OpenAI models with ``detail: "original"``: ``high`` while the image is inside
    high detail's bounds (the model sees it whole either way), else ``original`` (high
    would shrink it). Gemini 3: the model's media resolution, set per image. Others:
    ``auto``. :func:`image_tokens` with this detail is what the image costs.

    Example:
        >>> from visus.models import get_model
        >>> gpt = get_model("gpt-5.4")
        >>> pick_detail(gpt, 1600, 1000), pick_detail(gpt, 3840, 2160)
        ('high', 'original')
        >>> pick_detail(get_model("claude-sonnet-4-6"), 3840, 2160)
        'auto'
    """
    f = spec.tokens
    if isinstance(f, OpenAIPatches) and f.original_budget is not None:
        within = max(width, height) <= f.max_edge and _patches(width, height, f.patch) <= f.budget
        return "high" if within else "original"
    if isinstance(f, GeminiTiles) and f.media_resolution is not None:
        return f.media_resolution
    return "auto"


def image_tokens(spec: ModelSpec, width: int, height: int, *, detail: str | None = None) -> int:
    """Estimated input tokens for one ``width x height`` image sent to ``spec``.

    ``detail`` is one of :data:`DETAILS`, or ``None``: the detail visus sends the image
    at (:func:`pick_detail`). It matters for OpenAI tile models (``low`` costs the base
    only), OpenAI models with ``original`` detail (its larger bounds; ``auto`` is what
    the model's ``auto`` means) and Gemini 3 (the media resolution; ``auto`` keeps the
    model's default).

    Example:
        >>> from visus.models.spec import ModelSpec, AnthropicPatches
        >>> claude = ModelSpec(name="c", provider="anthropic", tokens=AnthropicPatches())
        >>> image_tokens(claude, 1000, 1000)
        1296
    """
    if isinstance(width, bool) or isinstance(height, bool) or width < 1 or height < 1:
        raise InvalidInputError(f"image size must be positive, got {width}x{height}")
    if detail is None:
        detail = pick_detail(spec, width, height)
    if detail not in DETAILS:
        raise InvalidInputError(f"detail must be one of {sorted(DETAILS)}, got {detail!r}")
    formula = spec.tokens
    if isinstance(formula, AnthropicPatches):
        return _anthropic(formula, width, height)
    if isinstance(formula, OpenAITiles):
        return _openai_tiles(formula, width, height, detail)
    if isinstance(formula, OpenAIPatches):
        return _openai_patches(formula, width, height, detail)
    if isinstance(formula, GeminiTiles):
        return _gemini(formula, width, height, detail)
    if isinstance(formula, FlatTokens):
        return formula.tokens
    assert_never(formula)


def _patches(width: int, height: int, patch: int) -> int:
    return math.ceil(width / patch) * math.ceil(height / patch)


def _anthropic(f: AnthropicPatches, width: int, height: int) -> int:
    """Shrink (aspect kept) to the native edge and token budget, then count 28 px patches."""
    w, h = width, height
    long_edge = max(w, h)
    if long_edge > f.native_edge:
        scale = f.native_edge / long_edge
        w, h = max(1, math.floor(w * scale)), max(1, math.floor(h * scale))
    if _patches(w, h, f.patch) > f.native_tokens:
        scale = math.sqrt(f.native_tokens * f.patch * f.patch / (w * h))
        w, h = max(1, math.floor(w * scale)), max(1, math.floor(h * scale))
        # The square-root scale ignores the ceil at the patch edges; step down
        # along the aspect ratio until the patch count is inside the budget.
        while _patches(w, h, f.patch) > f.native_tokens:
            if w >= h:
                w -= 1
                h = max(1, math.floor(w * height / width))
            else:
                h -= 1
                w = max(1, math.floor(h * width / height))
    return _patches(w, h, f.patch)


def _openai_tiles(f: OpenAITiles, width: int, height: int, detail: str) -> int:
    if detail == "low":
        return f.base
    w, h = float(width), float(height)
    if max(w, h) > f.fit_square:
        scale = f.fit_square / max(w, h)
        w, h = w * scale, h * scale
    # The guide scales the short side down to 768; it never scales up.
    if min(w, h) > f.short_side:
        scale = f.short_side / min(w, h)
        w, h = w * scale, h * scale
    tiles = math.ceil(math.floor(w) / f.tile_size) * math.ceil(math.floor(h) / f.tile_size)
    return f.base + tiles * f.tile


def _openai_patches(f: OpenAIPatches, width: int, height: int, detail: str) -> int:
    """32 px patches; past the edge or over the budget, shrink so whole patches fit,
    then apply the multiplier. ``original`` detail has its own bounds where the model
    takes it."""
    budget, edge = f.budget, f.max_edge
    if detail == "auto":
        detail = f.auto_detail
    if detail == "original" and f.original_budget is not None:
        budget, edge = f.original_budget, f.original_edge or edge
    if max(width, height) > edge:
        scale = edge / max(width, height)
        width, height = max(1, math.floor(width * scale)), max(1, math.floor(height * scale))
    patches = _patches(width, height, f.patch)
    if patches > budget:
        shrink = math.sqrt(f.patch * f.patch * budget / (width * height))
        pw, ph = width * shrink / f.patch, height * shrink / f.patch
        # Shrink once more so the tighter side holds a whole number of patches.
        shrink *= min(math.floor(pw) / pw, math.floor(ph) / ph)
        w, h = max(1, int(width * shrink)), max(1, int(height * shrink))
        patches = min(_patches(w, h, f.patch), budget)
    return math.ceil(patches * f.multiplier)


def _gemini(f: GeminiTiles, width: int, height: int, detail: str) -> int:
    if f.media_resolution is not None:
        resolution: str = f.media_resolution
        if detail in ("low", "medium", "high", "ultra_high"):
            resolution = detail
        return {
            "low": f.low_tokens,
            "medium": f.medium_tokens,
            "high": f.high_tokens,
            "ultra_high": f.ultra_high_tokens,
        }[resolution]
    if width <= f.small_edge and height <= f.small_edge:
        return f.per_tile
    return math.ceil(width / f.tile) * math.ceil(height / f.tile) * f.per_tile
