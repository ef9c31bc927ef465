"""The model catalog, read from ``catalog.toml`` (data, each figure with its source).

One :class:`ModelSpec` per model visus knows, keyed by its id as the provider spells it.
The figures live in ``catalog.toml`` next to this module, not in code: refresh them there.
:func:`spec_from_fields` turns a table of fields into a spec; a ``visus.toml``
``[[models]]`` entry goes through it too, on top of the catalog entry of the same name.
Prices are USD per million tokens and are estimates where the file says ``~``: the
agent's cost figures are only as good as these.

Example:
    >>> CATALOG["claude-sonnet-4-6"].max_edge
    1568
    >>> BEDROCK_IDS["anthropic.claude-sonnet-4-5-20250929-v1:0"]
    'claude-sonnet-4-5'
    >>> spec_from_fields({"max_images": 20}, base=CATALOG["claude-opus-4-7"]).max_edge
    2576
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from importlib import resources
from types import MappingProxyType
from typing import Any

from visus.errors import InvalidInputError
from visus.limits import MB
from visus.models.spec import (
    AnthropicPatches,
    FlatTokens,
    GeminiTiles,
    ModelSpec,
    OpenAIPatches,
    OpenAITiles,
    TokenFormula,
)

__all__ = [
    "BEDROCK_IDS",
    "CATALOG",
    "REFERENCE",
    "REFERENCE_PDF",
    "formula_from_fields",
    "spec_from_fields",
]

_FORMULAS: dict[str, type[TokenFormula]] = {
    "anthropic": AnthropicPatches,
    "openai-tiles": OpenAITiles,
    "openai-patches": OpenAIPatches,
    "gemini": GeminiTiles,
    "flat": FlatTokens,
}
_SPEC_FIELDS = frozenset(f.name for f in dataclasses.fields(ModelSpec))
#: Fields TOML gives as arrays and the spec keeps as tuples.
_TUPLE_FIELDS = frozenset({"efforts", "reads_reasoning_of"})


def formula_from_fields(fields: Mapping[str, Any]) -> TokenFormula:
    """A token formula from its table (``kind`` plus the formula's own fields).

    Example:
        >>> formula_from_fields({"kind": "flat", "tokens": 230})
        FlatTokens(tokens=230, kind='flat')
    """
    kind = fields.get("kind")
    cls = _FORMULAS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise InvalidInputError(f"tokens.kind must be one of {', '.join(_FORMULAS)}, got {kind!r}")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise InvalidInputError(f"tokens of kind {kind!r} has no field {', '.join(unknown)}")
    try:
        return cls(**dict(fields))
    except TypeError as e:
        raise InvalidInputError(f"tokens of kind {kind!r}: {e}") from e


def spec_from_fields(fields: Mapping[str, Any], *, base: ModelSpec | None = None) -> ModelSpec:
    """A :class:`ModelSpec` from a table of its fields, over ``base`` when given.

    ``tokens`` is a table (see :func:`formula_from_fields`), ``media_types`` a list; a
    field not named keeps ``base``'s value (or the dataclass default). Unknown fields
    are an error, so a typo in the catalog or in ``visus.toml`` never passes silently.
    """
    unknown = sorted(set(fields) - _SPEC_FIELDS)
    if unknown:
        raise InvalidInputError(f"a model has no field {', '.join(unknown)}")
    values = dict(fields)
    if "tokens" in values and not isinstance(values["tokens"], tuple(_FORMULAS.values())):
        values["tokens"] = formula_from_fields(values["tokens"])
    if "media_types" in values:
        values["media_types"] = frozenset(values["media_types"])
    for name in _TUPLE_FIELDS & set(values):
        values[name] = tuple(values[name])
    try:
        if base is not None:
            return dataclasses.replace(base, **values)
        return ModelSpec(**values)
    except TypeError as e:
        raise InvalidInputError(f"model {values.get('name', '?')!r}: {e}") from e


def _family(families: Mapping[str, Any], name: str, seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """A family's fields with those of the family it names merged under them."""
    if name in seen or name not in families:
        raise InvalidInputError(f"catalog.toml: unknown or circular family {name!r}")
    table = dict(families[name])
    parent = table.pop("family", None)
    if parent is None:
        return table
    merged = _family(families, parent, (*seen, name))
    merged.update(table)
    return merged


def _load() -> tuple[tuple[ModelSpec, ...], dict[str, str]]:
    raw = resources.files("visus.models").joinpath("catalog.toml").read_text(encoding="utf-8")
    data = tomllib.loads(raw)
    families = data.get("families", {})
    specs = []
    for name, table in data.get("models", {}).items():
        entry = dict(table)
        fields = _family(families, entry.pop("family")) if "family" in entry else {}
        fields.update(entry)
        specs.append(spec_from_fields({**fields, "name": name}))
    return tuple(specs), dict(data.get("bedrock_ids", {}))


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
    # Takes breakpoints on the wires that have them, so tests see visus's caching offline.
    cache_points=True,
)

#: The same reference model taking PDFs natively (``reference-pdf``): documents reach
#: it as document parts, which it perceives by rendering and reading each page. For
#: testing visus's native-PDF path offline; not a claim about any real model.
REFERENCE_PDF = dataclasses.replace(REFERENCE, name="reference-pdf", pdf=True)

_SPECS, _BEDROCK_IDS = _load()

#: Every built-in model by id. Read-only: add models with ``register_model``.
CATALOG: Mapping[str, ModelSpec] = MappingProxyType(
    {s.name: s for s in (*_SPECS, REFERENCE, REFERENCE_PDF)}
)

#: Bedrock model ids (and their cross-region ``us.``/``eu.``/``apac.``/``global.``
#: forms, handled by ``get_model``) for the Claude and Nova models above. Other Bedrock Claude
#: ids are matched by pattern (``anthropic.claude-<family>-<version>-...``).
BEDROCK_IDS: Mapping[str, str] = MappingProxyType(_BEDROCK_IDS)
