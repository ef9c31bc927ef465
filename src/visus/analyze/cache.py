"""An opt-in result cache for vision_analyze, keyed by what decides the answer.

The key is the sha256 of the input files' digests, the prompt, the model, the
schema and the page range: the same question about the same bytes to the same model
is answered once. Two stores: :class:`MemoryAnalyzeCache` (bounded LRU) and
:class:`FileAnalyzeCache` (JSON files under a folder, e.g. the data folder's
``analyze-cache``; written to a temp file and renamed, so a reader never sees half
an entry). A damaged entry is a miss, never an error.

Example:
    >>> cache = MemoryAnalyzeCache()
    >>> key = cache_key(["ab" * 32], "what is this?", "reference", None, None)
    >>> cache.get(key) is None
    True
    >>> cache.put(key, {"text": "a cat"}); cache.get(key)
    {'text': 'a cat'}
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from visus import limits
from visus.paths import private_dir

__all__ = ["AnalyzeCache", "FileAnalyzeCache", "MemoryAnalyzeCache", "cache_key"]

_KEY_VERSION = "visus-analyze-1"


class AnalyzeCache(Protocol):
    """Where analyze results are remembered: JSON-able mappings by hex key."""

    def get(self, key: str) -> dict[str, Any] | None: ...

    def put(self, key: str, value: Mapping[str, Any]) -> None: ...


def cache_key(
    digests: Sequence[str],
    prompt: str,
    model: str,
    schema: Mapping[str, Any] | None,
    pages: tuple[int, int] | None,
    *,
    extra: Mapping[str, Any] | None = None,
) -> str:
    """The hex sha256 of everything that decides an answer (order of files counts)."""
    material = {
        "v": _KEY_VERSION,
        "files": list(digests),
        "prompt": prompt,
        "model": model,
        "schema": schema,
        "pages": list(pages) if pages else None,
        "extra": dict(extra or {}),
    }
    blob = json.dumps(material, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class MemoryAnalyzeCache:
    """A bounded in-process LRU (``limits.ANALYZE_CACHE_MAX_ENTRIES``)."""

    def __init__(self, max_entries: int = limits.ANALYZE_CACHE_MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self._items: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            raw = self._items.get(key)
            if raw is None:
                return None
            self._items.move_to_end(key)
        value = json.loads(raw)
        return value if isinstance(value, dict) else None

    def put(self, key: str, value: Mapping[str, Any]) -> None:
        raw = json.dumps(dict(value), ensure_ascii=False)  # a copy nobody can mutate
        with self._lock:
            self._items[key] = raw
            self._items.move_to_end(key)
            while len(self._items) > self.max_entries:
                self._items.popitem(last=False)


class FileAnalyzeCache:
    """One JSON file per key under ``root/<key[:2]>/<key>.json``."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"FileAnalyzeCache({str(self.root)!r})"

    def _path(self, key: str) -> Path:
        if len(key) != 64 or any(c not in "0123456789abcdef" for c in key):
            raise ValueError(f"not a cache key: {key!r}")
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        try:
            value = json.loads(self._path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError, UnicodeDecodeError):
            return None
        return value if isinstance(value, dict) else None

    def put(self, key: str, value: Mapping[str, Any]) -> None:
        target = self._path(key)
        private_dir(target.parent)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(dict(value), f, ensure_ascii=False)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
