"""Descriptors a client without ``view`` can follow: the proxy's own MCP ``restore_image``."""

from __future__ import annotations

import re
from typing import Any

import anthropic
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import ImageContent

from visus.proxy import ProxyConfig

from .conftest import assert_placed, grid, seen, serve_proxy

RESTORE = "mcp__visus-proxy__restore_image"
TOOLS: list[Any] = [
    {"name": "screenshot", "input_schema": {"type": "object", "properties": {}}},
    {
        "name": RESTORE,
        "input_schema": {"type": "object", "properties": {"digest": {"type": "string"}}},
    },
]


def _image(b64: str) -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64}}


def _step(messages: list[Any], n: int, name: str, b64: str) -> None:
    messages.append(
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": f"t{n}", "name": name, "input": {}}],
        }
    )
    result = {"type": "tool_result", "tool_use_id": f"t{n}", "content": [_image(b64)]}
    messages.append({"role": "user", "content": [result]})


async def test_an_elided_image_comes_back_through_the_proxys_mcp_tool(reference_url: str) -> None:
    first, second = grid(2, 2, 101), grid(2, 2, 102)
    messages: list[Any] = [{"role": "user", "content": "watch the screen"}]
    _step(messages, 1, "screenshot", first.b64)
    _step(messages, 2, "screenshot", second.b64)
    with serve_proxy(ProxyConfig(upstream=reference_url, live_images=1)) as url:
        claude = anthropic.Anthropic(base_url=url, api_key="sk-test", max_retries=0)

        def ask() -> dict[str, Any]:
            reply = claude.messages.create(
                model="claude-sonnet-4-6", max_tokens=500, messages=messages, tools=TOOLS
            )
            return seen("".join(b.text for b in reply.content if b.type == "text"))

        (descriptor,) = ask()["descriptors"]
        # The client has the proxy's tool, so the descriptor offers it by its own name.
        call = re.search(rf'{RESTORE}\("(sha256:[0-9a-f]{{64}})"\)', descriptor)
        assert call is not None, descriptor
        http = httpx2.AsyncClient(timeout=30)
        async with http, Client(streamable_http_client(f"{url}/mcp", http_client=http)) as mcp:
            restored = await mcp.call_tool("restore_image", {"digest": call.group(1)})
            missing = await mcp.call_tool("restore_image", {"digest": call.group(1)[:20]})
        assert missing.is_error
        (item,) = restored.content
        assert isinstance(item, ImageContent)
        assert item.data == first.b64
        # The model's call and its result: the first screen is seen again.
        _step(messages, 3, RESTORE, item.data)
        result = ask()
    (image,) = result["images"]
    assert_placed(image, first)


def test_without_the_tool_the_descriptor_offers_no_call_the_client_lacks(
    reference_url: str,
) -> None:
    messages: list[Any] = [{"role": "user", "content": "watch the screen"}]
    _step(messages, 1, "screenshot", grid(1, 1, 103).b64)
    _step(messages, 2, "screenshot", grid(1, 1, 104).b64)
    with serve_proxy(ProxyConfig(upstream=reference_url, live_images=1)) as url:
        claude = anthropic.Anthropic(base_url=url, api_key="sk-test", max_retries=0)
        reply = claude.messages.create(
            model="claude-sonnet-4-6", max_tokens=500, messages=messages, tools=TOOLS[:1]
        )
    (descriptor,) = seen("".join(b.text for b in reply.content if b.type == "text"))["descriptors"]
    assert "restore_image" not in descriptor
    assert "view(" not in descriptor
    assert "left out by visus proxy; call the tool again for a fresh one" in descriptor
