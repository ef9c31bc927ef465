"""The python-telegram-bot side: build the Application, run it polling or as a webhook.

Webhook mode needs no extra package: a small Starlette app served by uvicorn takes
Telegram's POSTs (checking the secret header) and queues the updates.

Example:
    >>> app = build_application("123:ABC", base_url="http://127.0.0.1:8081")
    >>> app.bot.base_url
    'http://127.0.0.1:8081/bot123:ABC'
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from dataclasses import dataclass
from typing import Any

from telegram import Update
from telegram.error import InvalidToken, TelegramError
from telegram.ext import Application, ApplicationBuilder

from visus.errors import ConfigError, NetError, VisusError
from visus.telegram.gateway import Gateway
from visus.telegram.retry import with_retry

__all__ = ["Webhook", "build_application", "run_gateway"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Webhook:
    """Webhook mode: Telegram POSTs updates to ``url``; we listen on ``listen:port``.

    ``secret`` is checked against ``X-Telegram-Bot-Api-Secret-Token``.
    """

    url: str
    listen: str = "127.0.0.1"
    port: int = 8443
    secret: str | None = None


def build_application(
    token: str, *, base_url: str | None = None, webhook: bool = False
) -> Application[Any, Any, Any, Any, Any, Any]:
    """A python-telegram-bot Application for ``token``.

    ``base_url`` points it at another Bot API server (a local one, or a fake in
    tests): methods go to ``{base_url}/bot<token>/`` and files to
    ``{base_url}/file/bot<token>/``.
    """
    builder = ApplicationBuilder().token(token)
    if base_url:
        root = base_url.rstrip("/")
        builder = builder.base_url(f"{root}/bot").base_file_url(f"{root}/file/bot")
    if webhook:
        builder = builder.updater(None)
    return builder.build()


async def run_gateway(
    application: Application[Any, Any, Any, Any, Any, Any],
    gateway: Gateway,
    *,
    stop: asyncio.Event,
    webhook: Webhook | None = None,
    poll_interval: float = 0.0,
    poll_timeout: int = 10,
) -> None:
    """Run the bot until ``stop`` is set: long polling by default, else the webhook.

    A Bot API that cannot be reached or refuses the token at start raises
    :class:`~visus.errors.NetError` or :class:`~visus.errors.ConfigError`; once running,
    a failed poll is logged in one line and retried.
    """
    gateway.install(application)
    async with contextlib.AsyncExitStack() as stack:
        try:
            await stack.enter_async_context(application)
        except TelegramError as e:
            # A failed initialize leaves the bot's HTTP clients open (the Application
            # shuts down only what initialized); close them before saying why.
            for request in getattr(application.bot, "_request", ()):
                await request.shutdown()
            raise _startup_error(application, e) from e
        await gateway.start()
        await application.start()
        try:
            if webhook is None:
                assert application.updater is not None
                await application.updater.start_polling(
                    poll_interval=poll_interval,
                    timeout=poll_timeout,
                    allowed_updates=[Update.MESSAGE],
                    error_callback=_poll_failed,
                )
                await stop.wait()
                await application.updater.stop()
            else:
                await _serve_webhook(application, webhook, stop)
        finally:
            await application.stop()
            await gateway.aclose()


def _poll_failed(error: TelegramError) -> None:
    # python-telegram-bot retries with a back-off; its default logs a full traceback for
    # every attempt, which buries the log while the network is down.
    log.warning("telegram: polling for updates failed (%s); retrying", error)


def _startup_error(
    application: Application[Any, Any, Any, Any, Any, Any], error: TelegramError
) -> VisusError:
    bot = application.bot
    where = bot.base_url.replace(bot.token, "<token>")
    if isinstance(error, InvalidToken):
        # Not ``error`` itself: python-telegram-bot's message repeats the token.
        return ConfigError(
            f"telegram.bot_token: the Bot API at {where} refused the token; "
            "check TELEGRAM_BOT_TOKEN, [telegram] bot_token or --token"
        )
    return NetError(f"telegram: could not reach the Bot API at {where}: {error}")


async def _serve_webhook(
    application: Application[Any, Any, Any, Any, Any, Any], hook: Webhook, stop: asyncio.Event
) -> None:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    path = "/" + hook.url.split("://", 1)[-1].partition("/")[2]

    async def receive(request: Request) -> Response:
        given = request.headers.get("x-telegram-bot-api-secret-token", "")
        if hook.secret and not hmac.compare_digest(given.encode(), hook.secret.encode()):
            return Response(status_code=403)
        try:
            update = Update.de_json(await request.json(), application.bot)
        except Exception:
            return Response(status_code=400)
        await application.update_queue.put(update)
        return Response(status_code=200)

    web = Starlette(routes=[Route(path, receive, methods=["POST"])])
    server = uvicorn.Server(
        uvicorn.Config(web, host=hook.listen, port=hook.port, log_level="warning", lifespan="off")
    )
    await with_retry(
        lambda: application.bot.set_webhook(
            hook.url, secret_token=hook.secret, allowed_updates=[Update.MESSAGE]
        ),
        what="setWebhook",
    )
    serving = asyncio.create_task(server.serve())
    try:
        await stop.wait()
    finally:
        server.should_exit = True
        await serving
