"""Running the gateway: against a remote tether server (instance created and
remembered), in process with the real agent, in webhook mode, and as the
``visus telegram`` command."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from tests.telegram.conftest import CHAT, until
from tests.telegram.fake_bot import TOKEN, FakeBotAPI, serve_app, text_update
from tests.tether.doubles import Factory
from tests.timing import within
from visus.errors import ConfigError
from visus.reference.server import serve_in_background
from visus.telegram.bot import Webhook
from visus.telegram.service import BotOptions, serve_bot
from visus.tether.server import create_app


@pytest.fixture
def tether_url(tmp_path: Path) -> Iterator[str]:
    app = create_app(data_dir=tmp_path / "remote", runner_factory=Factory(), token="tok-secret")
    with serve_app(app, lifespan="on") as url:
        yield url


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _run(options: BotOptions, fake: FakeBotAPI, text: str) -> list[str]:
    stop = asyncio.Event()
    task = asyncio.create_task(serve_bot(options, stop=stop))
    try:
        await until(lambda: fake.sent("getMe") or task.done(), what="bot start")
        fake.push(text_update(CHAT, text))
        await until(lambda: f"echo: {text}" in fake.chat_view(CHAT) or task.done())
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
    return fake.chat_view(CHAT)


async def test_remote_server_instance_is_created_once_and_remembered(
    fake: FakeBotAPI, tether_url: str, tmp_path: Path
) -> None:
    options = BotOptions(
        token=TOKEN,
        allowed_chats=(CHAT,),
        server_url=tether_url,
        server_token="tok-secret",
        model="reference",
        data=tmp_path / "data",
        base_url=fake.url,
    )
    assert await _run(options, fake, "ping one") == ["echo: ping one"]
    remembered = json.loads((tmp_path / "data" / "telegram" / "instances.json").read_text())
    iid = remembered[tether_url]
    assert await _run(options, fake, "ping two") == ["echo: ping one", "echo: ping two"]
    async with httpx.AsyncClient(headers={"Authorization": "Bearer tok-secret"}) as c:
        listed = (await c.get(f"{tether_url}/v1/instances")).json()["instances"]
    assert [i["id"] for i in listed] == [iid]  # reused, not created again


async def test_in_process_instance_with_the_real_agent(
    fake: FakeBotAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with serve_in_background() as url:
        monkeypatch.setenv("VISUS_REFERENCE_URL", url)
        options = BotOptions(
            token=TOKEN,
            allowed_chats=(CHAT,),
            model="reference",
            data=tmp_path / "data",
            base_url=fake.url,
        )
        stop = asyncio.Event()
        task = asyncio.create_task(serve_bot(options, stop=stop))
        try:
            await until(lambda: fake.sent("getMe"), what="bot start")
            fake.push(text_update(CHAT, "hello agent"))
            await until(lambda: fake.chat_view(CHAT), timeout=60, what="reply")
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)
    assert fake.chat_view(CHAT)[0].strip()
    # The turn was recorded in the in-process instance's session for this chat.
    assert list((tmp_path / "data").rglob(f"tg-{CHAT}.jsonl"))


async def test_webhook_mode_sets_the_hook_and_checks_the_secret(
    fake: FakeBotAPI, tether_url: str, tmp_path: Path
) -> None:
    port = _free_port()
    hook = Webhook(url=f"http://127.0.0.1:{port}/tg/hook", port=port, secret="s3cret")
    options = BotOptions(
        token=TOKEN,
        allowed_chats=(CHAT,),
        server_url=tether_url,
        server_token="tok-secret",
        model="reference",
        data=tmp_path / "data",
        base_url=fake.url,
        webhook=hook,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(serve_bot(options, stop=stop))
    try:
        await until(lambda: fake.sent("setWebhook"), what="setWebhook")
        (set_hook,) = fake.sent("setWebhook")
        assert set_hook.params["url"] == hook.url
        assert set_hook.params["secret_token"] == "s3cret"
        update = {"update_id": 1, **text_update(CHAT, "via webhook")}
        async with httpx.AsyncClient() as c:
            deadline = time.monotonic() + within(10)
            while True:  # the listener starts right after setWebhook
                try:
                    bad = await c.post(hook.url, json=update, headers=_secret("wrong"))
                    break
                except httpx.ConnectError:
                    assert time.monotonic() < deadline, "the webhook listener did not start"
                    await asyncio.sleep(0.05)
            assert bad.status_code == 403
            ok = await c.post(hook.url, json=update, headers=_secret("s3cret"))
            assert ok.status_code == 200
        await until(lambda: "echo: via webhook" in fake.chat_view(CHAT), what="reply")
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
    assert fake.chat_view(CHAT) == ["echo: via webhook"]
    assert not fake.sent("getUpdates")


def _secret(value: str) -> dict[str, str]:
    return {"X-Telegram-Bot-Api-Secret-Token": value}


async def test_missing_token_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="TELEGRAM_BOT_TOKEN"):
        await serve_bot(BotOptions(token=""), stop=asyncio.Event())


def test_cli_without_a_token_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from visus.cli import app

    monkeypatch.delenv("TELEGRAM_BOT_TOKEN", raising=False)
    monkeypatch.setenv("VISUS_CONFIG", "")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    result = CliRunner().invoke(app, ["telegram", "--allow-chat", "1"])
    assert result.exit_code == 2
    assert "bot token" in result.output


def test_cli_runs_the_gateway_until_interrupted(
    fake: FakeBotAPI, tether_url: str, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "TELEGRAM_BOT_TOKEN": TOKEN,
        "VISUS_CONFIG": "",
        "XDG_CONFIG_HOME": str(tmp_path),
    }
    cmd = [
        sys.executable,
        "-c",
        "from visus.cli import main; main()",
        "telegram",
        "--base-url",
        fake.url,
        "--server",
        tether_url,
        "--server-token",
        "tok-secret",
        "--model",
        "reference",
        "--data",
        str(tmp_path / "data"),
        "--allow-chat",
        str(CHAT),
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not fake.sent("getMe"):
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline, "the command did not start"
            time.sleep(0.05)
        fake.push(text_update(CHAT, "from the cli"))
        while fake.chat_view(CHAT) != ["echo: from the cli"]:
            assert time.monotonic() < deadline, fake.methods()
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out.decode(errors="replace")


async def test_replies_finished_while_the_gateway_was_down_are_delivered_on_restart(
    fake: FakeBotAPI, tether_url: str, tmp_path: Path
) -> None:
    from visus.tether.client import TetherClient

    options = BotOptions(
        token=TOKEN,
        allowed_chats=(CHAT,),
        server_url=tether_url,
        server_token="tok-secret",
        model="reference",
        data=tmp_path / "data",
        base_url=fake.url,
        poll_wait=1.0,
    )
    assert await _run(options, fake, "before") == ["echo: before"]
    iid = json.loads((tmp_path / "data" / "telegram" / "instances.json").read_text())[tether_url]
    async with TetherClient(tether_url, "tok-secret") as tc:
        await tc.send(iid, "while away", session=f"tg-{CHAT}")
        for _ in range(100):
            page = await tc.poll(iid, 0, session=f"tg-{CHAT}", wait=0.2)
            if sum(f.type == "assistant.done" for f in page.frames) == 2:
                break
    stop = asyncio.Event()
    task = asyncio.create_task(serve_bot(options, stop=stop))
    try:
        await until(lambda: "echo: while away" in fake.chat_view(CHAT), what="replayed reply")
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
    # Delivered once, and the reply already delivered before the restart is not repeated.
    assert fake.chat_view(CHAT) == ["echo: before", "echo: while away"]
