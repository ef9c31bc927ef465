"""The Bot API side failing: at start (unreachable, wrong token) a clear VisusError;
while polling, one log line per failed attempt instead of a traceback."""

from __future__ import annotations

import asyncio
import logging
import socket

import pytest
from fastapi import FastAPI

from tests.telegram.conftest import bridge, until
from tests.telegram.fake_bot import TOKEN, FakeBotAPI
from visus.errors import ConfigError, NetError
from visus.telegram.bot import build_application, run_gateway
from visus.telegram.gateway import Gateway
from visus.tether.client import TetherClient


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _gateway() -> Gateway:
    return Gateway(TetherClient("http://127.0.0.1:9"), "i-none", allowed_chats=(1,))


async def test_an_unreachable_bot_api_is_a_net_error_without_the_token() -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    application = build_application(TOKEN, base_url=url)
    with pytest.raises(NetError) as info:
        await run_gateway(application, _gateway(), stop=asyncio.Event())
    message = str(info.value)
    assert f"could not reach the Bot API at {url}/bot<token>" in message
    assert TOKEN not in message


async def test_a_refused_token_is_a_config_error(fake: FakeBotAPI) -> None:
    application = build_application("999:wrong", base_url=fake.url)
    with pytest.raises(ConfigError) as info:
        await run_gateway(application, _gateway(), stop=asyncio.Event())
    assert "refused the token" in str(info.value)
    assert "999:wrong" not in str(info.value)


async def test_a_failed_poll_is_one_warning_line(
    fake: FakeBotAPI, scripted_app: FastAPI, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        async with bridge(fake, scripted_app):
            fake.fail("getUpdates", 502, times=2)
            await until(
                lambda: not fake.failures.get("getUpdates"), what="the failed polls", timeout=30
            )
            await until(
                lambda: any("polling for updates" in r.getMessage() for r in caplog.records),
                what="the warning",
            )
    polls = [r for r in caplog.records if "polling for updates" in r.getMessage()]
    assert polls, [r.getMessage() for r in caplog.records]
    assert all(r.exc_info is None for r in polls)
    assert all(r.name == "visus.telegram.bot" for r in polls)
