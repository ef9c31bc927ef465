"""Shortening a lowered body for people: base64 payloads cut to a marker.

The full body is the request; this is only for reading it in a terminal.

Example:
    >>> abbreviate({"data": "A" * 300, "text": "hi"}, keep=8)
    {'data': 'AAAAAAAA…[300 chars of base64]', 'text': 'hi'}
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["abbreviate"]

_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")
_DATA_URL = re.compile(r"(data:[\w.+-]+/[\w.+-]+;base64,)(.*)", re.DOTALL)
#: Strings shorter than this are never cut (ids, short texts that happen to match).
_MIN_CHARS = 128


def _short(value: str, keep: int) -> str:
    if len(value) < _MIN_CHARS:
        return value
    m = _DATA_URL.fullmatch(value)
    if m and _BASE64.fullmatch(m.group(2)):
        payload = m.group(2)
        return f"{m.group(1)}{payload[:keep]}…[{len(payload)} chars of base64]"
    if _BASE64.fullmatch(value):
        return f"{value[:keep]}…[{len(value)} chars of base64]"
    return value


def abbreviate(body: object, *, keep: int = 24) -> object:
    """A copy of ``body`` with every long base64 string (or data URL) shortened."""
    if isinstance(body, Mapping):
        return {k: abbreviate(v, keep=keep) for k, v in body.items()}
    if isinstance(body, list):
        return [abbreviate(v, keep=keep) for v in body]
    if isinstance(body, str):
        return _short(body, keep)
    return body
