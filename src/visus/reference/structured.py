"""Structured answers: a JSON Schema in the message gets a valid instance of what was seen.

``visus analyze --schema`` (and any prompt quoting a JSON Schema after the words "JSON
Schema") asks for one JSON value. The reference model answers with its own observation
(``{"images": [...], "descriptors": [...]}``) when that validates, else with a value it
builds from the schema and what it saw: strings from the words read (a property named
like a colour gets a colour), arrays of objects one item per word (``x``/``y`` its
position, ``color`` its ink), numbers a count or a position, booleans whether anything
was read, enums the member that was seen (else the first). The value is checked with
``jsonschema``; a schema it cannot satisfy (a ``pattern``, a ``format``) gets a sentence
saying so instead of invalid JSON.

Example:
    >>> from visus.reference.vision import SeenImage, SeenWord
    >>> seen = [SeenImage(10, 10, (SeenWord("ORCHID", 0.5, 0.5, (0, 0, 1, 1), "red", "#f00"),))]
    >>> schema = {"type": "object", "required": ["word"],
    ...           "properties": {"word": {"type": "string"}}}
    >>> fill(schema, seen)
    {'word': 'ORCHID'}
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jsonschema
from jsonschema.exceptions import SchemaError

from visus.errors import InvalidInputError
from visus.reference.vision import SeenImage, SeenWord
from visus.schema import bounded_validator

__all__ = ["answer", "fill", "requested_schema"]

_ASKS = re.compile(r"JSON[ -]Schema", re.IGNORECASE)
_MAX_DEPTH = 8
#: Most values and characters one answer builds: a schema asking for more
#: (``minLength: 1e9``, ``minItems`` nested) is told it cannot be filled.
_MAX_FILL = 10_000
_COLOUR_NAME = re.compile(r"colou?r", re.IGNORECASE)
_TEXT_NAME = re.compile(r"text|word|label|title|name|caption|content", re.IGNORECASE)


def requested_schema(text: str) -> dict[str, Any] | None:
    """The JSON Schema ``text`` quotes after the words "JSON Schema", if it is one.

    Example:
        >>> requested_schema('Reply with a value of this JSON Schema: {"type": "array"}')
        {'type': 'array'}
        >>> requested_schema("no schema here") is None
        True
    """
    asked = _ASKS.search(text)
    if asked is None:
        return None
    start = text.find("{", asked.end())
    if start < 0:
        return None
    try:
        value, _ = json.JSONDecoder().raw_decode(text, start)
    except json.JSONDecodeError:
        return None
    if not isinstance(value, dict):
        return None
    try:
        jsonschema.validators.validator_for(value).check_schema(value)
    except SchemaError:
        return None
    return value


@dataclass(frozen=True, slots=True)
class _Seen:
    """What a part of the instance is filled from: some words, and colours."""

    words: tuple[SeenWord, ...]
    colours: tuple[str, ...]


def _of(images: Sequence[SeenImage]) -> _Seen:
    words = tuple(w for im in images for w in im.words)
    colours = tuple(
        dict.fromkeys([w.color for w in words] + [r.color for im in images for r in im.regions])
    )
    return _Seen(words, colours)


class _TooBig(Exception):
    """The schema asks for a value larger than :data:`_MAX_FILL`."""


class _Build:
    """One fill's root schema (what ``$ref`` names) and what it may still build: values
    and characters together at most :data:`_MAX_FILL`, however the schema nests."""

    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root = root
        self.left = _MAX_FILL

    def spend(self, amount: int = 1) -> None:
        self.left -= amount
        if self.left < 0:
            raise _TooBig


def _resolve(schema: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = schema.get("$ref")
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return schema
    node: Any = root
    for key in ref[2:].split("/"):
        node = node.get(key, {}) if isinstance(node, Mapping) else {}
    return node if isinstance(node, Mapping) else {}


def _enum(options: Sequence[Any], seen: _Seen) -> Any:
    said = {w.text.lower() for w in seen.words} | {c.lower() for c in seen.colours}
    return next((o for o in options if isinstance(o, str) and o.lower() in said), options[0])


def _string(schema: Mapping[str, Any], name: str, seen: _Seen, build: _Build) -> str:
    if _COLOUR_NAME.search(name) and seen.colours:
        text = seen.colours[0]
    else:
        text = " ".join(w.text for w in seen.words)
    low = schema.get("minLength", 0)
    high = schema.get("maxLength")
    if isinstance(low, int) and len(text) < low:
        build.spend(low - len(text))
        text = text.ljust(low, ".")
    if isinstance(high, int) and len(text) > high:
        text = text[:high]
    return text


def _number(schema: Mapping[str, Any], name: str, seen: _Seen, integer: bool) -> float | int:
    """A word's position for ``x``/``y``, else how many words were read; in bounds."""
    word = seen.words[0] if len(seen.words) == 1 else None
    axis = name.lower()
    if word is not None and axis in ("x", "y") and not integer:
        value = word.x if axis == "x" else word.y
    else:
        value = float(len(seen.words))
    low, high = schema.get("minimum"), schema.get("maximum")
    if isinstance(low, int | float):
        value = max(value, float(low))
    if isinstance(high, int | float):
        value = min(value, float(high))
    return int(value) if integer else value


