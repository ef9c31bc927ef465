"""Test doubles for tether: a deterministic runner and a loopback uvicorn server."""

from __future__ import annotations

import asyncio
import contextlib
import io
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn
from PIL import Image

from tests.timing import within
from visus.tether.runner import ImageIn, InstanceConfig, TurnOutput


def png(color: tuple[int, int, int], size: tuple[int, int] = (64, 48)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


@dataclass
class Call:
    session: str
    text: str
    images: tuple[ImageIn, ...]
    user: Mapping[str, Any] | None


@dataclass
class EchoRunner:
    """Streams the words of the text as deltas, answers ``echo: <text>`` and sends
    back the images it got (plus ``extra`` images when set)."""

    config: InstanceConfig
    calls: list[Call] = field(default_factory=list)
    extra: tuple[ImageIn, ...] = ()
    delay: float = 0.0
    closed: bool = False
    gate: asyncio.Event | None = None  # turns wait here until the test sets it

    async def run_turn(
        self,
        *,
        session: str,
        text: str,
        images: Sequence[ImageIn],
        user: Mapping[str, Any] | None,
        emit_delta: Callable[[str], Awaitable[None]],
    ) -> TurnOutput:
        self.calls.append(Call(session, text, tuple(images), user))
        if self.gate is not None:
            await self.gate.wait()
        if text == "boom":
            raise RuntimeError("the runner broke")
        for word in text.split():
            await emit_delta(word + " ")
            if self.delay:
                await asyncio.sleep(self.delay)
        return TurnOutput(f"echo: {text}", tuple(images) + self.extra)

    async def aclose(self) -> None:
        self.closed = True


class Factory:
    """A runner factory that remembers the runners it built, by instance id."""

    def __init__(self, **kw: Any) -> None:
        self.kw = kw
        self.runners: dict[str, EchoRunner] = {}

    def __call__(self, config: InstanceConfig) -> EchoRunner:
        if config.model == "no-such-model":
            from visus.errors import ConfigError

            raise ConfigError("model: 'no-such-model' is not in the catalog")
        runner = EchoRunner(config, **self.kw)
        self.runners[config.id] = runner
        return runner


@contextmanager
def live_server(app: Any) -> Iterator[str]:
    """Run ``app`` with uvicorn on 127.0.0.1 and a free port, in a thread."""
    config = uvicorn.Config(app, host="127.0.0.1", log_level="warning", lifespan="on")
    with serving(uvicorn.Server(config)) as (_, url):
        # Build the app's routes now, from this one thread. FastAPI (0.165) builds an
        # included router's routes lazily on the first request that reaches it, and apps
        # that share visus's module-level tether router (several replicas in one test
        # process) would otherwise build the same routes at once from their server
        # threads: a race that surfaces as a spurious pydantic schema error and a 500.
        # `visus serve` runs one app per process, so only multi-app processes need this.
        with contextlib.suppress(httpx.HTTPError):
            httpx.get(f"{url}/v1/instances", timeout=within(10))
        yield url


@contextmanager
def serving(server: uvicorn.Server) -> Iterator[tuple[threading.Thread, str]]:
    """Run ``server`` on 127.0.0.1 and a free port, in a thread: the thread and the
    URL once it has started; ``should_exit`` at the end (never ``handle_exit``, which
    sse-starlette replaced: see ``visus.tether.stopping``)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + within(10)
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("test server did not start")
        time.sleep(0.01)
    try:
        yield thread, f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
