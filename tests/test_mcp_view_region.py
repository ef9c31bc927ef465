"""MCP ``view`` zooms (issue 26): the result states the source's size, ``region`` in it
shows a word the plain view shrank past reading (the reference model's OCR reads it),
and a region outside the image is refused with its size."""

from __future__ import annotations

from pathlib import Path

import httpx
from mcp import Client

from tests.test_mcp_view_digest import _image, _text
from tests.zoomshot import HEIGHT, REGION, WIDTH, WORDS, words_read, write_screen
from visus.mcp_server import build_server
from visus.tether.client import TetherClient


async def test_mcp_view_zooms_into_a_region(tmp_path: Path) -> None:
    write_screen(tmp_path)
    # view never calls tether: a client that would fail if it did is enough
    tc = TetherClient("http://127.0.0.1:9", transport=httpx.MockTransport(httpx.Response))
    server = build_server(tc, roots=[tmp_path])
    async with Client(server, mode="legacy") as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        region_schema = listed["view"].input_schema["properties"]["region"]
        assert "source's pixels" in str(region_schema)

        plain = await client.call_tool("view", {"path": "screen.png"})
        assert not plain.is_error, plain
        assert f"raster {WIDTH}x{HEIGHT}, sent as 1568x882" in _text(plain)
        assert "zoom with region=[x0,y0,x1,y1]" in _text(plain)
        assert not set(WORDS) & set(words_read(_image(plain)))

        zoomed = await client.call_tool("view", {"path": "screen.png", "region": REGION})
        assert not zoomed.is_error, zoomed
        assert f"region=[{','.join(map(str, REGION))}] of raster" in _text(zoomed)
        assert set(WORDS) <= set(words_read(_image(zoomed)))

        outside = await client.call_tool("view", {"path": "screen.png", "region": [0, 0, 9999, 5]})
        assert outside.is_error
        assert "invalid_input" in _text(outside)
        assert f"{WIDTH}x{HEIGHT}" in _text(outside)
        inverted = await client.call_tool("view", {"path": "screen.png", "region": [9, 9, 1, 1]})
        assert inverted.is_error
        assert "empty or inverted" in _text(inverted)
    await tc.aclose()
