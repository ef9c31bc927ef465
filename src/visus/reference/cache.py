"""Prompt caching on the reference server, accounted as each provider documents it.

Every wire's request is cut into *blocks* in the order the provider reads its prompt
(tools, system, then messages), each with an estimate of its tokens (text at four
characters a token, an image by its provider formula from its header) and a key (the
fingerprint of its JSON value without cache markers). A prefix is identified by a hash
chain over the keys, per model (and per ``prompt_cache_key`` where the wire has one), so
any changed byte ends the cached prefix there, an image included. The reported counts
are the server's own prompt count split in the proportions the blocks give.

* **Breakpoints** (Anthropic ``cache_control``, Bedrock ``cachePoint``): a prefix is
  written only at a breakpoint, and only when it is at least the model's minimum
  (:attr:`~visus.models.ModelSpec.cache_min_tokens`); a request reads the longest
  cached prefix found at a breakpoint or up to :data:`LOOKBACK_BLOCKS` blocks before
  one; what lies between that and the last breakpoint is written. Entries live five
  minutes from their last use (an hour with ``"ttl": "1h"``). At most four breakpoints.
* **Automatic** (OpenAI): every prefix of a prompt of at least 1024 tokens is cached;
  a hit is the longest prefix seen before, in steps of 128 tokens.
* **Implicit** (Gemini 2.5 and later): the longest prefix seen before, when at least
  the model's minimum.

Example:
    >>> cache = PromptCache()
    >>> head = [Block(b"system", 3000, breakpoint=True), Block(b"q1", 100, breakpoint=True)]
    >>> cache.breakpoints("m", head, total=3100, min_tokens=1024)
    CacheUse(read=0, write=3100)
    >>> cache.breakpoints("m", [*head, Block(b"q2", 50, breakpoint=True)], total=3150,
    ...                   min_tokens=1024)
    CacheUse(read=3100, write=50)
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from visus.reference.fingerprint import Memo, fingerprint

__all__ = [
    "LOOKBACK_BLOCKS",
    "MAX_BREAKPOINTS",
    "OPENAI_MIN_TOKENS",
    "OPENAI_STEP",
    "Block",
    "CacheUse",
    "PromptCache",
    "TooManyBreakpoints",
    "estimate",
]

#: How far before a breakpoint a hit is looked for (Anthropic: "about 20 blocks").
LOOKBACK_BLOCKS = 20
#: Breakpoints one request may carry (Anthropic and Bedrock).
MAX_BREAKPOINTS = 4
#: OpenAI: prompts from this many tokens are cached, hits in steps of ``_OPENAI_STEP``.
OPENAI_MIN_TOKENS = 1024
OPENAI_STEP = 128
_TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}
_MAX_ENTRIES = 200_000


@dataclass(frozen=True, slots=True)
class Block:
    """One unit of a prompt: its identity, its estimated tokens, and whether a cache
    breakpoint ends on it (with the lifetime it asks for)."""

    key: bytes
    tokens: int
    breakpoint: bool = False
    ttl: float = _TTL_SECONDS["5m"]


@dataclass(frozen=True, slots=True)
class CacheUse:
    """Prompt tokens read from the cache and written to it (the rest is plain input)."""

    read: int = 0
    write: int = 0


class TooManyBreakpoints(ValueError):
    """A request marked more than :data:`MAX_BREAKPOINTS` blocks."""


class PromptCache:
    """The cache of one reference server: prefix hashes and when each expires."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._entries: OrderedDict[bytes, float] = OrderedDict()
        self._lock = threading.Lock()

    def breakpoints(
        self, scope: str, blocks: Sequence[Block], *, total: int, min_tokens: int
    ) -> CacheUse:
        """Anthropic's and Bedrock's accounting for a request of ``total`` prompt tokens."""
        marks = [i for i, b in enumerate(blocks) if b.breakpoint]
        if len(marks) > MAX_BREAKPOINTS:
            raise TooManyBreakpoints(len(marks))
        chain, sums = _chain(scope, blocks)
        scale = _scale(total, sums)
        now = self._clock()
        with self._lock:
            hit = -1
            for mark in marks:
                for j in range(mark, max(-1, mark - LOOKBACK_BLOCKS - 1), -1):
                    if j > hit and self._alive(chain[j], now):
                        hit = j
                        break
            read = scale(sums[hit]) if hit >= 0 else 0
            if hit >= 0:
                self._touch(chain[hit], now + blocks[hit].ttl)
            written = [m for m in marks if scale(sums[m]) >= min_tokens and m > hit]
            for m in written:
                self._touch(chain[m], now + blocks[m].ttl)
        write = scale(sums[written[-1]]) - read if written else 0
        return CacheUse(read=read, write=max(0, write))

    def automatic(
        self, scope: str, blocks: Sequence[Block], *, total: int, min_tokens: int, step: int = 1
    ) -> CacheUse:
        """OpenAI's (``step`` 128) and Gemini's implicit accounting: the longest prefix
        seen before is read; every prefix of this prompt is kept for the next one."""
        if total < min_tokens:
            return CacheUse()
        chain, sums = _chain(scope, blocks)
        scale = _scale(total, sums)
        now = self._clock()
        with self._lock:
            hit = max((j for j in range(len(blocks)) if self._alive(chain[j], now)), default=-1)
            for j in range(len(blocks)):
                self._touch(chain[j], now + _TTL_SECONDS["5m"])
        read = scale(sums[hit]) if hit >= 0 else 0
        read = read // step * step
        return CacheUse(read=read if read >= min_tokens else 0)

    def _alive(self, key: bytes, now: float) -> bool:
        expiry = self._entries.get(key)
        return expiry is not None and expiry > now

    def _touch(self, key: bytes, expiry: float) -> None:
        self._entries[key] = max(expiry, self._entries.get(key, 0.0))
        self._entries.move_to_end(key)
        while len(self._entries) > _MAX_ENTRIES:
            self._entries.popitem(last=False)


