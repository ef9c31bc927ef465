"""JSON Schema validation that a client's schema cannot stall.

A schema a client sends (``vision_analyze``'s ``format``, a schema quoted to the
reference model) carries regular expressions (``pattern``, ``patternProperties``,
``propertyNames``), and the value checked against it is text a model wrote, which the
same client can steer. ``jsonschema`` matches them with ``re``, which backtracks without
bound and holds the GIL all the while: ``"^(a|a)+$"`` against forty ``a`` and a ``!``
freezes every thread of the process for hours. Here each of those matches runs on
``regex`` (``re``'s syntax) with the GIL released, under one deadline for the whole
validation (``limits.SCHEMA_MATCH_SECONDS``); past it the validation stops with an
:class:`~visus.errors.InvalidInputError` naming the pattern.

``unevaluatedProperties`` next to ``patternProperties`` is refused up front: jsonschema
matches those patterns in code this module cannot reach.

Example:
    >>> checker = bounded_validator({"type": "string", "pattern": "^A[0-9]+$"})
    >>> checker.is_valid("A42"), checker.is_valid("B7")
    (True, False)
    >>> try:
    ...     bounded_validator({"pattern": "^(a|a)+$"}).is_valid("a" * 40 + "!")
    ... except InvalidInputError as e:
    ...     print(str(e)[:46])
    pattern '^(a|a)+$' took longer than the schema
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

import jsonschema
import regex
from jsonschema.exceptions import ValidationError
from jsonschema.protocols import Validator

from visus import limits
from visus.errors import InvalidInputError

__all__ = ["bounded_validator"]


class _Matcher:
    """The ``pattern``-like keywords of one validation, sharing one deadline."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds

    def search(self, pattern: str, text: str) -> bool:
        left = self.deadline - time.monotonic()
        try:
            if left <= 0:
                raise TimeoutError
            found = regex.search(pattern, text, regex.VERSION0, timeout=left, concurrent=True)
        except TimeoutError as e:
            raise InvalidInputError(
                f"pattern {pattern!r} took longer than the schema budget "
                f"({self.seconds:g} s) on a {len(text)}-character string; "
                "give the schema a simpler pattern"
            ) from e
        except regex.error as e:
            raise InvalidInputError(f"pattern {pattern!r} is not a regular expression: {e}") from e
        return found is not None

    # The keyword functions jsonschema calls; its Validator protocol lacks ``descend``,
    # which every validator class has, hence Any.
    def pattern(
        self, validator: Validator, pattern: str, instance: Any, schema: object
    ) -> Iterator[ValidationError]:
        if validator.is_type(instance, "string") and not self.search(pattern, str(instance)):
            yield ValidationError(f"{instance!r} does not match {pattern!r}")

    def pattern_properties(
        self, validator: Any, patterns: Mapping[str, Any], instance: Any, schema: object
    ) -> Iterator[ValidationError]:
        if not validator.is_type(instance, "object"):
            return
        for pattern, subschema in patterns.items():
            for key, value in instance.items():
                if self.search(pattern, key):
                    yield from validator.descend(value, subschema, path=key, schema_path=pattern)

    def additional_properties(
        self, validator: Any, extra: Any, instance: Any, schema: Mapping[str, Any]
    ) -> Iterator[ValidationError]:
        if not validator.is_type(instance, "object"):
            return
        known, patterns = schema.get("properties", {}), list(schema.get("patternProperties", {}))
        extras = sorted(
            (
                k
                for k in instance
                if k not in known and not any(self.search(p, k) for p in patterns)
            ),
            key=str,
        )
        if validator.is_type(extra, "object"):
            for key in extras:
                yield from validator.descend(instance[key], extra, path=key)
        elif not extra and extras:
            joined = ", ".join(repr(k) for k in extras)
            if patterns:
                yield ValidationError(
                    f"{joined} do not match any of the regexes: {', '.join(map(repr, patterns))}"
                )
            else:
                yield ValidationError(
                    f"Additional properties are not allowed ({joined} unexpected)"
                )


def _keys(schema: object) -> Iterator[str]:
    """Every key of every object in ``schema``."""
    if isinstance(schema, Mapping):
        for key, value in schema.items():
            yield str(key)
            yield from _keys(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from _keys(item)


def bounded_validator(
    schema: Mapping[str, Any], *, seconds: float = limits.SCHEMA_MATCH_SECONDS
) -> Validator:
    """A validator of ``schema`` (its own draft) whose pattern matches end within
    ``seconds`` in all, counted from now; make one per value checked."""
    keys = set(_keys(schema))
    if {"unevaluatedProperties", "patternProperties"} <= keys:
        raise InvalidInputError(
            "a schema with both unevaluatedProperties and patternProperties is not supported"
        )
    matcher = _Matcher(seconds)
    base = jsonschema.validators.validator_for(schema)
    checked: type[Validator] = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
        base,
        {
            "pattern": matcher.pattern,
            "patternProperties": matcher.pattern_properties,
            "additionalProperties": matcher.additional_properties,
        },
    )
    return checked(schema)
