"""The Telegram gateway: photos in, images out, bridged to a tether instance.

:mod:`.ingress` (allowlist, photos, image documents, albums, size checks before
download), :mod:`.egress` (streamed edits, images first then text, fitting to
Telegram's photo bounds), :mod:`.split` (4096-character messages that keep words
and markdown whole), :mod:`.markdown` (Markdown as Telegram HTML), :mod:`.retry`
(429 and network errors), :mod:`.gateway` (the bridge and how it runs: long
polling or a webhook, in :mod:`.bot`) and :mod:`.service` (what ``visus telegram`` runs).

Needs ``pip install -e '.[telegram]'`` in the visus checkout (python-telegram-bot).

Example:
    >>> from visus.telegram import split_text
    >>> split_text("short enough")
    ['short enough']
"""

from __future__ import annotations

try:
    import telegram as _telegram  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the install
    raise ImportError(
        "the Telegram gateway needs python-telegram-bot: "
        "pip install -e '.[telegram]' in the visus checkout"
    ) from e

from visus.telegram.bot import Webhook, build_application, run_gateway
from visus.telegram.egress import ChatReply, Outgoing, prepare_image
from visus.telegram.gateway import Gateway, chat_of_session, session_of_chat
from visus.telegram.ingress import AlbumCollector, FileRef, Refusal, file_ref, is_allowed
from visus.telegram.markdown import to_html
from visus.telegram.retry import with_retry
from visus.telegram.split import split_text, tg_len

__all__ = [
    "AlbumCollector",
    "ChatReply",
    "FileRef",
    "Gateway",
    "Outgoing",
    "Refusal",
    "Webhook",
    "build_application",
    "chat_of_session",
    "file_ref",
    "is_allowed",
    "prepare_image",
    "run_gateway",
    "session_of_chat",
    "split_text",
    "tg_len",
    "to_html",
    "with_retry",
]
