"""Tether -> Telegram: streamed text edited in place, then images first, then text.

One :class:`ChatReply` per chat turns the frames of a reply into Bot API calls:

- ``assistant.delta`` appends to a preview message, sent on the first delta and
  then edited in place at most once per TELEGRAM_EDIT_INTERVAL_SECONDS, and only
  when its text changed (a trailing edit catches the last deltas of a pause);
- ``assistant.done`` finishes the reply. Without images the preview becomes the
  final text (further messages follow when it is longer than one message). With
  images the preview is edited into a short pointer ("⬇ 2 images, then the answer":
  a message the user saw is never deleted) and the images go first (``sendPhoto``, or
  ``sendMediaGroup`` for several), the first one captioned with the text when it
  fits in a caption; the text (split by :func:`~visus.telegram.split.split_text`)
  follows otherwise.

Final texts and captions go as Telegram HTML (:func:`~visus.telegram.markdown.to_html`
of the agent's Markdown); when Telegram refuses the markup, the same text goes
plain. The streamed preview is always plain: half a reply is rarely valid markup.

Images outside Telegram's photo bounds (bytes, width + height, aspect ratio, or a
type it does not show as a photo) are fitted by :func:`visus.media.fit` first; an
image whose aspect ratio no fitting can fix goes as a document. Every call is
retried on 429 (after the server's ``retry_after``) and on network errors; a call
that still fails is logged and the rest of the reply goes on.

Example:
    >>> prepare_image(ImageIn("image/png", b"not a png")).kind
    'document'
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from telegram import Bot, InputMediaDocument, InputMediaPhoto, Message
from telegram.constants import ParseMode
from telegram.error import BadRequest

from visus import limits, media
from visus.errors import VisusError
from visus.media import Profile
from visus.telegram.markdown import to_html
from visus.telegram.retry import with_retry
from visus.telegram.split import split_text, tg_len
from visus.tether.runner import ImageIn

__all__ = ["PHOTO_MEDIA_TYPES", "ChatReply", "Outgoing", "prepare_image"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: What Telegram shows as a photo without converting it.
PHOTO_MEDIA_TYPES = frozenset({"image/jpeg", "image/png"})
_EXT = {"image/jpeg": "jpg", "image/png": "png", "image/gif": "gif", "image/webp": "webp"}


@dataclass(frozen=True, slots=True)
class Outgoing:
    """An image ready for the Bot API: sent as a ``photo`` or as a ``document``."""

    kind: Literal["photo", "document"]
    data: bytes
    media_type: str

    def filename(self, index: int) -> str:
        return f"image{index + 1}.{_EXT.get(self.media_type, 'bin')}"


def _photo_ok(width: int, height: int, size: int, media_type: str) -> bool:
    return (
        size <= limits.TELEGRAM_MAX_PHOTO_BYTES
        and width + height <= limits.TELEGRAM_MAX_PHOTO_SIDES_SUM
        and media_type in PHOTO_MEDIA_TYPES
    )


def prepare_image(image: ImageIn) -> Outgoing:
    """Fit ``image`` into Telegram's photo bounds, or say it goes as a document.

    Bytes already inside the bounds are sent unchanged. CPU bound: call it in a
    worker thread.

    Example:
        >>> from visus.media import Profile, load
        >>> png = load(b"hi", profile=Profile(200, 40_000, 1_000_000)).data
        >>> prepare_image(ImageIn("image/png", png)).data == png
        True
    """
    try:
        p = media.probe(image.data)
    except VisusError:
        return Outgoing("document", image.data, image.media_type)
    if p.kind != "raster" or not p.width or not p.height:
        return Outgoing("document", image.data, image.media_type)
    w, h = p.width, p.height
    if max(w, h) / min(w, h) > limits.TELEGRAM_MAX_PHOTO_RATIO:
        return Outgoing("document", image.data, image.media_type)
    if _photo_ok(w, h, len(image.data), p.media_type) and p.frame_count in (None, 1):
        return Outgoing("photo", image.data, p.media_type)
    # The longest edge that keeps width + height inside the bound at this aspect.
    edge = limits.TELEGRAM_MAX_PHOTO_SIDES_SUM * max(w, h) // (w + h)
    profile = Profile(
        max_edge=max(1, edge),
        max_pixels=limits.MAX_SOURCE_PIXELS,
        max_bytes=limits.TELEGRAM_MAX_PHOTO_BYTES,
        media_types=PHOTO_MEDIA_TYPES,
    )
    try:
        fitted = media.fit(image.data, profile)
    except VisusError as e:
        log.warning("telegram: image could not be fitted as a photo (%s); sending a document", e)
        return Outgoing("document", image.data, image.media_type)
    if not _photo_ok(fitted.width, fitted.height, fitted.size, fitted.media_type):
        return Outgoing("document", image.data, image.media_type)
    return Outgoing("photo", fitted.data, fitted.media_type)


def _preview(text: str) -> str:
    """What the streamed message shows: the text so far, clipped to one message."""
    limit = limits.TELEGRAM_MAX_TEXT_CHARS
    text = text.rstrip()  # Telegram drops it anyway; an edit for it would change nothing
    if tg_len(text) <= limit:
        return text
    cut = limit - 1
    while tg_len(text[:cut]) > limit - 1:
        cut -= 1
    return text[:cut] + "…"


def _pointer(images: int, text: bool) -> str:
    """What a streamed preview becomes when its reply carries images (they follow it).

    Example:
        >>> _pointer(2, True)
        '⬇ 2 images, then the answer'
    """
    what = "1 image" if images == 1 else f"{images} images"
    return f"⬇ {what}, then the answer" if text else f"⬇ {what}"


class ChatReply:
    """Egress for one chat: the streamed preview of the current reply, then its end.

    Not safe for concurrent use: feed it one frame at a time (the gateway keeps a
    queue per chat).
    """

    def __init__(
        self,
        bot: Bot,
        chat_id: int,
        *,
        edit_interval: float = limits.TELEGRAM_EDIT_INTERVAL_SECONDS,
        retries: int = limits.TELEGRAM_MAX_RETRIES,
        clock: Callable[[], float] = time.monotonic,
        html: bool = True,
    ) -> None:
        self.bot = bot
        self.html = html
        self.chat_id = chat_id
        self.edit_interval = edit_interval
        self.retries = retries
        self.clock = clock
        self._reply_id = ""
        self._text = ""
        self._message: Message | None = None
        self._shown = ""
        self._last_edit = 0.0
        self._flush: asyncio.Task[None] | None = None
        self._flush_waiting = False
        self._lock = asyncio.Lock()

    @property
    def streaming(self) -> bool:
        """True while a streamed preview of the current reply is on screen."""
        return self._message is not None

    async def _call(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        return await with_retry(call, what=what, retries=self.retries)

    async def _try(self, what: str, call: Callable[[], Awaitable[T]]) -> T | None:
        """A call whose final failure is logged, never raised: the reply goes on."""
        try:
            return await self._call(what, call)
        except Exception:
            log.exception("telegram %s to chat %s failed after retries", what, self.chat_id)
            return None

    def _start(self, reply_id: str) -> None:
        if reply_id != self._reply_id:
            self._cancel_flush()
            self._reply_id = reply_id
            self._text, self._message, self._shown, self._last_edit = "", None, "", 0.0

    def _cancel_flush(self) -> None:
        if self._flush is not None and not self._flush.done():
            self._flush.cancel()
        self._flush = None

    async def delta(self, reply_id: str, text: str) -> None:
        """Append a streamed piece of reply ``reply_id`` and show it (throttled)."""
        self._start(reply_id)
        self._text += text
        await self._show(force=False)

    async def _show(self, *, force: bool) -> None:
        async with self._lock:
            shown = _preview(self._text)
            if not shown.strip() or shown == self._shown:
                return
            if self._message is None:
                self._message = await self._try(
                    "sendMessage", lambda: self.bot.send_message(self.chat_id, shown)
                )
                self._shown, self._last_edit = shown, self.clock()
                return
            wait = self._last_edit + self.edit_interval - self.clock()
            if wait > 0 and not force:
                if self._flush is None or self._flush.done():
                    self._flush = asyncio.create_task(self._later(wait))
                return
            message_id = self._message.message_id
            await self._try("editMessageText", lambda: self._edit(message_id, shown, None))
            self._shown, self._last_edit = shown, self.clock()

    async def _later(self, wait: float) -> None:
        self._flush_waiting = True
        try:
            await asyncio.sleep(wait)
        finally:
            self._flush_waiting = False
        await self._show(force=True)

    async def _settle_flush(self) -> None:
        """Drop a trailing edit still waiting; let one already under way finish.

        Cancelling an edit in flight could leave Telegram showing text we do not
        know it shows, and the final edit would then change nothing (a 400).
        """
        task, self._flush = self._flush, None
        if task is None or task.done():
            return
        if self._flush_waiting:
            task.cancel()
        # asyncio.wait, not ``await task``: a cancel of *this* coroutine must propagate.
        await asyncio.wait({task})

    async def done(self, reply_id: str, text: str, images: Sequence[ImageIn] = ()) -> None:
        """Finish reply ``reply_id``: images first, then the text (see the module doc)."""
        self._start(reply_id)
        await self._settle_flush()
        text = text.rstrip()  # as Telegram would show it; compared with what is shown
        async with self._lock:
            if images:
                await self._done_with_images(text, images)
            else:
                await self._done_text(text)
        self._reply_id = ""
        self._text, self._message, self._shown = "", None, ""

    async def error(self, reply_id: str, message: str) -> None:
        """A note from the server (a failed turn, a dropped image), sent as it is."""
        await self._try("sendMessage", lambda: self.bot.send_message(self.chat_id, message))

    async def _formatted(
        self, what: str, send: Callable[[str | None, str | None], Awaitable[T]], text: str | None
    ) -> T | None:
        """``send(text, parse_mode)`` with the text as HTML; plain when Telegram refuses it.

        Like :meth:`_try`, a final failure is logged and gives None.
        """
        if self.html and text and "<" in (markup := to_html(text)):
            try:
                return await self._call(what, lambda: send(markup, ParseMode.HTML))
            except BadRequest as e:
                log.info("telegram %s: markup refused (%s); sending plain text", what, e)
            except Exception:
                log.exception("telegram %s to chat %s failed after retries", what, self.chat_id)
                return None
        return await self._try(what, lambda: send(text, None))

    async def _done_text(self, text: str) -> None:
        chunks = split_text(text)
        if self._message is not None and chunks:
            first, message_id = chunks.pop(0), self._message.message_id
            plain = not self.html or "<" not in to_html(first)
            if first != self._shown or not plain:
                edited = await self._formatted(
                    "editMessageText",
                    lambda t, mode: self._edit(message_id, t or "", mode),
                    first,
                )
                if edited is None:  # the preview could not be finished: send the text anew
                    chunks.insert(0, first)
        await self._send_texts(chunks)

    async def _edit(self, message_id: int, text: str, mode: str | None) -> bool:
        try:
            await self.bot.edit_message_text(
                text, chat_id=self.chat_id, message_id=message_id, parse_mode=mode
            )
        except BadRequest as e:
            if "not modified" not in str(e).lower():
                raise
        return True

    async def _send_texts(self, chunks: Sequence[str]) -> None:
        for chunk in chunks:
            await self._formatted(
                "sendMessage",
                lambda t, mode: self.bot.send_message(self.chat_id, t or "", parse_mode=mode),
                chunk,
            )

    async def _done_with_images(self, text: str, images: Sequence[ImageIn]) -> None:
        if self._message is not None:
            # Images come before text, and a message the user saw is never deleted
            # under their eyes: the streamed preview becomes a pointer to what follows.
            message_id = self._message.message_id
            note = _pointer(len(images), bool(text.strip()))
            if note != self._shown:
                await self._try("editMessageText", lambda: self._edit(message_id, note, None))
        prepared = await asyncio.to_thread(lambda: [prepare_image(i) for i in images])
        caption = text if text.strip() and tg_len(text) <= limits.TELEGRAM_MAX_CAPTION_CHARS else ""
        captioned = await self._send_images(prepared, caption)
        if not captioned:
            await self._send_texts(split_text(text))

    async def _send_images(self, items: Sequence[Outgoing], caption: str) -> bool:
        """Send every image in order; True when ``caption`` rode on the first one."""
        runs: list[list[tuple[int, Outgoing]]] = []
        for i, item in enumerate(items):
            last = runs[-1] if runs else None
            if (
                last
                and last[0][1].kind == item.kind
                and len(last) < limits.TELEGRAM_MAX_MEDIA_GROUP
            ):
                last.append((i, item))
            else:
                runs.append([(i, item)])
        captioned = False
        for run in runs:
            cap = caption if run[0][0] == 0 and caption else None
            ok = await (
                self._send_one(*run[0], cap) if len(run) == 1 else self._send_group(run, cap)
            )
            if ok and cap:
                captioned = True
        return captioned

    async def _send_one(self, index: int, item: Outgoing, caption: str | None) -> bool:
        name = item.filename(index)
        if item.kind == "photo":
            sent = await self._formatted(
                "sendPhoto",
                lambda cap, mode: self.bot.send_photo(
                    self.chat_id, item.data, caption=cap, parse_mode=mode, filename=name
                ),
                caption,
            )
            if sent is not None:
                return True
        # A document is the fallback for a photo Telegram would not take.
        sent = await self._formatted(
            "sendDocument",
            lambda cap, mode: self.bot.send_document(
                self.chat_id, item.data, caption=cap, parse_mode=mode, filename=name
            ),
            caption,
        )
        return sent is not None

    async def _send_group(self, run: Sequence[tuple[int, Outgoing]], caption: str | None) -> bool:
        def media(cap: str | None, mode: str | None) -> list[InputMediaPhoto | InputMediaDocument]:
            items: list[InputMediaPhoto | InputMediaDocument] = []
            for k, (index, item) in enumerate(run):
                kw: dict[str, Any] = {"filename": item.filename(index)}
                if k == 0 and cap:
                    kw |= {"caption": cap, "parse_mode": mode}
                kind = InputMediaPhoto if item.kind == "photo" else InputMediaDocument
                items.append(kind(item.data, **kw))
            return items

        sent = await self._formatted(
            "sendMediaGroup",
            lambda cap, mode: self.bot.send_media_group(self.chat_id, media(cap, mode)),
            caption,
        )
        if sent is not None:
            return True
        # The group failed for good: try the images one by one so none is lost.
        results = [
            await self._send_one(index, item, caption if k == 0 else None)
            for k, (index, item) in enumerate(run)
        ]
        return results[0]

    def close(self) -> None:
        """Stop a pending trailing edit (the gateway is shutting down)."""
        self._cancel_flush()