def _array(
    schema: Mapping[str, Any], name: str, seen: _Seen, build: _Build, depth: int
) -> list[Any]:
    items = _resolve(schema.get("items") or {}, build.root)
    kind = _type(items)
    if kind in ("object", "array"):
        parts = [_Seen((w,), (w.color,)) for w in seen.words] or [seen]
        out = [_value(items, name, part, build, depth + 1) for part in parts]
    elif kind == "string" and "enum" not in items and "const" not in items:
        out = [_string(items, name, _Seen((w,), (w.color,)), build) for w in seen.words]
    else:
        out = [_value(items, name, seen, build, depth + 1)]
    low, high = schema.get("minItems", 0), schema.get("maxItems")
    while isinstance(low, int) and len(out) < low:
        out.append(_value(items, name, seen, build, depth + 1))
    if isinstance(high, int):
        out = out[:high]
    if schema.get("uniqueItems"):
        out = list({json.dumps(v, sort_keys=True): v for v in out}.values())
    return out


def _type(schema: Mapping[str, Any]) -> str | None:
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), kind[0] if kind else None)
    if kind is None and "properties" in schema:
        kind = "object"
    return kind if isinstance(kind, str) else None


def _value(schema: Mapping[str, Any], name: str, seen: _Seen, build: _Build, depth: int = 0) -> Any:
    build.spend()
    schema = _resolve(schema, build.root)
    if depth > _MAX_DEPTH:
        return None
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return _enum(schema["enum"], seen)
    for key in ("anyOf", "oneOf", "allOf"):
        branches = schema.get(key)
        if isinstance(branches, list) and branches:
            usable = [b for b in branches if isinstance(b, Mapping) and b.get("type") != "null"]
            return _value(usable[0] if usable else branches[0], name, seen, build, depth + 1)
    kind = _type(schema)
    if kind == "object":
        props = schema.get("properties") or {}
        return {key: _value(sub, key, seen, build, depth + 1) for key, sub in props.items()}
    if kind == "array":
        return _array(schema, name, seen, build, depth)
    if kind in ("integer", "number"):
        return _number(schema, name, seen, integer=kind == "integer")
    if kind == "boolean":
        return bool(seen.words)
    if kind == "null":
        return None
    return _string(schema, name, seen, build)


def fill(schema: Mapping[str, Any], images: Sequence[SeenImage]) -> Any:
    """A value for ``schema`` built from what was seen in ``images`` (not yet validated).

    Raises ``_TooBig`` when the schema asks for more than ``_MAX_FILL`` values and
    characters (``minItems: 1e9``, nested).
    """
    return _value(schema, "", _of(images), _Build(schema))


def answer(
    schema: Mapping[str, Any], images: Sequence[SeenImage], observed: Mapping[str, Any]
) -> str:
    """The reply to a schema request: one fenced JSON value that validates, or why not."""
    try:
        # The schema is the client's, the value built from it: a pattern is matched
        # under a deadline (visus serve runs this model in-process).
        for candidate in (dict(observed), fill(schema, images)):
            if bounded_validator(schema).is_valid(candidate):
                return "```json\n" + json.dumps(candidate, ensure_ascii=False) + "\n```"
        errors = bounded_validator(schema).iter_errors(fill(schema, images))
        error = jsonschema.exceptions.best_match(errors)
        why = error.message if error is not None else "it asks for more than I can see"
    except InvalidInputError as e:
        why = str(e)
    except _TooBig:
        why = f"it asks for a value of more than {_MAX_FILL} parts and characters"
    return (
        f"I cannot fill this JSON Schema from what I see ({why[:200]}). The reference model "
        "only reads words and colours; a real model (--model openai:gpt-4.1, ...) can."
    )
