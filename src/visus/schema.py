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
matches those patterns in code this module cannot reach. So is a schema that refers to
itself without going into the value (``{"$ref": "#"}``, a ``$defs`` entry whose ``allOf``
names itself...): jsonschema would follow it until Python's recursion limit, and a
server answered 500 with ~150 KB of traceback per call. A value nested deeper than the
check can follow ends the same way, as :class:`~visus.errors.InvalidInputError`.

Example:
    >>> checker = bounded_validator({"type": "string", "pattern": "^A[0-9]+$"})
    >>> checker.is_valid("A42"), checker.is_valid("B7")
    (True, False)
    >>> try:
    ...     bounded_validator({"pattern": "^(a|a)+$"}).is_valid("a" * 40 + "!")
    ... except InvalidInputError as e:
    ...     print(str(e)[:46])
    pattern '^(a|a)+$' took longer than the schema
    >>> try:
    ...     bounded_validator({"$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}]}},
    ...                        "$ref": "#/$defs/a"})
    ... except InvalidInputError as e:
    ...     print(str(e)[:55])
    the schema refers to itself without end: # -> #/$defs/a
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

__all__ = ["BoundedValidator", "bounded_validator"]


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


# Keywords whose subschemas apply to the same value (a $ref cycle through these alone
# never ends), as opposed to those that go into a part of it (properties, items...).
_IN_PLACE = ("allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas")


def _pointer(root: object, ref: str) -> object:
    """The subschema a local ``$ref`` (``#`` or ``#/a/b``) names, or None."""
    node = root
    for raw in ref[2:].split("/") if ref != "#" else ():
        key = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping):
            node = node.get(key)
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            return None
    return node


def _in_place(node: Mapping[str, Any]) -> Iterator[object]:
    """The subschemas of ``node`` that apply to the same value, its $ref's aside."""
    for key in _IN_PLACE:
        value = node.get(key)
        if isinstance(value, list):
            yield from value
        elif isinstance(value, Mapping) and key == "dependentSchemas":
            yield from value.values()
        elif value is not None:
            yield value


def _check_cycles(root: Mapping[str, Any]) -> None:
    """Refuse a local ``$ref`` that leads back to itself through keywords that all apply
    to the same value (checking it would never end)."""
    done: set[int] = set()

    def visit(node: object, trail: list[str], on_path: set[int]) -> None:
        if not isinstance(node, Mapping) or id(node) in done:
            return
        if id(node) in on_path:
            raise InvalidInputError(
                "the schema refers to itself without end: "
                + " -> ".join(trail[-6:])
                + " (each $ref must go into a property or an item first)"
            )
        on_path.add(id(node))
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#"):
            visit(_pointer(root, ref), [*trail, ref], on_path)
        for sub in _in_place(node):
            visit(sub, trail, on_path)
        on_path.discard(id(node))
        done.add(id(node))

    for sub in _subschemas(root):
        visit(sub, ["#"] if sub is root else ["(a subschema)"], set())


def _subschemas(schema: object) -> Iterator[Mapping[str, Any]]:
    """Every object in ``schema`` (each may be a schema a $ref or keyword reaches)."""
    if isinstance(schema, Mapping):
        yield schema
        for value in schema.values():
            yield from _subschemas(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from _subschemas(item)


class BoundedValidator:
    """A validator whose checks end: patterns under one deadline, and a value nested
    deeper than Python's recursion allows refused in words (never a RecursionError)."""

    def __init__(self, checker: Validator) -> None:
        self._checker = checker

    def is_valid(self, instance: Any) -> bool:
        return not any(True for _ in self.iter_errors(instance))

    def iter_errors(self, instance: Any) -> Iterator[ValidationError]:
        try:
            # Listed here: the recursion happens while errors are made, not later.
            errors = list(self._checker.iter_errors(instance))
        except RecursionError:
            raise InvalidInputError(
                "the value nests deeper than the schema check can follow"
            ) from None
        return iter(errors)


def bounded_validator(
    schema: Mapping[str, Any], *, seconds: float = limits.SCHEMA_MATCH_SECONDS
) -> BoundedValidator:
    """A validator of ``schema`` (its own draft) whose pattern matches end within
    ``seconds`` in all, counted from now; make one per value checked. A schema whose
    ``$ref`` loops back to itself is refused here (:class:`InvalidInputError`)."""
    _check_cycles(schema)
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
    return BoundedValidator(checked(schema))
