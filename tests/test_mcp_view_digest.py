"""The MCP ``view`` takes ``sha256:<hex>``: an image this client session viewed comes
back; another session's never does (each session's reach is its own views)."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, ImageContent, TextContent

from tests.tether.doubles import Factory, live_server
from visus.mcp_server import build_server, mount_mcp
from visus.reference.grid import make_grid
from visus.tether.client import TetherClient
from visus.tether.server import create_app


def _text(r: CallToolResult) -> str:
    return "".join(c.text for c in r.content if isinstance(c, TextContent))


def _image(r: CallToolResult) -> bytes:
    (item,) = [c for c in r.content if isinstance(c, ImageContent)]
    return base64.b64decode(item.data)


async def test_view_by_digest_is_per_client_session(tmp_path: Path) -> None:
    (tmp_path / "grid.png").write_bytes(make_grid(2, 2, seed=5)[0])
    # view never calls tether: a client that would fail if it did is enough
    tc = TetherClient("http://127.0.0.1:9", transport=httpx.MockTransport(httpx.Response))
    server = build_server(tc, roots=[tmp_path])
    async with Client(server, mode="legacy") as one, Client(server, mode="legacy") as two:
        first = await one.call_tool("view", {"path": "grid.png"})
        assert not first.is_error, first
        match = re.search(r"sha256:([0-9a-f]{64})", _text(first))
        assert match is not None
        digest = match.group(1)

        again = await one.call_tool("view", {"path": f"sha256:{digest[:12]}"})
        assert not again.is_error, again
        assert _image(again) == _image(first)
        assert f"sha256:{digest}" in _text(again)

        other = await two.call_tool("view", {"path": f"sha256:{digest}"})
        assert other.is_error
        assert "not_found" in _text(other)
        short = await one.call_tool("view", {"path": "sha256:abc"})
        assert short.is_error
        assert "12 hex digits" in _text(short)
    await tc.aclose()


async def test_view_by_digest_over_http_is_per_mcp_session(tmp_path: Path) -> None:
    """Over streamable HTTP every request gets its own SDK session object: what a client
    viewed is still found on its next request (same Mcp-Session-Id), never on another's."""
    (tmp_path / "grid.png").write_bytes(make_grid(2, 2, seed=5)[0])
    app = create_app(data_dir=tmp_path / "data", runner_factory=Factory(), token="tok")
    mount_mcp(app, roots=[tmp_path])
    auth = {"Authorization": "Bearer tok"}
    with live_server(app) as base:
        http_one = httpx2.AsyncClient(headers=auth, timeout=30)
        http_two = httpx2.AsyncClient(headers=auth, timeout=30)
        one = Client(streamable_http_client(f"{base}/mcp", http_client=http_one), mode="legacy")
        two = Client(streamable_http_client(f"{base}/mcp", http_client=http_two), mode="legacy")
        async with http_one, http_two, one, two:
            first = await one.call_tool("view", {"path": "grid.png"})
            match = re.search(r"sha256:([0-9a-f]{64})", _text(first))
            assert match is not None, first
            again = await one.call_tool("view", {"path": f"sha256:{match.group(1)}"})
            assert not again.is_error, again
            assert _image(again) == _image(first)
            other = await two.call_tool("view", {"path": f"sha256:{match.group(1)}"})
            assert other.is_error
            assert "not_found" in _text(other)
