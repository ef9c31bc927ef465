"""Images in OpenAI-style items: data URLs, and a session that stores them once.

The Agents SDK keeps a conversation as Responses input items, whose images are
``input_image`` parts holding a ``data:`` URL. :class:`VisionSession` wraps any of its
``Session`` s (it asks only what the ``Session`` protocol has) so each image is stored
once in visus's blob store; the helpers read and write those URLs. No framework is
imported here: :mod:`visus.integrations.openai_agents` is the SDK's glue and hands its
sessions to this class.

Example:
    >>> url = data_url("image/png", b"PNG")
    >>> url, inline(url), media_type_of(url)
    ('data:image/png;base64,UE5H', b'PNG', 'image/png')
"""

from __future__ import annotations

import base64
import binascii
import copy
from typing import Any

from visus.record.blobs import BlobStore

__all__ = ["VisionSession", "data_url", "decoded", "inline", "media_type_of"]

Item = dict[str, Any]

_BLOB_REF = "visus-blob:"


class VisionSession:
    """An Agents SDK ``Session`` (``inner``, any of them) storing each image once in
    visus's blob store.

    Items are written to ``inner`` with every ``input_image`` data URL replaced by
    ``visus-blob:sha256:<hex>`` (the bytes go to ``blobs``) and restored on read, so a
    50-image session is small on disk. A reference whose blob is gone reads back as a
    text note instead of failing the load.

    Example:
        >>> from agents import SQLiteSession
        >>> from visus.record.blobs import MemoryBlobStore
        >>> s = VisionSession(SQLiteSession("demo"), MemoryBlobStore())
        >>> s.session_id
        'demo'
    """

    def __init__(self, inner: Any, blobs: BlobStore) -> None:
        self.inner = inner
        self.blobs = blobs
        self.session_id = inner.session_id
        self.session_settings = getattr(inner, "session_settings", None)

    async def get_items(self, limit: int | None = None) -> list[Any]:
        return [self._restore(i) for i in await self.inner.get_items(limit)]

    async def add_items(self, items: list[Any]) -> None:
        await self.inner.add_items([self._store(i) for i in items])

    async def pop_item(self) -> Any:
        item = await self.inner.pop_item()
        return None if item is None else self._restore(item)

    async def clear_session(self) -> None:
        await self.inner.clear_session()

    def _store(self, item: Any) -> Any:
        return _map_images(item, self._put)

    def _restore(self, item: Any) -> Any:
        return _map_images(item, self._get)

    def _put(self, part: Item) -> Item:
        url = part.get("image_url")
        if not isinstance(url, str):
            return part
        data = inline(url)
        if data is None:  # a web URL, or a data URL that is not base64: kept as it is
            return part
        digest = self.blobs.put(data, media_type_of(url))
        return {**part, "image_url": f"{_BLOB_REF}sha256:{digest}"}

    def _get(self, part: Item) -> Item:
        url = part.get("image_url")
        if not isinstance(url, str) or not url.startswith(_BLOB_REF):
            return part
        digest = url.removeprefix(_BLOB_REF).removeprefix("sha256:")
        try:
            data = self.blobs.get(digest)
        except Exception:  # missing or corrupt: a note, never a failed load
            return {"type": "input_text", "text": f"[image sha256:{digest} is no longer stored]"}
        return {**part, "image_url": data_url(self.blobs.media_type(digest) or "image/png", data)}


def data_url(media_type: str, data: bytes) -> str:
    """``data`` as a base64 ``data:`` URL."""
    return f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"


def media_type_of(url: str) -> str:
    """The media type a ``data:`` URL names (``image/png`` when it names none)."""
    return url[5:].split(";", 1)[0].split(",", 1)[0] or "image/png"


def inline(url: str) -> bytes | None:
    """The bytes of a base64 ``data:`` URL; None for a web URL or any other data URL."""
    head = url.partition(",")[0]
    if not (url.startswith("data:") and head.endswith(";base64")):
        return None
    return decoded(url) or None


def decoded(url: str) -> bytes:
    """The bytes of a base64 ``data:`` URL (empty when they are not base64)."""
    try:
        return base64.b64decode(url.split(",", 1)[1], validate=True)
    except (IndexError, binascii.Error, ValueError):
        return b""


def _map_images(item: Any, fn: Any) -> Any:
    """``item`` with ``fn`` applied to every input_image part (a copy; ``item`` untouched)."""
    if not isinstance(item, dict):
        return item
    changed = False
    out = dict(item)
    for key in ("output", "content"):
        value = item.get(key)
        if isinstance(value, list):
            mapped = [
                fn(c) if isinstance(c, dict) and c.get("type") == "input_image" else c
                for c in value
            ]
            if any(a is not b for a, b in zip(mapped, value, strict=True)):
                out[key] = mapped
                changed = True
    return out if changed else copy.copy(item)
