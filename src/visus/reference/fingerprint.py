"""A JSON value's fingerprint: equal values, equal fingerprints, whatever their layout.

The reference server compares what a request sends with what an earlier one sent (a
prompt-cache prefix, a reasoning block's prefix) as JSON values: key order and
formatting do not matter, the values do (Anthropic, "Preserved thinking": "JSON
formatting and key order don't matter; the values do"). Canonical JSON text says that,
but writing it escapes every character of every string, and a long screen loop sends
each live screenshot's base64 (about 100 kB) with every request: the same comparison
without the text costs a hash of the string's bytes. The encoding is injective (each
value tagged with its type, each string and container with its length), so two values
share a fingerprint only if they are equal as JSON (up to a SHA-256 collision), and a
key named in ``skip`` (a cache marker) is left out at every depth.

Example:
    >>> a = fingerprint({"b": [1, "x"], "a": True, "cache_control": {}}, skip={"cache_control"})
    >>> a == fingerprint({"a": True, "b": [1, "x"]}, skip={"cache_control"})
    True
    >>> fingerprint({"a": 1}) == fingerprint({"a": True}), fingerprint("1") == fingerprint(1)
    (False, False)
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping
from typing import Generic, TypeVar

__all__ = ["Memo", "fingerprint"]

K = TypeVar("K")
V = TypeVar("V")


def fingerprint(
    value: object,
    skip: Collection[str] = (),
    drop: Callable[[object], bool] | None = None,
) -> bytes:
    """The SHA-256 of ``value``'s tagged encoding (module docstring), its keys in
    ``skip`` and its list items for which ``drop`` is true left out."""
    out: list[bytes] = []
    _encode(value, frozenset(skip), drop, out)
    return hashlib.sha256(b"".join(out)).digest()


def _encode(
    value: object,
    skip: frozenset[str],
    drop: Callable[[object], bool] | None,
    out: list[bytes],
) -> None:
    if isinstance(value, str):
        data = value.encode("utf-8", "surrogatepass")
        out.append(b"s%d:" % len(data))
        out.append(data)
    elif isinstance(value, Mapping):
        pairs = sorted(((str(k), v) for k, v in value.items() if str(k) not in skip), key=_first)
        out.append(b"{%d:" % len(pairs))
        for key, item in pairs:
            _encode(key, skip, drop, out)
            _encode(item, skip, drop, out)
    elif isinstance(value, list | tuple):
        items = [v for v in value if drop is None or not drop(v)]
        out.append(b"[%d:" % len(items))
        for item in items:
            _encode(item, skip, drop, out)
    else:  # None, booleans and numbers as JSON writes them ("1" and "1.0" differ)
        out.append(b"v" + json.dumps(value).encode() + b";")


def _first(pair: tuple[str, object]) -> str:
    return pair[0]


class Memo(Generic[K, V]):
    """What was computed for a key, the newest ``size`` kept (thread-safe): what a long
    loop resends (an image's size, by its digest) is worked out once.

    Example:
        >>> memo: Memo[str, int] = Memo(2)
        >>> memo.get("a", lambda: 1), memo.get("a", lambda: 2)
        (1, 1)
    """

    def __init__(self, size: int) -> None:
        self._size = size
        self._values: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K, make: Callable[[], V]) -> V:
        """The value kept for ``key``, else ``make()`` (kept unless it raises)."""
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                return self._values[key]
        value = make()
        with self._lock:
            self._values[key] = value
            while len(self._values) > self._size:
                self._values.popitem(last=False)
        return value
