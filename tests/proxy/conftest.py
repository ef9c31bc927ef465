"""Proxy fixtures: the reference server as the upstream, proxies in front of it, grids."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import uvicorn
from PIL import Image
from starlette.types import ASGIApp

from visus.proxy import UVICORN_OPTIONS, ProxyConfig, create_proxy_app
from visus.reference.grid import make_grid, score_grid
from visus.reference.server import serve_in_background

_JSON_BLOCK = re.compile(r"```json\n(.*?)\n```", re.S)


def cli_port(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> str:
    """For a ``visus proxy`` run through the CLI in ``tmp_path`` with an empty config:
    a port free now."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "visus.toml").write_text("")
    monkeypatch.setenv("VISUS_CONFIG", str(tmp_path / "visus.toml"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def serve_proxy(config: ProxyConfig) -> contextlib.AbstractContextManager[str]:
    """A proxy on a free loopback port (uvicorn in a thread, as ``visus proxy`` runs it)."""
    return serve_app(create_proxy_app(config), **UVICORN_OPTIONS)


@contextlib.contextmanager
def serve_app(app: ASGIApp, **options: Any) -> Iterator[str]:
    """Any ASGI app on a free loopback port (uvicorn in a thread); yields its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on", **options)
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        assert thread.is_alive(), "proxy did not start"
        assert time.monotonic() < deadline, "proxy did not start in time"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@pytest.fixture(scope="session")
def reference_url() -> Iterator[str]:
    with serve_in_background() as url:
        yield url


@pytest.fixture(scope="session")
def proxy_url(reference_url: str) -> Iterator[str]:
    with serve_proxy(ProxyConfig(upstream=reference_url)) as url:
        yield url


@dataclass(frozen=True)
class Grid:
    png: bytes
    expected: list[tuple[str, int, int, str]]
    rows: int
    cols: int

    @property
    def b64(self) -> str:
        return base64.b64encode(self.png).decode()

    @property
    def data_url(self) -> str:
        return "data:image/png;base64," + self.b64


def grid(rows: int, cols: int, seed: int, *, edge: int | None = None) -> Grid:
    """A word grid (stable seed); ``edge``: scaled up so its long side is that many px."""
    png, expected = make_grid(rows, cols, seed)
    if edge is not None:
        im = Image.open(io.BytesIO(png))
        scale = edge / max(im.size)
        big = im.resize(
            (round(im.width * scale), round(im.height * scale)), Image.Resampling.BICUBIC
        )
        buf = io.BytesIO()
        big.save(buf, "PNG")
        png = buf.getvalue()
    return Grid(png, expected, rows, cols)


def seen(text: str) -> dict[str, Any]:
    """The reference model's one JSON block."""
    blocks = _JSON_BLOCK.findall(text)
    assert len(blocks) == 1, text[:500]
    data: dict[str, Any] = json.loads(blocks[0])
    return data


def assert_placed(image: dict[str, Any], g: Grid) -> None:
    """Every word of ``g`` in its own cell and colour, in one described image."""
    placed, coloured = score_grid(g.expected, image["words"], g.rows, g.cols)
    n = len(g.expected)
    assert (placed, coloured) == (n, n), (g.expected, image["words"])
