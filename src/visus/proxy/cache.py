"""What the proxy learned about an image, kept between requests, keyed by its bytes.

Every client re-sends its whole history on each step, so the proxy sees the same
images again and again. :class:`FitCache` remembers, per image (the SHA-256 of its
base64 text as sent), what the image is (:class:`Known`: the digest of its decoded
bytes, type and size) and, per fitting profile, what was sent for it (the fitted
image, or that it went as it was). A repeated request is then neither decoded nor
re-fitted, and the bytes forwarded for an image are the same every time, which is
what keeps a provider's prompt cache hitting.

Bounded by the base64 bytes of the fitted images it holds (least recently used
leave first); entries that record "sent as it was" or what an image is are small and
bounded by count.

Example:
    >>> cache = FitCache(max_bytes=1000)
    >>> key = image_key("iVBORw0KGgo=")
    >>> cache.remember(key, Known("ab" * 32, "image/png", 1, 1)) is None
    True
    >>> cache.known(key).width
    1
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Final

from visus.media import Profile

__all__ = [
    "AS_IS",
    "AsIs",
    "Cut",
    "CutCache",
    "ElidedImages",
    "FitCache",
    "Fitted",
    "Known",
    "image_key",
]

#: Entries of the small maps (what an image is; "sent as it was").
_MAX_SMALL: Final = 100_000


@dataclass(frozen=True, slots=True)
class Fitted:
    """An image as it leaves the proxy (base64 without a data-URL prefix)."""

    b64: str
    media_type: str
    width: int
    height: int


@dataclass(frozen=True, slots=True)
class Known:
    """An image as decoded once: the digest of its bytes, its type and size."""

    digest: str
    media_type: str
    width: int
    height: int


class AsIs:
    """The image already met the profile: it was sent as the client sent it."""

    def __repr__(self) -> str:
        return "AS_IS"


AS_IS: Final = AsIs()


def image_key(b64: str) -> str:
    """The cache key of an image: SHA-256 of its base64 text as the client sent it."""
    return hashlib.sha256(b64.encode("ascii", "replace")).hexdigest()


class FitCache:
    """Fitting results by (image key, profile), LRU-bounded by fitted bytes; thread-safe."""

    def __init__(self, max_bytes: int, elided_bytes: int | None = None) -> None:
        self.max_bytes = max_bytes
        #: The images left out of requests, for ``restore_image`` (same bound by default).
        self.elided = ElidedImages(max_bytes if elided_bytes is None else elided_bytes)
        #: What changed between consecutive screenshots (a quarter of the bound).
        self.cuts = CutCache(max_bytes // 4)
        self._lock = threading.Lock()
        self._known: OrderedDict[str, Known] = OrderedDict()
        self._fitted: OrderedDict[tuple[str, Profile], Fitted | AsIs] = OrderedDict()
        self._bytes = 0
        self.hits = 0

    def known(self, key: str) -> Known | None:
        """What the image of ``key`` is, if it was decoded before."""
        with self._lock:
            found = self._known.get(key)
            if found is not None:
                self._known.move_to_end(key)
            return found

    def remember(self, key: str, known: Known) -> None:
        with self._lock:
            self._known[key] = known
            self._known.move_to_end(key)
            while len(self._known) > _MAX_SMALL:
                self._known.popitem(last=False)

    def fitted(self, key: str, profile: Profile) -> Fitted | AsIs | None:
        """What was sent for the image of ``key`` under ``profile`` (None: never fitted)."""
        with self._lock:
            found = self._fitted.get((key, profile))
            if found is not None:
                self._fitted.move_to_end((key, profile))
                self.hits += 1
            return found

    def put(self, key: str, profile: Profile, sent: Fitted | AsIs) -> None:
        size = 0 if isinstance(sent, AsIs) else len(sent.b64)
        if size > self.max_bytes:
            return
        with self._lock:
            old = self._fitted.pop((key, profile), None)
            if old is not None and not isinstance(old, AsIs):
                self._bytes -= len(old.b64)
            self._fitted[(key, profile)] = sent
            self._bytes += size
            while self._bytes > self.max_bytes or len(self._fitted) > _MAX_SMALL:
                _, gone = self._fitted.popitem(last=False)
                if not isinstance(gone, AsIs):
                    self._bytes -= len(gone.b64)


@dataclass(frozen=True, slots=True)
class Cut:
    """Where an image differs from the one before it (only what changed): each region
    (x0, y0, x1, y1) in its pixels and that area of it as base64 PNG."""

    regions: tuple[tuple[int, int, int, int], ...]
    crops: tuple[str, ...]


class CutCache:
    """What :func:`visus.media.changes.changed_regions` found for a pair of images (by
    their keys; None: nothing to cut), LRU-bounded by the crops' base64 bytes."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._cuts: OrderedDict[tuple[str, str], Cut | None] = OrderedDict()
        self._bytes = 0

    def get(self, pair: tuple[str, str]) -> tuple[bool, Cut | None]:
        """``(known, cut)``: whether the pair was compared before, and what was found."""
        with self._lock:
            if pair not in self._cuts:
                return False, None
            self._cuts.move_to_end(pair)
            return True, self._cuts[pair]

    def put(self, pair: tuple[str, str], cut: Cut | None) -> None:
        size = sum(len(c) for c in cut.crops) if cut is not None else 0
        if size > self.max_bytes:
            return
        with self._lock:
            old = self._cuts.pop(pair, None)
            self._bytes -= sum(len(c) for c in old.crops) if old is not None else 0
            self._cuts[pair] = cut
            self._bytes += size
            while self._bytes > self.max_bytes or len(self._cuts) > _MAX_SMALL:
                _, gone = self._cuts.popitem(last=False)
                self._bytes -= sum(len(c) for c in gone.crops) if gone is not None else 0


class ElidedImages:
    """The images the proxy left out of requests, by the digest their descriptor names.

    What the proxy's own ``restore_image`` tool (MCP, at ``/mcp``) gives back. Every
    request re-sends the images it elides, so an image stays here as long as its
    conversation goes on; least recently elided leave first past ``max_bytes``.
    Only images the proxy itself elided are held, and only a full digest finds one.

    Example:
        >>> store = ElidedImages(max_bytes=100)
        >>> store.keep("ab" * 32, "image/png", "iVBORw0KGgo=")
        >>> store.get("ab" * 32)
        ('image/png', 'iVBORw0KGgo=')
        >>> store.get("ab" * 6) is None
        True
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._images: OrderedDict[str, tuple[str, str]] = OrderedDict()
        self._bytes = 0

    def keep(self, digest: str, media_type: str, b64: str) -> None:
        if len(b64) > self.max_bytes:
            return
        with self._lock:
            old = self._images.pop(digest, None)
            if old is not None:
                self._bytes -= len(old[1])
            self._images[digest] = (media_type, b64)
            self._bytes += len(b64)
            while self._bytes > self.max_bytes:
                _, (_, gone) = self._images.popitem(last=False)
                self._bytes -= len(gone)

    def get(self, digest: str) -> tuple[str, str] | None:
        """``(media_type, base64)`` of an elided image, by its full sha256 digest."""
        with self._lock:
            return self._images.get(digest)
