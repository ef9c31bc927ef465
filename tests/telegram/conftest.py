"""The gateway under test: a fake Bot API on loopback, a tether server in process."""

from __future__ import annotations

import asyncio
import io
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from PIL import Image

from tests.telegram.fake_bot import TOKEN, FakeBotAPI, serve_fake_bot
from tests.timing import within
from visus.telegram.bot import build_application, run_gateway
from visus.telegram.gateway import Gateway
from visus.tether.client import TetherClient
from visus.tether.runner import ImageIn, InstanceConfig, TurnOutput
from visus.tether.server import create_app

CHAT = 4242


def png(size: tuple[int, int] = (64, 48), color: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


def jpeg(size: tuple[int, int], color: tuple[int, int, int] = (10, 120, 200)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


@dataclass
class Turn:
    session: str
    text: str
    images: tuple[ImageIn, ...]
    user: Mapping[str, Any] | None


@dataclass
class Script:
    """What the scripted agent answers: deltas (with a pause between), then the end."""

    deltas: Sequence[str] = ()
    pause: float | Sequence[float] = 0.0  # after each delta (one value, or one per delta)
    text: str | None = None  # None: the deltas joined
    images: tuple[ImageIn, ...] = ()
    turns: list[Turn] = field(default_factory=list)


class ScriptedRunner:
    def __init__(self, script: Script) -> None:
        self.script = script

    async def run_turn(
        self,
        *,
        session: str,
        text: str,
        images: Sequence[ImageIn],
        user: Mapping[str, Any] | None,
        emit_delta: Callable[[str], Awaitable[None]],
    ) -> TurnOutput:
        s = self.script
        s.turns.append(Turn(session, text, tuple(images), user))
        for i, d in enumerate(s.deltas):
            await emit_delta(d)
            await asyncio.sleep(s.pause if isinstance(s.pause, float) else s.pause[i])
        return TurnOutput("".join(s.deltas) if s.text is None else s.text, s.images)


async def until(cond: Callable[[], object], timeout: float = 20.0, what: str = "") -> None:
    """Wait for ``cond``: ``timeout`` on a quiet machine, more on a loaded one."""
    deadline = time.monotonic() + within(timeout)
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or cond}")
        await asyncio.sleep(0.02)


@dataclass
class Bridge:
    fake: FakeBotAPI
    gateway: Gateway
    app: FastAPI
    instance: str


@pytest.fixture
def fake() -> Iterator[FakeBotAPI]:
    with serve_fake_bot() as f:
        yield f


@asynccontextmanager
async def bridge(
    fake: FakeBotAPI,
    app: FastAPI,
    *,
    instance: str | None = None,
    allowed_chats: Sequence[int] = (CHAT,),
    allowed_users: Sequence[int | str] = (),
    edit_interval: float = 0.3,
    album_window: float = 0.3,
    typing_interval: float = 4.0,
) -> AsyncIterator[Bridge]:
    """Run the gateway against ``fake`` and the tether ``app`` until the block ends."""
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        token = getattr(app.state, "token", None)  # visus serve's app makes one
        async with TetherClient("http://127.0.0.1", token, transport=transport) as tether:
            if instance is None:
                instance = str((await tether.create_instance("scripted"))["id"])
            gw = Gateway(
                tether,
                instance,
                allowed_chats=allowed_chats,
                allowed_users=allowed_users,
                album_window=album_window,
                edit_interval=edit_interval,
                retries=3,
                poll_wait=1.0,
                typing_interval=typing_interval,
            )
            application = build_application(TOKEN, base_url=fake.url)
            stop = asyncio.Event()
            task = asyncio.create_task(run_gateway(application, gw, stop=stop, poll_timeout=1))
            try:
                await until(lambda: gw._pump is not None, what="gateway start")
                yield Bridge(fake, gw, app, instance)
            finally:
                stop.set()
                await asyncio.wait_for(task, 30)


@pytest.fixture
def script() -> Script:
    return Script(deltas=("Hello ", "from ", "the agent."))


@pytest.fixture
def scripted_app(tmp_path: Path, script: Script) -> FastAPI:
    def factory(config: InstanceConfig) -> ScriptedRunner:
        return ScriptedRunner(script)

    return create_app(data_dir=tmp_path / "tether", runner_factory=factory)


@pytest.fixture(autouse=True)
def _ptb_timedelta(monkeypatch: pytest.MonkeyPatch) -> None:
    # python-telegram-bot 22 warns when RetryAfter is built unless this opt-in is set
    # (visus telegram sets it too); warnings are errors here.
    monkeypatch.setenv("PTB_TIMEDELTA", "true")
