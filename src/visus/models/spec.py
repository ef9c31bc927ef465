"""What visus knows about a model: capabilities, image limits, token formula, prices.

These are values; the catalog (data) lives in ``visus.models.catalog`` and the
formulas in ``visus.models.tokens``.

Example:
    >>> spec = ModelSpec(name="m", provider="openai", vision=True)
    >>> spec.profile().max_edge
    2048
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from visus.media.types import DEFAULT_MEDIA_TYPES, Profile

__all__ = [
    "AnthropicPatches",
    "FlatTokens",
    "GeminiTiles",
    "MediaResolution",
    "ModelSpec",
    "OpenAIPatches",
    "OpenAITiles",
    "Provider",
    "ThinkingMode",
    "TokenFormula",
]

#: Gemini 3's per-image ``media_resolution`` levels.
MediaResolution: TypeAlias = Literal["low", "medium", "high", "ultra_high"]

#: How a model thinks: see :attr:`ModelSpec.thinking`.
ThinkingMode: TypeAlias = Literal["none", "manual", "adaptive", "always"]

Provider: TypeAlias = Literal[
    "anthropic", "openai", "openai-compatible", "gemini", "ollama", "bedrock", "reference"
]


@dataclass(frozen=True, slots=True)
class AnthropicPatches:
    """Shrink to ``native_edge`` and ``native_tokens``, then ceil(w/28)*ceil(h/28)."""

    native_edge: int = 1568
    native_tokens: int = 1568
    patch: int = 28
    kind: Literal["anthropic"] = "anthropic"


@dataclass(frozen=True, slots=True)
class OpenAITiles:
    """Fit 2048 square, short side to 768, 512 px tiles: base + tiles * tile."""

    base: int = 85
    tile: int = 170
    fit_square: int = 2048
    short_side: int = 768
    tile_size: int = 512
    kind: Literal["openai-tiles"] = "openai-tiles"


@dataclass(frozen=True, slots=True)
class OpenAIPatches:
    """32 px patches capped at ``budget`` (and ``max_edge``), times ``multiplier``.

    ``original_budget``/``original_edge`` are the bounds of ``detail: "original"`` on
    models that take it (``None``: the model has no original detail); ``auto_detail``
    is what ``auto`` means there.
    """

    budget: int = 1536
    multiplier: float = 1.0
    patch: int = 32
    max_edge: int = 2048
    original_budget: int | None = None
    original_edge: int | None = None
    #: What ``detail: "auto"`` (or none) means for the model: ``high``, or ``original``
    #: (gpt-5.5 and later).
    auto_detail: Literal["high", "original"] = "high"
    kind: Literal["openai-patches"] = "openai-patches"


@dataclass(frozen=True, slots=True)
class GeminiTiles:
    """Gemini 2.x: <=384 px both sides -> 258; else 768 px tiles at 258 each.

    Gemini 3 (``media_resolution`` set): a flat count per image by resolution, which
    the request sets per image (``ultra_high`` only that way).
    """

    per_tile: int = 258
    small_edge: int = 384
    tile: int = 768
    media_resolution: MediaResolution | None = None
    low_tokens: int = 280
    medium_tokens: int = 560
    high_tokens: int = 1120
    ultra_high_tokens: int = 2240
    kind: Literal["gemini"] = "gemini"


@dataclass(frozen=True, slots=True)
class FlatTokens:
    """A fixed count per image (local models that do not publish a formula)."""

    tokens: int = 576
    kind: Literal["flat"] = "flat"


TokenFormula: TypeAlias = AnthropicPatches | OpenAITiles | OpenAIPatches | GeminiTiles | FlatTokens


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """One model's capabilities, limits and prices.

    ``name`` is the catalog id without the provider prefix. Limits are per image
    unless named otherwise; ``max_images`` is per request.

    ``max_edge``/``max_pixels`` are what visus fits an image to (the most the model
    sees). ``accept_edge``/``accept_pixels`` (default: the same) are the most the
    provider takes as it is and bills no more for, fitting it itself: an image up to
    them is sent unchanged when its tokens are no more than the fitted image's.
    """

    name: str
    provider: Provider
    vision: bool = False
    pdf: bool = False
    video: bool = False
    images_in_tool_results: bool = False
    #: A reasoning model (OpenAI gpt-5, o-series): on the Responses wire its reasoning
    #: items are requested encrypted (``store: false``) and sent back between steps.
    reasoning: bool = False
    max_edge: int = 2048
    max_pixels: int = 2048 * 2048
    accept_edge: int | None = None
    accept_pixels: int | None = None
    max_image_bytes: int = 5 * 1024 * 1024
    max_images: int = 20
    media_types: frozenset[str] = field(default=DEFAULT_MEDIA_TYPES)
    tokens: TokenFormula = field(default_factory=FlatTokens)
    context_tokens: int = 128_000
    input_price_per_mtok: float = 0.0
    output_price_per_mtok: float = 0.0
    #: Prompt-cache prices where ``genai-prices`` lacks the model (None: cached input is
    #: priced as plain input, the safe side).
    cache_read_price_per_mtok: float | None = None
    cache_write_price_per_mtok: float | None = None
    #: Takes explicit prompt-cache breakpoints (Anthropic ``cache_control``, Bedrock
    #: ``cachePoint``); OpenAI and Gemini cache prefixes on their own.
    cache_points: bool = False
    #: The shortest prefix the provider caches (tokens).
    cache_min_tokens: int = 1024
    #: How the model thinks (Anthropic's "Thinking" page, per model): ``none``; ``manual``
    #: (extended thinking: ``enabled`` with ``budget_tokens``); ``adaptive`` (adaptive,
    #: which the request may turn off); ``always`` (adaptive and always on: a request
    #: with ``thinking: disabled`` or a budget is a 400).
    thinking: ThinkingMode = "none"
    #: The provider binds the model's reasoning to everything before it (Anthropic
    #: "Preserved thinking", OpenAI "preserved reasoning"): an edited history costs that
    #: reasoning (dropped) or a 400 (Anthropic's default on new accounts).
    preserved_thinking: bool = False
    #: Takes forced tool use (``tool_choice`` ``any`` or a named tool); False: a 400.
    forced_tool_choice: bool = True
    #: The effort levels the model takes (Anthropic ``output_config.effort``, OpenAI
    #: ``reasoning.effort``), lowest first; () when it takes none.
    efforts: tuple[str, ...] = ()
    #: Returns its short notes between tool calls as thinking text when asked
    #: (Anthropic ``thinking.display: "updates"``).
    progress_updates: bool = False
    #: Models (by id) whose reasoning blocks this one reads besides its own (Anthropic
    #: "Switching models mid-conversation"); others' blocks are dropped, not an error.
    reads_reasoning_of: tuple[str, ...] = ()
    #: Still served, but a newer model of its family replaces it (``visus models`` says).
    legacy: bool = False
    #: For an id the catalog does not list: the listed model whose profile it took
    #: (:mod:`visus.models.families`); None for a listed or configured model.
    assumed_from: str | None = None

    @property
    def ref(self) -> str:
        """What ``--model`` takes for this model: ``provider:name``, or the bare name of
        the offline reference models (``reference:reference`` names a wire instead).

        Example:
            >>> ModelSpec(name="gpt-4.1", provider="openai").ref
            'openai:gpt-4.1'
            >>> ModelSpec(name="reference-pdf", provider="reference").ref
            'reference-pdf'
        """
        return self.name if self.provider == "reference" else f"{self.provider}:{self.name}"

    def profile(self) -> Profile:
        """The fitting profile images for this model must meet."""
        return Profile(
            max_edge=self.max_edge,
            max_pixels=self.max_pixels,
            max_bytes=self.max_image_bytes,
            media_types=self.media_types,
        )

    def accepted(self) -> Profile:
        """The bounds an image may keep as it is (see the class docstring).

        Example:
            >>> spec = ModelSpec(name="m", provider="openai", max_pixels=1000, accept_pixels=4000)
            >>> spec.profile().max_pixels, spec.accepted().max_pixels
            (1000, 4000)
        """
        return Profile(
            max_edge=max(self.max_edge, self.accept_edge or 0),
            max_pixels=max(self.max_pixels, self.accept_pixels or 0),
            max_bytes=self.max_image_bytes,
            media_types=self.media_types,
        )
