"""The model catalog and image-token formulas.

Example:
    >>> from visus.models import get_model, image_tokens
    >>> spec = get_model("anthropic:claude-sonnet-4-6")
    >>> spec.vision, image_tokens(spec, 1000, 1000)
    (True, 1296)
"""

from __future__ import annotations

from visus.models.catalog import BEDROCK_IDS, CATALOG, REFERENCE
from visus.models.registry import (
    PROVIDERS,
    get_model,
    is_known_model,
    parse_model_ref,
    register_model,
    similar_models,
    unregister_model,
)
from visus.models.spec import (
    AnthropicPatches,
    FlatTokens,
    GeminiTiles,
    MediaResolution,
    ModelSpec,
    OpenAIPatches,
    OpenAITiles,
    Provider,
    TokenFormula,
)
from visus.models.tokens import DETAILS, image_tokens, pick_detail

__all__ = [
    "BEDROCK_IDS",
    "CATALOG",
    "DETAILS",
    "PROVIDERS",
    "REFERENCE",
    "AnthropicPatches",
    "FlatTokens",
    "GeminiTiles",
    "MediaResolution",
    "ModelSpec",
    "OpenAIPatches",
    "OpenAITiles",
    "Provider",
    "TokenFormula",
    "get_model",
    "image_tokens",
    "is_known_model",
    "parse_model_ref",
    "pick_detail",
    "register_model",
    "similar_models",
    "unregister_model",
]
