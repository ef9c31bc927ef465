"""MCP ``view`` estimates an image's tokens by its size, as ``visus view`` does for
Claude (the host model it fits for), not one flat figure for every image: a newcomer
saw ``~576 tokens`` for a 400x100 zoom and for a full PDF page alike."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
from mcp import Client
from PIL import Image

from tests.test_mcp_view_digest import _text
from visus.mcp_server import build_server
from visus.models import get_model, image_tokens
from visus.tether.client import TetherClient


async def test_view_tokens_follow_the_image_size(tmp_path: Path) -> None:
    Image.new("RGB", (400, 100), "white").save(tmp_path / "small.png")
    Image.new("RGB", (1500, 1000), "white").save(tmp_path / "large.png")
    tc = TetherClient("http://127.0.0.1:9", transport=httpx.MockTransport(httpx.Response))
    server = build_server(tc, roots=[tmp_path])
    claude = get_model("claude-sonnet-4-6")
    async with Client(server, mode="legacy") as client:
        for name, (w, h) in (("small.png", (400, 100)), ("large.png", (1500, 1000))):
            seen = await client.call_tool("view", {"path": name})
            assert not seen.is_error, seen
            tokens = int(re.search(r"~(\d+) tokens", _text(seen)).group(1))  # type: ignore[union-attr]
            assert tokens == image_tokens(claude, w, h), _text(seen)
    await tc.aclose()
