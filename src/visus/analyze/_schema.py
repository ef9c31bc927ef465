"""Structured answers: the ``format`` argument, finding JSON in a reply, validating it.

``format`` is a full JSON Schema, given bare or wrapped as
``{"type": "json_schema", "schema": {...}}`` (an optional ``name`` and ``strict``
are accepted and ignored). The schema itself is checked against its metaschema:
an invalid schema is ``INVALID_INPUT`` before any model is asked.

Example:
    >>> schema = normalise_format({"type": "json_schema", "schema": {"type": "object"}})
    >>> find_json('Sure:\\n```json\\n{"a": 1}\\n```', schema)
    ({'a': 1}, None)
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import jsonschema
from jsonschema.exceptions import SchemaError

from visus.analyze._values import fail
from visus.errors import InvalidInputError
from visus.schema import bounded_validator

__all__ = ["find_json", "instructions", "normalise_format", "retry_prompt"]

_FENCED = re.compile(r"```(?:json|JSON)?\s*\n(.*?)\n?```", re.DOTALL)
_WRAPPER_KEYS = frozenset({"type", "schema", "name", "strict", "description"})
_MAX_ERROR_CHARS = 600


def normalise_format(fmt: object) -> dict[str, Any]:
    """The JSON Schema ``fmt`` names, checked against its metaschema."""
    if not isinstance(fmt, Mapping):
        raise fail("INVALID_INPUT", "format must be a JSON Schema object")
    schema: object = fmt
    if fmt.get("type") == "json_schema":
        extra = set(fmt) - _WRAPPER_KEYS
        if "schema" not in fmt or extra:
            raise fail(
                "INVALID_INPUT",
                "format {type: 'json_schema'} takes a 'schema' object"
                + (f" (unknown keys: {sorted(extra)})" if extra else ""),
            )
        schema = fmt["schema"]
    if not isinstance(schema, Mapping):
        raise fail("INVALID_INPUT", "format.schema must be a JSON Schema object")
    plain = json.loads(json.dumps(schema))  # plain dicts, and proof it is JSON
    try:
        jsonschema.validators.validator_for(plain).check_schema(plain)
    except SchemaError as e:
        raise fail("INVALID_INPUT", f"format is not a valid JSON Schema: {e.message}") from e
    try:
        bounded_validator(plain)  # what it cannot check in bounded time, refused now
    except InvalidInputError as e:
        raise fail("INVALID_INPUT", f"format: {e}") from e
    assert isinstance(plain, dict)
    return plain


def instructions(schema: Mapping[str, Any]) -> str:
    """What the model is told, after the user's prompt, when a schema is asked for."""
    return (
        "Answer with one JSON value that validates against this JSON Schema, in a "
        "```json fenced block or as the whole reply, and nothing that contradicts it:\n"
        + json.dumps(schema, ensure_ascii=False)
    )


def retry_prompt(problem: str) -> str:
    """The follow-up sent once when the first answer did not validate."""
    return (
        f"Your answer did not satisfy the JSON Schema: {problem}\n"
        "Reply again with only the corrected JSON value."
    )


def _candidates(text: str) -> list[str]:
    stripped = text.strip()
    out = [stripped]
    out.extend(m.strip() for m in _FENCED.findall(text))
    for opener, closer in (("{", "}"), ("[", "]")):
        start, end = text.find(opener), text.rfind(closer)
        if 0 <= start < end:
            out.append(text[start : end + 1])
    return list(dict.fromkeys(c for c in out if c))


def find_json(text: str, schema: Mapping[str, Any]) -> tuple[Any, str | None]:
    """The first JSON value in ``text`` that validates: ``(value, None)``.

    Otherwise ``(None, problem)``, the problem naming the best candidate's first
    validation error (or that no JSON was found), for the retry prompt. A pattern of
    the schema that runs past ``limits.SCHEMA_MATCH_SECONDS`` is ``INVALID_INPUT``
    (:mod:`visus.schema`).
    """
    problem: str | None = None
    for candidate in _candidates(text):
        try:
            value = json.loads(candidate)
        except (ValueError, RecursionError):
            continue
        try:
            # The client's patterns against text the client can steer: bounded.
            errors = list(bounded_validator(schema).iter_errors(value))
        except InvalidInputError as e:
            raise fail("INVALID_INPUT", f"format: {e}") from e
        error = jsonschema.exceptions.best_match(errors)
        if error is None:
            return value, None
        if problem is None:
            where = "/".join(str(p) for p in error.absolute_path) or "(root)"
            problem = f"at {where}: {error.message}"[:_MAX_ERROR_CHARS]
    return None, problem or "no JSON value was found in the answer"