def _chain(scope: str, blocks: Sequence[Block]) -> tuple[list[bytes], list[int]]:
    """Each prefix's hash and cumulative tokens (index i: blocks 0..i)."""
    h = hashlib.sha256(scope.encode()).digest()
    chain: list[bytes] = []
    sums: list[int] = []
    running = 0
    for b in blocks:
        h = hashlib.sha256(h + hashlib.sha256(b.key).digest()).digest()
        running += b.tokens
        chain.append(h)
        sums.append(running)
    return chain, sums


def _scale(total: int, sums: Sequence[int]) -> Callable[[int], int]:
    """Block estimates -> the server's own prompt count (same proportions)."""
    whole = sums[-1] if sums else 0
    if whole <= 0:
        return lambda _: 0
    return lambda tokens: min(total, round(total * tokens / whole))


# --- estimating a block -------------------------------------------------------------------

#: Keys whose string value is base64 image (or document) bytes on some wire.
_DATA_KEYS = frozenset({"data", "bytes"})
_MARKERS = frozenset({"cache_control", "cachePoint"})
#: Base64 characters enough to hold any image header Pillow needs for the size.
_HEADER_CHARS = 87_384


def estimate(value: object, image_tokens: Callable[[int, int], int]) -> tuple[bytes, int]:
    """(key, tokens) of a JSON block: its fingerprint as JSON without cache markers
    (:mod:`visus.reference.fingerprint`), and text at four characters a token plus each
    inline image at ``image_tokens(width, height)``.

    Example:
        >>> key, tokens = estimate({"text": "x" * 400}, lambda w, h: 0)
        >>> key == estimate({"text": "x" * 400, "cache_control": {}}, lambda w, h: 0)[0]
        True
        >>> tokens
        100
    """
    chars = 0
    images = 0
    stack: list[tuple[str, object]] = [("", value)]
    while stack:
        key, item = stack.pop()
        if isinstance(item, dict):
            stack.extend((str(k), v) for k, v in item.items() if k != "cache_control")
        elif isinstance(item, list):
            stack.extend((key, v) for v in item)
        elif isinstance(item, str):
            b64 = _inline_base64(key, item)
            if b64 is None:
                chars += len(item)
            else:
                size = _image_size(b64)
                images += image_tokens(*size) if size else math.ceil(len(b64) * 3 / 4 / 4)
    return fingerprint(value, skip=_MARKERS, drop=_is_cache_point), math.ceil(chars / 4) + images


def _inline_base64(key: str, text: str) -> str | None:
    if text.startswith("data:") and ";base64," in text[:100]:
        return text.split(",", 1)[1]
    if key in _DATA_KEYS and len(text) > 64:
        return text
    return None


#: Sizes read from image headers, by the SHA-256 of the base64 read: a long loop sends
#: each live screenshot with every request, its header decoded once.
_SIZES: Memo[bytes, tuple[int, int] | None] = Memo(4096)


def _image_size(b64: str) -> tuple[int, int] | None:
    """Width and height from the first bytes of a base64 image (None if not an image)."""
    head = b64[:_HEADER_CHARS]
    digest = hashlib.sha256(head.encode("utf-8", "surrogatepass")).digest()
    return _SIZES.get(digest, lambda: _read_size(head))


def _read_size(head: str) -> tuple[int, int] | None:
    from PIL import Image, UnidentifiedImageError

    try:
        data = base64.b64decode(head[: len(head) // 4 * 4])
        with Image.open(io.BytesIO(data)) as im:
            return im.size
    except (binascii.Error, ValueError, OSError, UnidentifiedImageError):
        return None


def _is_cache_point(value: object) -> bool:
    return isinstance(value, dict) and set(value) == {"cachePoint"}
