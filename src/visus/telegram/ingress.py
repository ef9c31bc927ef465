"""Telegram -> tether: who may talk, what a message carries, and the checks before download.

A message becomes one ``user.message``: its text (or caption) and its images: the
largest size of a photo, or a document whose MIME type is an image. Albums arrive
as one update per photo sharing a ``media_group_id``; :class:`AlbumCollector`
gathers them over a short quiet window into one message. Sizes are checked from
the ``file_size`` Telegram reports *before* anything is downloaded (our bound is
TELEGRAM_MAX_PHOTO_BYTES per image, under the Bot API's 20 MB download cap), and
again on the bytes received. Every refusal is a :class:`Refusal` whose text is
the reply the user reads.

Example:
    >>> is_allowed(42, 7, "ann", allowed_chats=(42,), allowed_users=())
    True
    >>> is_allowed(1, 7, "ann", allowed_chats=(), allowed_users=("@ann",))
    True
    >>> is_allowed(1, 7, None, allowed_chats=(), allowed_users=())
    False
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from telegram import Bot, Message

from visus import limits, media
from visus.errors import LimitError, VisusError
from visus.media import Profile
from visus.telegram.retry import with_retry
from visus.tether.runner import ImageIn

__all__ = [
    "INGRESS_PROFILE",
    "AlbumCollector",
    "FileRef",
    "Refusal",
    "check_refs",
    "download",
    "file_ref",
    "is_allowed",
    "message_text",
    "normalise",
]

log = logging.getLogger(__name__)

#: What an incoming image of another type (bmp, tiff, heic a document carried) becomes.
INGRESS_PROFILE = Profile(
    max_edge=limits.MAX_SOURCE_EDGE,
    max_pixels=limits.MAX_SOURCE_PIXELS,
    max_bytes=limits.TETHER_MAX_IMAGE_BYTES,
    media_types=limits.TETHER_MEDIA_TYPES,
)


class Refusal(LimitError):
    """A message the gateway will not forward; ``str()`` is the reply to the user."""


@dataclass(frozen=True, slots=True)
class FileRef:
    """An image a message carries, as Telegram describes it before any download."""

    file_id: str
    file_size: int | None
    kind: Literal["photo", "document"]
    media_type: str = "image/jpeg"


def _mb(n: int) -> str:
    return f"{n / limits.MB:.1f} MB"


def _limit_mb(n: int) -> str:
    return f"{n // limits.MB} MB"


def is_allowed(
    chat_id: int,
    user_id: int | None,
    username: str | None,
    *,
    allowed_chats: Iterable[int],
    allowed_users: Iterable[int | str],
) -> bool:
    """True when the chat is allowed, or the user is (by id or by ``@username``)."""
    if chat_id in set(allowed_chats):
        return True
    for u in allowed_users:
        if isinstance(u, int) or str(u).lstrip("-").isdigit():
            if user_id is not None and int(u) == user_id:
                return True
        elif username and str(u).lstrip("@").lower() == username.lower():
            return True
    return False


def file_ref(message: Message) -> FileRef | None:
    """The image a message carries: the largest photo size, or an image document."""
    if message.photo:
        best = max(message.photo, key=lambda p: (p.width * p.height, p.file_size or 0))
        return FileRef(best.file_id, best.file_size, "photo")
    doc = message.document
    if doc is not None and (doc.mime_type or "").lower().startswith("image/"):
        return FileRef(doc.file_id, doc.file_size, "document", (doc.mime_type or "").lower())
    return None


def message_text(messages: Sequence[Message]) -> str:
    """The text of a message (or an album): its text, else the first caption."""
    for m in messages:
        if m.text or m.caption:
            return m.text or m.caption or ""
    return ""


def _check_size(size: int | None) -> None:
    if size is not None and size > limits.TELEGRAM_MAX_PHOTO_BYTES:
        raise Refusal(
            f"Sorry, that image is {_mb(size)}; the limit is "
            f"{_limit_mb(limits.TELEGRAM_MAX_PHOTO_BYTES)} per image. "
            "Please send a smaller one."
        )


def check_refs(refs: Sequence[FileRef]) -> None:
    """Refuse, before any download, a message over the count, per-image or total bound."""
    cap = limits.TETHER_MAX_IMAGES_PER_MESSAGE
    if len(refs) > cap:
        raise Refusal(
            f"Sorry, that album has {len(refs)} images; I take at most {cap} images "
            "per message. Please send fewer."
        )
    for ref in refs:
        _check_size(ref.file_size)
    total = sum(r.file_size or 0 for r in refs)
    if total > limits.TETHER_MAX_FRAME_IMAGE_BYTES:
        raise Refusal(
            f"Sorry, those images add up to {_mb(total)}; the limit is "
            f"{_limit_mb(limits.TETHER_MAX_FRAME_IMAGE_BYTES)} per message."
        )


def normalise(data: bytes) -> ImageIn:
    """The bytes as a tether image: kept when already png/jpeg/gif/webp, else re-fitted.

    The type comes from the bytes, never from what the sender claimed.
    """
    try:
        p = media.probe(data)
        if p.kind == "raster" and p.media_type in limits.TETHER_MEDIA_TYPES:
            return ImageIn(p.media_type, data)
        fitted = media.fit(data, INGRESS_PROFILE)
    except VisusError as e:
        raise Refusal(f"Sorry, I could not read that file as an image ({e}).") from e
    return ImageIn(fitted.media_type, fitted.data)


async def download(
    bot: Bot, ref: FileRef, *, retries: int = limits.TELEGRAM_MAX_RETRIES
) -> ImageIn:
    """Fetch one image (``getFile`` then the file), checking its size at each step."""
    _check_size(ref.file_size)
    tg_file = await with_retry(lambda: bot.get_file(ref.file_id), what="getFile", retries=retries)
    _check_size(tg_file.file_size)
    data = bytes(await with_retry(tg_file.download_as_bytearray, what="download", retries=retries))
    _check_size(len(data))
    return await asyncio.to_thread(normalise, data)


@dataclass
class _Album:
    messages: list[Message] = field(default_factory=list)
    deadline: float = 0.0


class AlbumCollector:
    """Gathers the updates of one album (same chat, same ``media_group_id``).

    An album is complete once ``window`` seconds pass without a new photo; then
    ``on_album`` gets its messages in order. A bounded number of parts is kept;
    the count is still reported so the refusal can name it.
    """

    def __init__(
        self,
        on_album: Callable[[list[Message], int], Awaitable[None]],
        *,
        window: float = limits.TELEGRAM_ALBUM_WINDOW_SECONDS,
    ) -> None:
        self.on_album = on_album
        self.window = window
        self._albums: dict[tuple[int, str], _Album] = {}
        self._counts: dict[tuple[int, str], int] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def add(self, message: Message) -> None:
        key = (message.chat_id, str(message.media_group_id))
        album = self._albums.get(key)
        fresh = album is None
        if album is None:
            album = self._albums[key] = _Album()
            self._counts[key] = 0
        self._counts[key] += 1
        # Telegram albums hold at most 10 items; more parts than that are not kept.
        if len(album.messages) < limits.TELEGRAM_MAX_MEDIA_GROUP:
            album.messages.append(message)
        album.deadline = time.monotonic() + self.window
        if fresh:
            task = asyncio.create_task(self._wait(key))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _wait(self, key: tuple[int, str]) -> None:
        album = self._albums[key]
        while (left := album.deadline - time.monotonic()) > 0:
            await asyncio.sleep(left)
        del self._albums[key]
        count = self._counts.pop(key)
        try:
            await self.on_album(sorted(album.messages, key=lambda m: m.message_id), count)
        except Exception:
            log.exception("telegram: handling album %s failed", key)

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
