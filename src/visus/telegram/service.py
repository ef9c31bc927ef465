"""``visus telegram`` as a library call: pick the tether instance, run the bot.

The gateway talks to a running ``visus serve`` (``server_url`` and its token), or,
with no server configured, to the main app started in this process (through
``httpx.ASGITransport``: no port is opened for it). Against a remote server the
gateway uses ``instance`` when given, else the instance it created there before
(remembered in ``<data>/telegram/instances.json``), else a new one.

Example:
    >>> import asyncio
    >>> asyncio.run(serve_bot(BotOptions(token="123:ABC", allowed_chats=(42,))))  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from visus import limits
from visus.errors import ConfigError, NotFoundError
from visus.paths import data_dir, private_dir
from visus.telegram.bot import Webhook, build_application, run_gateway
from visus.telegram.gateway import Gateway
from visus.tether.client import TetherClient

__all__ = ["BotOptions", "serve_bot", "tether_for"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BotOptions:
    """Everything ``visus telegram`` needs; flags and the config file fill it in."""

    token: str
    allowed_chats: tuple[int, ...] = ()
    allowed_users: tuple[int | str, ...] = ()
    server_url: str | None = None
    server_token: str | None = None
    instance: str | None = None
    model: str | None = None
    data: Path | None = None
    base_url: str | None = None
    webhook: Webhook | None = None
    #: Longest a tether long poll is held open (seconds).
    poll_wait: float = limits.TETHER_POLL_MAX_WAIT_SECONDS / 2


def _remembered(data: Path, server_url: str) -> str | None:
    path = data / "telegram" / "instances.json"
    try:
        value = json.loads(path.read_text(encoding="utf-8")).get(server_url)
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def _remember(data: Path, server_url: str, instance: str) -> None:
    path = data / "telegram" / "instances.json"
    private_dir(path.parent)
    try:
        known = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        known = {}
    known[server_url] = instance
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(known, indent=2), encoding="utf-8")
    os.replace(tmp, path)


@asynccontextmanager
async def tether_for(options: BotOptions) -> AsyncIterator[tuple[TetherClient, str]]:
    """A tether client and the instance id the gateway should use (see module doc)."""
    if options.server_url:
        async with TetherClient(options.server_url, options.server_token) as client:
            yield client, await _pick_instance(client, options)
        return
    from visus.app import create_main_app
    from visus.tether.guard import IN_PROCESS_HOST

    app = create_main_app(data=options.data, model=options.model, web=False, mcp=False)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        base = f"http://{IN_PROCESS_HOST}"
        async with TetherClient(base, app.state.token, transport=transport) as client:
            yield client, str(app.state.default_instance)


async def _pick_instance(client: TetherClient, options: BotOptions) -> str:
    assert options.server_url is not None
    if options.instance:
        await client.get_instance(options.instance)  # NotFoundError names it
        return options.instance
    folder = data_dir(options.data)
    known = _remembered(folder, options.server_url)
    if known:
        with contextlib.suppress(NotFoundError):
            await client.get_instance(known)
            return known
    if not options.model:
        from visus.config import load_config

        model = load_config().default_model
    else:
        model = options.model
    created = str((await client.create_instance(model))["id"])
    _remember(folder, options.server_url, created)
    log.info("telegram: created instance %s (model %s) on %s", created, model, options.server_url)
    return created


async def serve_bot(options: BotOptions, *, stop: asyncio.Event | None = None) -> None:
    """Run the gateway until ``stop`` is set (by default: until SIGINT or SIGTERM)."""
    if not options.token:
        raise ConfigError(
            "telegram.bot_token: no bot token; set TELEGRAM_BOT_TOKEN, [telegram] bot_token "
            "in visus.toml, or pass --token"
        )
    # Opt in to python-telegram-bot's timedelta periods (its int form warns; we read both).
    os.environ.setdefault("PTB_TIMEDELTA", "true")
    if stop is None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
    async with tether_for(options) as (client, instance):
        # A remote server keeps its frames across our restarts: resume where we stopped.
        cursor = data_dir(options.data) / "telegram" / "cursor.json"
        gateway = Gateway(
            client,
            instance,
            allowed_chats=options.allowed_chats,
            allowed_users=options.allowed_users,
            poll_wait=options.poll_wait,
            cursor_file=cursor if options.server_url else None,
        )
        application = build_application(
            options.token, base_url=options.base_url, webhook=options.webhook is not None
        )
        await run_gateway(application, gateway, stop=stop, webhook=options.webhook)
