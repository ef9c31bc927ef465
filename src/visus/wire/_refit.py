"""Re-fitting an image that breaks a model's limits, and the cache of derived blobs.

A derived image is an ordinary blob (content-addressed, in the same store); the
cache only remembers which derived digest answers ``(source digest, profile)`` so a
session re-lowered every step refits each image once. The cache may be persisted as
a small JSON index (one file, rewritten atomically) next to the blobs.

Example:
    >>> from visus.media.types import Profile
    >>> cache = RefitCache()
    >>> p = Profile(max_edge=100, max_pixels=10_000, max_bytes=50_000)
    >>> cache.get("ab" * 32, p) is None
    True
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from visus.errors import StoreError
from visus.media.types import Profile
from visus.paths import private_dir

__all__ = ["BlobReader", "BlobWriter", "RefitCache", "RefitEntry", "profile_key"]


@runtime_checkable
class BlobReader(Protocol):
    """What lowering needs from a blob store: bytes by digest.

    ``get`` raises :class:`visus.errors.NotFoundError` for a missing blob and
    :class:`visus.errors.IntegrityError` for one whose bytes do not match.
    """

    def get(self, digest: str) -> bytes: ...


@runtime_checkable
class BlobWriter(Protocol):
    """A store lowering can keep re-fitted images in (optional: else it refits each time)."""

    def put(self, data: bytes, media_type: str) -> str: ...


@dataclass(frozen=True, slots=True)
class RefitEntry:
    """A derived image: its digest in the blob store and what it is."""

    digest: str
    media_type: str
    width: int
    height: int
    size: int


def profile_key(digest: str, profile: Profile, how: str = "") -> str:
    """A stable text key for ``(digest, profile)``, usable in a JSON index; ``how`` names
    another derivation than a fit (``compact``: re-encoded smaller at the same size)."""
    types = ",".join(sorted(profile.media_types))
    key = f"{digest}/{profile.max_edge}/{profile.max_pixels}/{profile.max_bytes}/{types}"
    return f"{key}/{how}" if how else key


class RefitCache:
    """Maps (source digest, profile) to the derived image's :class:`RefitEntry`.

    In memory by default; with ``index`` (a JSON file path) it loads that index on
    creation and rewrites it (temp file and rename) after every new entry. A corrupt
    index is ignored (the cache starts empty): it is only a cache.

    Example:
        >>> cache = RefitCache()
        >>> len(cache)
        0
    """

    def __init__(self, index: Path | str | None = None) -> None:
        self._index = Path(index) if index is not None else None
        self._entries: dict[str, RefitEntry] = {}
        if self._index is not None:
            self._entries = _load_index(self._index)

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def get(self, digest: str, profile: Profile, how: str = "") -> RefitEntry | None:
        return self._entries.get(profile_key(digest, profile, how))

    def put(self, digest: str, profile: Profile, entry: RefitEntry, how: str = "") -> None:
        key = profile_key(digest, profile, how)
        if self._entries.get(key) == entry:
            return
        self._entries[key] = entry
        if self._index is not None:
            _write_index(self._index, self._entries)

    def forget(self, digest: str, profile: Profile, how: str = "") -> None:
        """Drop an entry (its derived blob went missing)."""
        if self._entries.pop(profile_key(digest, profile, how), None) is not None and self._index:
            _write_index(self._index, self._entries)


def _load_index(path: Path) -> dict[str, RefitEntry]:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):
        return {}
    entries: dict[str, RefitEntry] = {}
    if not isinstance(raw, dict):
        return entries
    for key, value in raw.items():
        try:
            entries[str(key)] = RefitEntry(
                digest=str(value["digest"]),
                media_type=str(value["media_type"]),
                width=int(value["width"]),
                height=int(value["height"]),
                size=int(value["size"]),
            )
        except (KeyError, TypeError, ValueError):
            continue
    return entries


def _write_index(path: Path, entries: dict[str, RefitEntry]) -> None:
    body = json.dumps({k: asdict(v) for k, v in sorted(entries.items())}, indent=1)
    try:
        private_dir(path.parent)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".refit-", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(body)
        os.replace(tmp, path)
    except OSError as e:
        raise StoreError(f"cannot write the refit index {path}: {e}") from e
