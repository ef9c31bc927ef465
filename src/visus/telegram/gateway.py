"""The gateway: Telegram chats bridged to one tether instance.

Each chat is its own tether session (``tg-<chat_id>``). Incoming messages pass the
allowlist and the size checks (:mod:`.ingress`) and are sent with
:meth:`~visus.tether.TetherClient.send`; one long-poll loop reads the instance's
frames and hands each ``tg-`` session's frames to that chat's
:class:`~visus.telegram.egress.ChatReply`, through a queue per chat so a slow
upload in one chat never holds up another.

Example:
    >>> async def main():                                            # doctest: +SKIP
    ...     async with TetherClient("http://127.0.0.1:8750", "tok") as tether:
    ...         gw = Gateway(tether, "i-0123", allowed_chats=(1234,))
    ...         app = build_application("123:ABC")     # visus.telegram.bot
    ...         await run_gateway(app, gw, stop=asyncio.Event())
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from telegram import Bot, Message, Update
from telegram.constants import ChatAction
from telegram.ext import Application, ContextTypes, MessageHandler, filters

from visus import limits
from visus.errors import VisusError
from visus.paths import private_dir
from visus.telegram.egress import ChatReply
from visus.telegram.ingress import (
    AlbumCollector,
    Refusal,
    check_refs,
    download,
    file_ref,
    is_allowed,
    message_text,
)
from visus.telegram.retry import with_retry
from visus.tether.client import TetherClient
from visus.tether.frames import AssistantDelta, AssistantDone, ErrorPayload, Frame, padded
from visus.tether.runner import ImageIn

__all__ = ["SESSION_PREFIX", "Gateway", "chat_of_session", "session_of_chat"]

log = logging.getLogger(__name__)

SESSION_PREFIX = "tg-"
_SESSION = re.compile(r"tg-(-?\d+)")

REFUSED = (
    "Sorry, this bot only talks to people it has been set up for. "
    "Ask its owner to allow chat {chat} (or user {user})."
)
UNSUPPORTED = "Sorry, I can read text, photos and image files; this kind of message I cannot."
GREETING = (
    "Hello! Send me text, a photo, an image file or an album of up to {n} photos, and "
    "I will look at it. Images I make come back as photos."
)
_GREETING_COMMANDS = frozenset({"/start", "/help"})


def session_of_chat(chat_id: int) -> str:
    """The tether session of a chat.

    Example:
        >>> session_of_chat(-100123)
        'tg--100123'
    """
    return f"{SESSION_PREFIX}{chat_id}"


def chat_of_session(session: str) -> int | None:
    """The chat of a gateway session, or None for another client's session.

    Example:
        >>> chat_of_session("tg--100123"), chat_of_session("web-1")
        (-100123, None)
    """
    m = _SESSION.fullmatch(session)
    return int(m.group(1)) if m else None


def _images(done: AssistantDone) -> list[ImageIn]:
    return [ImageIn(i.media_type, base64.b64decode(padded(i.data))) for i in done.images]


class _Chat:
    """One chat's egress queue, the worker draining it in order, and its typing status."""

    def __init__(self, reply: ChatReply, typing_interval: float) -> None:
        self.reply = reply
        self.typing_interval = typing_interval
        self.finished = 0  # replies ended (assistant.done, or a failed turn's note)
        self.pending = 0  # messages sent on whose reply has not ended
        self.queue: asyncio.Queue[Frame] = asyncio.Queue()
        self.task = asyncio.create_task(self._run())
        self.typing: asyncio.Task[None] | None = None

    def expect_reply(self) -> None:
        """A message went to the agent: show "typing…" until its reply starts."""
        self.pending += 1
        if self.typing is None or self.typing.done():
            self.typing = asyncio.create_task(self._type())

    async def _type(self) -> None:
        # Telegram shows a chat action for about 5 s: renew it while the agent works,
        # until the streamed preview appears or the reply ends (bounded in any case).
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limits.TELEGRAM_TYPING_MAX_SECONDS
        while self.pending > 0 and not self.reply.streaming and loop.time() < deadline:
            with contextlib.suppress(Exception):  # a courtesy; never worth an error
                await self.reply.bot.send_chat_action(self.reply.chat_id, ChatAction.TYPING)
            await asyncio.sleep(self.typing_interval)

    def _ended(self) -> None:
        self.finished += 1
        self.pending = max(0, self.pending - 1)

    async def _run(self) -> None:
        while True:
            frame = await self.queue.get()
            try:
                p = frame.payload
                if isinstance(p, AssistantDelta):
                    await self.reply.delta(frame.msg_id, p.text)
                elif isinstance(p, AssistantDone):
                    await self.reply.done(frame.msg_id, p.text, _images(p))
                    self._ended()
                elif isinstance(p, ErrorPayload):
                    await self.reply.error(frame.msg_id, _error_text(p))
                    if p.code == "turn_failed":
                        self._ended()
            except Exception:  # one bad frame must not stop this chat's replies
                log.exception("telegram: egress of frame %s failed", frame.seq)
            finally:
                self.queue.task_done()


