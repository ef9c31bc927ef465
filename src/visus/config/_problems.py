"""A configuration error said where it is: the file's line (or the variable) and the
key, and for an unknown key the known one it was likely meant to be.

Example:
    >>> list(key_lines("[server]\\nport = 1\\n"))
    [(('server',), 1), (('server', 'port'), 2)]
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, get_args, get_origin

from pydantic import BaseModel, ValidationError

__all__ = ["describe", "key_lines", "key_on_line"]


_BARE_OR_QUOTED = r'(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|\'[^\']*\')'
_DOTTED = rf"{_BARE_OR_QUOTED}(?:\s*\.\s*{_BARE_OR_QUOTED})*"
_ARRAY_HEADER = re.compile(rf"^\s*\[\[\s*({_DOTTED})\s*\]\]")
_TABLE_HEADER = re.compile(rf"^\s*\[\s*({_DOTTED})\s*\]")
_ASSIGNMENT = re.compile(rf"^\s*({_DOTTED})\s*=")


def _split_key(dotted: str) -> tuple[str, ...]:
    parts = re.findall(_BARE_OR_QUOTED, dotted)
    return tuple(p[1:-1] if p[:1] in "\"'" else p for p in parts)


def key_lines(text: str) -> Iterator[tuple[tuple[str | int, ...], int]]:
    """Yield (key path, line number) for every table header and assignment."""
    table: tuple[str | int, ...] = ()
    counts: dict[tuple[str, ...], int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if m := _ARRAY_HEADER.match(line):
            name = _split_key(m.group(1))
            counts[name] = counts.get(name, -1) + 1
            table = (*name, counts[name])
            yield table, number
        elif m := _TABLE_HEADER.match(line):
            table = _split_key(m.group(1))
            yield table, number
        elif m := _ASSIGNMENT.match(line):
            yield (*table, *_split_key(m.group(1))), number


def key_on_line(text: str, line: int) -> str | None:
    found = [key for key, number in key_lines(text) if number == line]
    return ".".join(map(str, found[-1])) if found else None


def _line_of(text: str, loc: tuple[str | int, ...]) -> tuple[str, int] | None:
    lines = dict(key_lines(text))
    for end in range(len(loc), 0, -1):
        if loc[:end] in lines:
            return ".".join(map(str, loc[:end])), lines[loc[:end]]
    return None


def _env_name(loc: tuple[str | int, ...], env: Mapping[str, str]) -> str | None:
    for end in range(len(loc), 0, -1):
        wanted = ("VISUS_" + "__".join(map(str, loc[:end]))).upper()
        for name in env:
            if name.upper() == wanted and env[name] != "":
                return name
    return None


def describe(
    error: ValidationError,
    where: Path,
    text: str,
    env: Mapping[str, str],
    model: type[BaseModel] | None = None,
) -> str:
    """Every problem of ``error`` on a line of its own, each where it is (the variable,
    the file's line) and what is wrong; an unknown key of ``model``'s tables names the
    known one it is closest to, as the command line's typos do."""
    problems: list[str] = []
    for item in error.errors():
        loc = tuple(p for p in item["loc"] if isinstance(p, str | int))
        key = ".".join(map(str, loc)) or "(top level)"
        what = _what(item, _known_keys(model, loc[:-1]) if model is not None else [])
        # A misspelt key has no bad value: "retention.live_turn: unknown key; did you...".
        about = key if item.get("type") == "extra_forbidden" else f"invalid value for {key}"
        if env_var := _env_name(loc, env):
            problems.append(f"{env_var}: {about}: {what}")
        elif text and (found := _line_of(text, loc)):
            problems.append(f"{where} line {found[1]}: {about}: {what}")
        else:
            problems.append(f"{about}: {what}")
    return "invalid configuration:\n  " + "\n  ".join(problems)


def _what(item: Mapping[str, Any], known: list[str]) -> str:
    message = str(item.get("msg", "invalid"))
    if item.get("type") == "extra_forbidden":
        loc = item.get("loc") or ("",)
        close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
        return f"unknown key; did you mean {close[0]}?" if close else "unknown key"
    value = item.get("input")
    if isinstance(value, str | int | float | bool):
        return f"{message} (got {value!r})"
    return message


def _known_keys(model: type[BaseModel], table: tuple[str | int, ...]) -> list[str]:
    """The keys the table at ``table`` takes (none known: a free-form table).

    Example:
        >>> from visus.config import VisusConfig
        >>> _known_keys(VisusConfig, ("retention",))[:2]
        ['live_turns', 'chunk']
        >>> _known_keys(VisusConfig, ("providers", "openai")), _known_keys(VisusConfig, ("x",))
        (['api_key', 'base_url'], [])
    """
    current: type[BaseModel] | None = model
    skip = False  # the next part is a dict's own key or a list's index
    for part in table:
        if skip or isinstance(part, int):
            skip = False
            continue
        field = current.model_fields.get(part) if current is not None else None
        if field is None:
            return []
        current = _model_in(field.annotation)
        skip = get_origin(field.annotation) is dict or any(
            get_origin(a) is dict for a in get_args(field.annotation)
        )
    return list(current.model_fields) if current is not None else []


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model ``annotation`` is or holds (``tuple[Entry, ...]``, ``dict[str,
    Entry]``, ``Entry | None``), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None
