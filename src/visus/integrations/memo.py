"""What an integration learns about an image once: its bytes, digest, size and fit.

A framework sends its whole history with every request, so the images a history
holds come back turn after turn as the same base64 text (the Agents SDK's data URLs,
LangChain's blocks) or the same bytes (pydantic-ai's). Preparing a request decodes
each, hashes it (its digest names it), probes its size (its tokens weigh it in the
plan and in the request's counts) and fits it to the model. Done again at every
request, that work grows with the history: at turn 50 of an append-only history (a
model that binds its reasoning to the history keeps every screenshot live) it was
most of a step. :class:`ImageMemo` keeps each result, so a request redoes none of it
for an image it has met before.

Each fact is what the same computation gives for the same input: the base64 text or
the bytes themselves are the keys (compared whole, never by a hash alone), so what a
request carries is byte for byte what it would be without the memo. The memo is
bounded: least recently used entries leave past ``entries`` or past ``budget`` bytes
held (keys and values counted), whatever a run's length. A failure is never kept
(an unreadable image is tried again: a busy render worker may answer next time).

Example:
    >>> import base64
    >>> memo = ImageMemo()
    >>> text = base64.b64encode(b"PNG").decode()
    >>> data = memo.decoded(text, base64.b64decode)
    >>> data is memo.decoded(text, base64.b64decode), memo.digest(data)[:12]
    (True, '796120837694')
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from visus import media
from visus.errors import VisusError
from visus.integrations.values import ToolImage
from visus.perception.values import content_digest

__all__ = ["ImageMemo", "Lru"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

#: Entries each of a memo's tables keeps, at most.
ENTRIES = 1024
#: Bytes each of a memo's tables holds, at most (keys and values: base64 text and its
#: bytes, fitted bytes): a few hundred screenshots.
BUDGET = 128 * 1024 * 1024


class Lru(Generic[K, V]):
    """A map of at most ``entries`` entries weighing at most ``budget`` together
    (``weight`` of each key and value), the least recently used leaving first. Safe
    across threads (a framework prepares requests off its event loop).

    Example:
        >>> lru: Lru[str, bytes] = Lru(2, 10, lambda k, v: len(v))
        >>> for key in "abc":
        ...     lru.put(key, b"1234")
        >>> lru.get("a"), lru.get("c"), len(lru)
        (None, b'1234', 2)
        >>> lru.put("big", b"x" * 11)  # heavier than the whole budget: not kept
        >>> lru.get("big") is None
        True
    """

    def __init__(self, entries: int, budget: int, weight: Callable[[K, V], int]) -> None:
        self.entries = entries
        self.budget = budget
        self._weight = weight
        self._held: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._total = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._held)

    @property
    def held(self) -> int:
        """The weight of what is held."""
        return self._total

    def get(self, key: K) -> V | None:
        with self._lock:
            found = self._held.get(key)
            if found is None:
                return None
            self._held.move_to_end(key)
            return found[0]

    def put(self, key: K, value: V) -> None:
        weight = self._weight(key, value)
        if self.entries <= 0 or weight > self.budget:
            return
        with self._lock:
            old = self._held.pop(key, None)
            self._total -= 0 if old is None else old[1]
            self._held[key] = (value, weight)
            self._total += weight
            while len(self._held) > self.entries or self._total > self.budget:
                _, (_, gone) = self._held.popitem(last=False)
                self._total -= gone


class ImageMemo:
    """One integration's memory of the images its requests carry (see the module
    docstring): base64 text to bytes, bytes to digest and size, and an image's fitted
    form per model. ``entries`` and ``budget`` bound each table; ``ImageMemo(0)``
    remembers nothing (every request does all the work, as without a memo).

    The tables keyed by bytes hash them once per bytes object (Python keeps a bytes
    object's hash), and the bytes :meth:`decoded` returns are the same object each
    time, so a request meets an image it has seen in a lookup.
    """

    def __init__(self, entries: int = ENTRIES, budget: int = BUDGET) -> None:
        self._decoded: Lru[str, bytes] = Lru(entries, budget, lambda k, v: len(k) + len(v))
        self._digests: Lru[bytes, str] = Lru(entries, budget, lambda k, v: len(k))
        self._sizes: Lru[bytes, tuple[int, int]] = Lru(entries, budget, lambda k, v: len(k))
        self._fitted: Lru[tuple[str, str], ToolImage] = Lru(
            entries, budget, lambda k, v: len(v.data)
        )
        self._stored: Lru[str, bool] = Lru(entries, budget, lambda k, v: len(k))

    def decoded(self, text: str, decode: Callable[[str], bytes | None]) -> bytes | None:
        """``decode(text)`` (base64 text, or a data URL, to bytes; None: not inline),
        the same bytes object for the same text while it is remembered."""
        found = self._decoded.get(text)
        if found is None:
            found = decode(text)
            if found is not None:
                self._decoded.put(text, found)
        return found

    def digest(self, data: bytes) -> str:
        """``data``'s sha256 (:func:`~visus.perception.values.content_digest`)."""
        found = self._digests.get(data)
        if found is None:
            found = content_digest(data)
            self._digests.put(data, found)
        return found

    def size(self, data: bytes) -> tuple[int, int] | None:
        """``data``'s width and height as :func:`visus.media.probe` reads them (None:
        not an image with a size). An error is not remembered."""
        if (found := self._sizes.get(data)) is not None:
            return found
        try:
            head = media.probe(data)
        except VisusError:
            return None
        size = None if head.width is None or head.height is None else (head.width, head.height)
        if size is not None:
            self._sizes.put(data, size)
        return size

    def fitted(self, digest: str, model: str) -> ToolImage | None:
        """The image ``digest`` as fitted for ``model`` before (:meth:`keep_fitted`)."""
        return self._fitted.get((digest, model))

    def keep_fitted(self, model: str, image: ToolImage) -> None:
        """Remember ``image`` as ``model`` is sent the image of its digest."""
        self._fitted.put((image.digest, model), image)

    def stored(self, digest: str) -> bool:
        """Whether :meth:`keep_stored` said the blob ``digest`` is stored."""
        return self._stored.get(digest) is not None

    def keep_stored(self, digest: str) -> None:
        """Remember that the blob ``digest`` is in the integration's store."""
        self._stored.put(digest, True)
