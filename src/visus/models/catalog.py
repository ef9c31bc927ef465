"""The model catalog: data, not code paths.

One :class:`ModelSpec` per model visus knows, keyed by its id as the provider
spells it. Facts come from docs/WIRES.md; prices are USD per million tokens from
the providers' public price pages as of late 2025/2026 and are estimates (marked
``~`` where less certain): the agent's cost figures are only as good as these.

Example:
    >>> CATALOG["claude-sonnet-4-6"].max_edge
    1568
    >>> BEDROCK_IDS["anthropic.claude-sonnet-4-5-20250929-v1:0"]
    'claude-sonnet-4-5'
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType

from visus.limits import MB
from visus.models.spec import (
    AnthropicPatches,
    FlatTokens,
    GeminiTiles,
    ModelSpec,
    OpenAIPatches,
    OpenAITiles,
)

__all__ = ["BEDROCK_IDS", "CATALOG", "REFERENCE", "REFERENCE_PDF"]

# --- Anthropic ---------------------------------------------------------------------
# Images above the native size are shrunk by the API anyway, so we fit to the native
# edge (1568 px; 2576 px for the newest Opus) and to about the native token budget in
# pixels (the vision guide's ~1.15 MP for 1568 tokens; 4784 tokens * 28 * 28 px,
# rounded down, for the newest Opus). Bytes: 5 MB of base64 is the cap Bedrock and
# Vertex enforce, i.e. 3.75 MB of raw image.
_ANTHROPIC_IMAGE_BYTES = 5 * MB * 3 // 4
_CLAUDE_FORMATS = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


def _claude(
    name: str, price_in: float, price_out: float, *, newest_opus: bool = False
) -> ModelSpec:
    edge, tokens, pixels = (2576, 4784, 3_700_000) if newest_opus else (1568, 1568, 1_150_000)
    return ModelSpec(
        name=name,
        provider="anthropic",
        vision=True,
        pdf=True,
        images_in_tool_results=True,
        max_edge=edge,
        max_pixels=pixels,
        max_image_bytes=_ANTHROPIC_IMAGE_BYTES,
        max_images=100,  # 100 per request on 200k-context models (600 on others)
        media_types=_CLAUDE_FORMATS,
        tokens=AnthropicPatches(native_edge=edge, native_tokens=tokens),
        context_tokens=200_000,
        input_price_per_mtok=price_in,
        output_price_per_mtok=price_out,
    )


# --- OpenAI ------------------------------------------------------------------------
# Images are fitted inside 2048 x 2048 and the short side to 768 by the API, and patch
# models cap at 1536 32-px patches: 1536 * 32 * 32 px is the most pixels either kind
# uses. Formats: png, jpeg, webp, non-animated gif (media always sends a still frame).
# images_in_tool_results: the Responses wire takes input_image in a function call's
# output; the Chat Completions wire never does and hoists by wire, not by this flag.
_OPENAI_PIXELS = 1536 * 32 * 32
_OPENAI_FORMATS = frozenset({"image/png", "image/jpeg", "image/webp", "image/gif"})


def _openai(
    name: str,
    tokens: OpenAITiles | OpenAIPatches,
    context: int,
    price_in: float,
    price_out: float,
) -> ModelSpec:
    return ModelSpec(
        name=name,
        provider="openai",
        vision=True,
        pdf=True,
        images_in_tool_results=True,
        reasoning=name.startswith(("gpt-5", "o3", "o4")),
        max_edge=2048,
        max_pixels=_OPENAI_PIXELS,
        max_image_bytes=20 * MB,  # older guide: 20 MB per image, 50 MB per request
        max_images=500,
        media_types=_OPENAI_FORMATS,
        tokens=tokens,
        context_tokens=context,
        input_price_per_mtok=price_in,
        output_price_per_mtok=price_out,
    )


# --- Gemini ------------------------------------------------------------------------
# No published edge limit; Gemini 2.x tiles at 768 px, so 3072 px keeps detail at a
# bounded cost (16 tiles). 7 MB per inline image is the older Vertex per-file cap
# (the request allows 20 MB, raised to 100 MB in 2026). No gif.
_GEMINI_FORMATS = frozenset({"image/png", "image/jpeg", "image/webp"})


def _gemini(
    name: str, *, gemini3: bool, price_in: float, price_out: float, context: int = 1_048_576
) -> ModelSpec:
    return ModelSpec(
        name=name,
        provider="gemini",
        vision=True,
        pdf=True,
        video=True,
        images_in_tool_results=gemini3,  # Gemini 3: images inside the function response
        max_edge=3072,
        max_pixels=3072 * 3072,
        max_image_bytes=7 * MB,
        max_images=3000,
        media_types=_GEMINI_FORMATS,
        tokens=GeminiTiles(media_resolution="high" if gemini3 else None),
        context_tokens=context,
        input_price_per_mtok=price_in,
        output_price_per_mtok=price_out,
    )


# --- Ollama (local, free) ------------------------------------------------------------
# These models publish no per-image token formula for their prompts; the flat counts
# are the vision encoders' own token grids and are estimates.
_OLLAMA_FORMATS = frozenset({"image/png", "image/jpeg"})


# --- Amazon Nova (Bedrock Converse) ---------------------------------------------------
# Nova user guide, image understanding: PNG/JPEG/GIF/WebP, at most 8000 x 8000 px, the
# whole request at most 25 MB; Bedrock's Converse bounds (3.75 MB and 8000 px per image,
# 20 images) are applied by get_model for every bedrock id. Nova rescales each image to
# about 1-1.7 MP itself (its token table: 900 x 900 ~1300 tokens, 1.3K x 1.3K ~2600), so
# fitting to 2 MP loses nothing the model would see. Nova 2 Lite takes at most 5
# images embedded in a request and bills 230 tokens per image (Nova 2 user guide).
_NOVA_FORMATS = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


def _nova(
    name: str, context: int, price_in: float, price_out: float, *, nova2: bool = False
) -> ModelSpec:
    return ModelSpec(
        name=name,
        provider="bedrock",
        vision=True,
        max_edge=8000,
        max_pixels=2_000_000,
        max_image_bytes=3_750_000,
        max_images=5 if nova2 else 20,
        media_types=_NOVA_FORMATS,
        # ~ 32 px patches at ~1.6 tokens each matches the guide's table within ~15%
        tokens=FlatTokens(tokens=230) if nova2 else OpenAIPatches(budget=2000, multiplier=1.6),
        context_tokens=context,
        input_price_per_mtok=price_in,
        output_price_per_mtok=price_out,
    )


def _ollama(name: str, edge: int, tokens: int, context: int) -> ModelSpec:
    return ModelSpec(
        name=name,
        provider="ollama",
        vision=True,
        max_edge=edge,
        max_pixels=edge * edge,
        max_image_bytes=10 * MB,
        max_images=8,
        media_types=_OLLAMA_FORMATS,
        tokens=FlatTokens(tokens=tokens),
        context_tokens=context,
    )


#: The offline reference model (``visus.reference``): sees real image parts by OCR.
#: Generous limits so tests can push large images through; bytes stay within the
#: tether's per-image bound (10 MB). Free.
REFERENCE = ModelSpec(
    name="reference",
    provider="reference",
    vision=True,
    pdf=False,
    images_in_tool_results=True,
    # Like the newest large models: 2576 px a side. A bigger edge made PDF pages and
    # screenshots render at up to 8000 px for the default model (slow OCR, ~20k tokens
    # a page) without helping it read anything.
    max_edge=2576,
    max_pixels=2576 * 2576,
    max_image_bytes=10 * MB,
    max_images=100,
    tokens=AnthropicPatches(native_edge=2576, native_tokens=(2576 // 28 + 1) ** 2),
    context_tokens=128_000,
)

#: The same reference model taking PDFs natively (``reference-pdf``): documents reach
#: it as document parts, which it perceives by rendering and reading each page. For
#: testing visus's native-PDF path offline; not a claim about any real model.
REFERENCE_PDF = dataclasses.replace(REFERENCE, name="reference-pdf", pdf=True)

_SPECS: tuple[ModelSpec, ...] = (
    _claude("claude-haiku-4-5", 1.0, 5.0),
    _claude("claude-sonnet-4", 3.0, 15.0),
    _claude("claude-opus-4-1", 15.0, 75.0),
    _claude("claude-sonnet-4-5", 3.0, 15.0),
    _claude("claude-sonnet-4-6", 3.0, 15.0),  # ~ assumed same as 4.5
    _claude("claude-opus-4-5", 5.0, 25.0),
    _claude("claude-opus-4-6", 5.0, 25.0, newest_opus=True),  # ~ assumed same as 4.5
    _openai("gpt-4o", OpenAITiles(base=85, tile=170), 128_000, 2.5, 10.0),
    # gpt-4o-mini bills images at 33x the text rate through a large base and tile.
    _openai("gpt-4o-mini", OpenAITiles(base=2833, tile=5667), 128_000, 0.15, 0.6),
    _openai("gpt-4.1", OpenAITiles(base=85, tile=170), 1_047_576, 2.0, 8.0),
    _openai("gpt-4.1-mini", OpenAIPatches(multiplier=1.62), 1_047_576, 0.4, 1.6),
    _openai("gpt-4.1-nano", OpenAIPatches(multiplier=2.46), 1_047_576, 0.1, 0.4),
    _openai("gpt-5", OpenAITiles(base=70, tile=140), 400_000, 1.25, 10.0),
    _openai("gpt-5-mini", OpenAIPatches(multiplier=1.62), 400_000, 0.25, 2.0),  # ~ multiplier
    _openai("gpt-5-nano", OpenAIPatches(multiplier=2.46), 400_000, 0.05, 0.4),  # ~ multiplier
    _openai("o3", OpenAITiles(base=75, tile=150), 200_000, 2.0, 8.0),
    _openai("o4-mini", OpenAIPatches(multiplier=1.72), 200_000, 1.1, 4.4),
    _gemini("gemini-2.5-pro", gemini3=False, price_in=1.25, price_out=10.0),  # <=200k prompt
    _gemini("gemini-2.5-flash", gemini3=False, price_in=0.30, price_out=2.50),
    _gemini("gemini-2.5-flash-lite", gemini3=False, price_in=0.10, price_out=0.40),
    _gemini("gemini-2.0-flash", gemini3=False, price_in=0.10, price_out=0.40),
    _gemini("gemini-3-pro", gemini3=True, price_in=2.0, price_out=12.0),  # ~ preview pricing
    _gemini("gemini-3-flash", gemini3=True, price_in=0.50, price_out=3.0),  # ~
    _nova("nova-lite", 300_000, 0.06, 0.24),
    _nova("nova-pro", 300_000, 0.80, 3.20),
    _nova("nova-premier", 1_000_000, 2.50, 12.50),
    _nova("nova-2-lite", 1_000_000, 0.30, 2.50, nova2=True),  # ~ pricing
    # llama3.2-vision: 560 px tiles, up to 2 x 2; 1601 tokens per tile (40 x 40 + 1).
    _ollama("llama3.2-vision", 1120, 1601, 128_000),
    # llava 1.6: 336 px CLIP grid of 24 x 24 = 576 tokens per view.
    _ollama("llava", 672, 576, 32_768),
    # qwen2.5vl: 28 px merged patches; ~1280 tokens at 1 MP.
    _ollama("qwen2.5vl", 1024, 1280, 128_000),
    REFERENCE,
    REFERENCE_PDF,
)

#: Every built-in model by id. Read-only: add models with ``register_model``.
CATALOG: Mapping[str, ModelSpec] = MappingProxyType({s.name: s for s in _SPECS})

#: Bedrock model ids (and their cross-region ``us.``/``eu.``/``apac.``/``global.``
#: forms, handled by ``get_model``) for the Claude and Nova models above. Other Bedrock Claude
#: ids are matched by pattern (``anthropic.claude-<family>-<version>-...``).
BEDROCK_IDS: Mapping[str, str] = MappingProxyType(
    {
        "anthropic.claude-haiku-4-5-20251001-v1:0": "claude-haiku-4-5",
        "anthropic.claude-sonnet-4-5-20250929-v1:0": "claude-sonnet-4-5",
        "anthropic.claude-opus-4-5-20251101-v1:0": "claude-opus-4-5",
        "amazon.nova-lite-v1:0": "nova-lite",
        "amazon.nova-pro-v1:0": "nova-pro",
        "amazon.nova-premier-v1:0": "nova-premier",
        "amazon.nova-2-lite-v1:0": "nova-2-lite",
    }
)