def _error_text(p: ErrorPayload) -> str:
    if p.code == "turn_failed":
        return f"Sorry, something went wrong while answering: {p.message}"
    return f"Note: {p.message}"


class Gateway:
    """Bridges the chats of one bot to one tether instance (see the module doc).

    ``allowed_chats`` / ``allowed_users`` (ids, or ``@usernames``) form the
    allowlist; everyone else gets a polite refusal and the attempt is logged.
    """

    def __init__(
        self,
        tether: TetherClient,
        instance: str,
        *,
        allowed_chats: Iterable[int] = (),
        allowed_users: Iterable[int | str] = (),
        album_window: float = limits.TELEGRAM_ALBUM_WINDOW_SECONDS,
        edit_interval: float = limits.TELEGRAM_EDIT_INTERVAL_SECONDS,
        retries: int = limits.TELEGRAM_MAX_RETRIES,
        poll_wait: float = limits.TETHER_POLL_MAX_WAIT_SECONDS / 2,
        cursor_file: Path | None = None,
        typing_interval: float = limits.TELEGRAM_TYPING_INTERVAL_SECONDS,
    ) -> None:
        self.tether = tether
        self.instance = instance
        self.allowed_chats = tuple(allowed_chats)
        self.allowed_users = tuple(allowed_users)
        self.edit_interval = edit_interval
        self.retries = retries
        self.poll_wait = poll_wait
        self.cursor_file = cursor_file
        self.typing_interval = typing_interval
        self.albums = AlbumCollector(self._on_album, window=album_window)
        self._bot: Bot | None = None
        self._chats: dict[int, _Chat] = {}
        self._pump: asyncio.Task[None] | None = None

    @property
    def bot(self) -> Bot:
        if self._bot is None:
            raise RuntimeError("Gateway.install(application) was not called")
        return self._bot

    def install(self, application: Application[Any, Any, Any, Any, Any, Any]) -> None:
        """Register the message handler on ``application`` and use its bot for replies."""
        self._bot = application.bot
        application.add_handler(MessageHandler(filters.UpdateType.MESSAGE, self._on_message))

    # --- lifecycle ------------------------------------------------------------------

    async def start(self) -> None:
        """Start relaying the instance's frames.

        From now on; or, with a ``cursor_file`` saved by an earlier run against the
        same instance, from where that run stopped, so replies finished while the
        gateway was down still reach their chats.
        """
        info = await self.tether.get_instance(self.instance)
        last = int(info["last_seq"])
        saved = self._saved_cursor()
        after = saved if saved is not None and saved <= last else last
        if after < last:
            log.info("telegram: resuming the relay after seq %s (now at %s)", after, last)
        self._pump = asyncio.create_task(self._relay(after))

    def _saved_cursor(self) -> int | None:
        if self.cursor_file is None:
            return None
        try:
            saved = json.loads(self.cursor_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(saved, dict) or saved.get("instance") != self.instance:
            return None
        seq = saved.get("next_seq")
        return seq if isinstance(seq, int) and not isinstance(seq, bool) and seq >= 0 else None

    def _save_cursor(self, next_seq: int) -> None:
        if self.cursor_file is None:
            return
        try:
            private_dir(self.cursor_file.parent)
            tmp = self.cursor_file.with_suffix(".tmp")
            tmp.write_text(json.dumps({"instance": self.instance, "next_seq": next_seq}))
            os.replace(tmp, self.cursor_file)
        except OSError as e:
            log.warning("telegram: could not save the relay cursor: %s", e)

    async def aclose(self) -> None:
        """Stop relaying; deliver what is already queued (bounded), then stop the chats."""
        if self._pump is not None:
            self._pump.cancel()
            await asyncio.wait({self._pump})
        await self.albums.aclose()
        try:
            await self.drain(limits.TELEGRAM_SHUTDOWN_DRAIN_SECONDS)
        except TimeoutError:
            log.warning("telegram: stopping with replies still queued")
        for chat in self._chats.values():
            chat.reply.close()
            chat.task.cancel()
            if chat.typing is not None:
                chat.typing.cancel()
        await asyncio.gather(*(c.task for c in self._chats.values()), return_exceptions=True)
        self._chats.clear()

    # --- ingress ----------------------------------------------------------------------

    async def _on_message(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.message
        if message is None:
            return
        user = message.from_user
        user_id = user.id if user else None
        username = user.username if user else None
        if not is_allowed(
            message.chat_id,
            user_id,
            username,
            allowed_chats=self.allowed_chats,
            allowed_users=self.allowed_users,
        ):
            log.warning(
                "telegram: refused a message from chat %s, user %s (@%s): not on the allowlist",
                message.chat_id,
                user_id,
                username,
            )
            await self._say(message.chat_id, REFUSED.format(chat=message.chat_id, user=user_id))
            return
        if message.media_group_id is not None:
            self.albums.add(message)
            return
        if (message.text or "").split("@", 1)[0].strip() in _GREETING_COMMANDS:
            # Telegram clients send /start first; it is not a question for the agent.
            n = limits.TETHER_MAX_IMAGES_PER_MESSAGE
            await self._say(message.chat_id, GREETING.format(n=n))
            return
        await self.forward([message])

    async def _on_album(self, messages: list[Message], count: int) -> None:
        if count > len(messages):  # parts past what we keep: the refusal still counts them
            await self._say(
                messages[0].chat_id,
                f"Sorry, that album has {count} images; I take at most "
                f"{limits.TETHER_MAX_IMAGES_PER_MESSAGE} images per message. Please send fewer.",
            )
            return
        await self.forward(messages)

    async def forward(self, messages: Sequence[Message]) -> None:
        """Check, download and send one message (or album) to its chat's session."""
        first = messages[0]
        chat_id = first.chat_id
        refs = [r for r in map(file_ref, messages) if r is not None]
        text = message_text(messages)
        # A file we cannot take (a PDF, a video) is refused even with a caption: the
        # caption alone would reach the agent as if nothing had been attached.
        dropped = any(m.effective_attachment is not None and file_ref(m) is None for m in messages)
        if dropped or (not refs and not text):
            await self._say(chat_id, UNSUPPORTED)
            return
        try:
            check_refs(refs)  # before a single byte is downloaded
            images = [await download(self.bot, r, retries=self.retries) for r in refs]
        except Refusal as e:
            await self._say(chat_id, str(e))
            return
        except Exception as e:
            log.exception("telegram: downloading the images of chat %s failed", chat_id)
            await self._say(chat_id, f"Sorry, I could not fetch that image ({type(e).__name__}).")
            return
        user = first.from_user
        who: dict[str, Any] | None = None
        if user is not None:
            who = {"id": str(user.id), "name": user.full_name}
            if user.username:
                who["username"] = user.username
        chat = self._chat(chat_id)  # its worker exists before the first frame comes back
        try:
            await self.tether.send(
                self.instance, text, images, session=session_of_chat(chat_id), user=who
            )
        except VisusError as e:
            log.warning("telegram: tether refused the message of chat %s: %s", chat_id, e)
            await self._say(chat_id, f"Sorry, the agent could not take that message: {e}")
            return
        chat.expect_reply()

    async def _say(self, chat_id: int, text: str) -> None:
        try:
            await with_retry(
                lambda: self.bot.send_message(chat_id, text),
                what="sendMessage",
                retries=self.retries,
            )
        except Exception:
            log.exception("telegram: replying to chat %s failed", chat_id)

    # --- egress -----------------------------------------------------------------------

    def _chat(self, chat_id: int) -> _Chat:
        chat = self._chats.get(chat_id)
        if chat is None:
            reply = ChatReply(
                self.bot, chat_id, edit_interval=self.edit_interval, retries=self.retries
            )
            chat = self._chats[chat_id] = _Chat(reply, self.typing_interval)
        return chat

    async def _relay(self, after: int) -> None:
        while True:
            try:
                page = await self.tether.poll(self.instance, after, wait=self.poll_wait)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("telegram: polling tether failed (%s); retrying", e)
                await asyncio.sleep(1.0)
                continue
            if page.gap:
                log.warning("telegram: frames after seq %s were dropped by the ring", after)
            for frame in page.frames:
                chat_id = chat_of_session(frame.session)
                if chat_id is not None and frame.type != "user.message":
                    self._chat(chat_id).queue.put_nowait(frame)
            if page.next_seq != after:
                self._save_cursor(page.next_seq)
            after = page.next_seq

    def finished(self, chat_id: int) -> int:
        """Replies to ``chat_id`` delivered so far (each ``assistant.done`` or failed turn)."""
        chat = self._chats.get(chat_id)
        return chat.finished if chat else 0

    async def drain(self, timeout: float = 30.0) -> None:
        """Wait until every chat's egress queue is empty (tests, orderly shutdown)."""
        async with asyncio.timeout(timeout):
            for chat in list(self._chats.values()):
                await chat.queue.join()
