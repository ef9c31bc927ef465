"""``visus telegram``: the Telegram gateway (long polling by default, or a webhook).

Example:
    $ TELEGRAM_BOT_TOKEN=123:ABC visus telegram --allow-chat 4242
    $ visus telegram --server http://127.0.0.1:8750 --server-token T --allow-user @ann
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from pydantic import SecretStr

__all__ = ["register"]


#: Said at start when no chat or user may talk to the agent yet.
_NOBODY_ALLOWED = (
    "visus telegram: no chat or user is allowed yet; everyone gets a refusal "
    "naming their ids (add them with --allow-chat / --allow-user or "
    "[telegram] allowed_chats / allowed_users)."
)

TokenOpt = Annotated[
    str | None,
    typer.Option(help="Bot token (default: TELEGRAM_BOT_TOKEN or config telegram.bot_token)."),
]
ServerOpt = Annotated[
    str | None,
    typer.Option(
        help="URL of a visus serve to talk to (default: config telegram.server_url; "
        "none: an instance in this process)."
    ),
]
ServerTokenOpt = Annotated[
    str | None, typer.Option(help="Bearer token of that server (config telegram.server_token).")
]
InstanceOpt = Annotated[
    str | None, typer.Option(help="Instance id on that server (default: one of our own).")
]
AllowChatOpt = Annotated[
    list[int] | None,
    typer.Option(
        metavar="CHAT_ID",
        help="Chat id allowed to talk to the agent (repeatable; adds to config).",
    ),
]
AllowUserOpt = Annotated[
    list[str] | None,
    typer.Option(metavar="USER", help="User id or @username allowed (repeatable; adds to config)."),
]


def telegram_command(
    token: TokenOpt = None,
    server: ServerOpt = None,
    server_token: ServerTokenOpt = None,
    instance: InstanceOpt = None,
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="Model of a new instance.")
    ] = None,
    data: Annotated[Path | None, typer.Option(help="Data folder (env VISUS_DATA).")] = None,
    allow_chat: AllowChatOpt = None,
    allow_user: AllowUserOpt = None,
    base_url: Annotated[
        str | None,
        typer.Option(help="Bot API server root (default https://api.telegram.org)."),
    ] = None,
    webhook_url: Annotated[
        str | None, typer.Option(help="Public HTTPS URL for webhook mode (default: polling).")
    ] = None,
    listen: Annotated[str, typer.Option(help="Webhook listen address.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Webhook listen port.")] = 8443,
    webhook_secret: Annotated[
        str | None, typer.Option(help="Secret Telegram sends with each webhook call.")
    ] = None,
    config: Annotated[Path | None, typer.Option(help="visus.toml to read.")] = None,
) -> None:
    """Bridge Telegram chats to a visus agent: photos in, images out."""
    import asyncio
    import logging

    from visus.config import load_config
    from visus.errors import VisusError
    from visus.telegram.bot import Webhook
    from visus.telegram.service import BotOptions, serve_bot

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        cfg = load_config(config).telegram
        options = BotOptions(
            token=token or _secret(cfg.bot_token) or "",
            allowed_chats=(*cfg.allowed_chats, *(allow_chat or ())),
            allowed_users=(*cfg.allowed_users, *_users(allow_user or ())),
            server_url=server or cfg.server_url,
            server_token=server_token or _secret(cfg.server_token),
            instance=instance,
            model=model,
            data=data,
            base_url=base_url,
            webhook=Webhook(webhook_url, listen, port, webhook_secret) if webhook_url else None,
        )
        if options.token and not options.allowed_chats and not options.allowed_users:
            # (Without a token serve_bot stops at once: that error is the one line to read.)
            typer.echo(_NOBODY_ALLOWED, err=True)
        asyncio.run(serve_bot(options))
    except VisusError as e:
        typer.echo(f"visus: {e}", err=True)
        raise typer.Exit(2) from e


def _secret(value: SecretStr | None) -> str | None:
    return value.get_secret_value() if value else None


def _users(given: Iterable[str]) -> list[int | str]:
    """``--allow-user`` values: a numeric id as a number, a @username as it is.

    Example:
        >>> _users(["4242", "-7", "@ann"])
        [4242, -7, '@ann']
    """
    return [int(u) if u.lstrip("-").isdigit() else u for u in given]


def register(app: typer.Typer) -> None:
    from visus.cli._help import SERVE

    app.command("telegram", rich_help_panel=SERVE)(telegram_command)
