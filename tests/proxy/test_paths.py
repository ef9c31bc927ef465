"""Paths: base URLs as clients spell them, upstream roots that are not /v1, and paths
that try to leave the API prefix (issue 25's base URLs, issue 23's traversal)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from starlette.types import ASGIApp, Receive, Scope, Send

from visus.proxy import ProxyConfig
from visus.reference.server import create_app

from .conftest import assert_placed, grid, seen, serve_app, serve_proxy
from .test_passthrough import Tap

NODE_DIR = Path(__file__).resolve().parents[1] / "node"


def _raw_get(url: str, path: str) -> tuple[int, bytes]:
    """GET ``path`` exactly as written (an HTTP client would normalise it first)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    status = int(data.split(b" ", 2)[1])
    return status, data.partition(b"\r\n\r\n")[2]


@pytest.fixture
def tap() -> Iterator[tuple[Tap, str]]:
    t = Tap()
    with serve_app(t.app()) as url:
        yield t, url


TRAVERSALS = [
    "/v1/%2e%2e/%2e%2e/admin",
    "/v1/%2E%2E/admin",
    "/v1/..%2f..%2fadmin",
    "/v1/../admin",
    "/v1/./../admin",
    "/v1/%252e%252e/%252e%252e/admin",
    "/v1/..;/admin",
    "/v1/..%5c..%5cadmin",
    "/v1/models/..%00/admin",
    "//evil.example/v1/models",
    "/v1//admin",
    "/admin",
    "/v2/admin",
]


@pytest.mark.parametrize("upstream_path", ["", "/v1", "/api/v1"])
def test_paths_that_leave_the_api_prefix_never_reach_the_upstream(
    tap: tuple[Tap, str], upstream_path: str
) -> None:
    t, upstream = tap
    with serve_proxy(ProxyConfig(upstream=upstream + upstream_path)) as url:
        for path in TRAVERSALS:
            status, body = _raw_get(url, path)
            assert status == 404, (path, status, body)
            assert b"not an API path here" in body, path
        status, _ = _raw_get(url, "/v1/models/gpt-4.1")
    assert status == 200
    # Only the one legitimate request arrived, under the configured root.
    root = upstream_path.removesuffix("/v1")
    assert [p for _, p, _, _ in t.seen] == [f"{root}/v1/models/gpt-4.1"]


@pytest.mark.parametrize("suffix", ["", "/v1"])
def test_one_exported_anthropic_base_url_serves_claude_code_and_the_ai_sdk(
    proxy_url: str, suffix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Claude Code (the anthropic SDK) wants the bare host, @ai-sdk/anthropic (OpenCode)
    # wants .../v1: whichever the user exported, both reach the image editing.
    g = grid(2, 2, 61, edge=2600)  # over Claude's 1568 px: fitted on the way
    png = tmp_path / "g.png"
    png.write_bytes(g.png)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", proxy_url + suffix)
    before = httpx.get(f"{proxy_url}/stats").json()["images_fitted"]

    claude = anthropic.Anthropic(api_key="sk-test", max_retries=0)
    reply = claude.messages.create(
        model="claude-sonnet-4-6",
        max_tokens=500,
        messages=[
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": g.b64},
                    },
                    {"type": "text", "text": "read it"},
                ],
            }
        ],
    )
    text = "".join(b.text for b in reply.content if b.type == "text")
    assert_placed(seen(text)["images"][0], g)

    node = shutil.which("node")
    if node is None or not (NODE_DIR / "node_modules" / "@ai-sdk" / "anthropic").is_dir():
        pytest.skip("node or the npm test peers are missing (bash scripts/setup-node.sh)")
    done = subprocess.run(
        [node, str(NODE_DIR / "ai_sdk_anthropic_image.mjs"), str(png)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "ANTHROPIC_BASE_URL": proxy_url + suffix},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert_placed(seen(out["text"])["images"][0], g)
    assert httpx.get(f"{proxy_url}/stats").json()["images_fitted"] == before + 2


def _tool_messages(data_url: str) -> list[Any]:
    call = {"id": "c1", "type": "function", "function": {"name": "shot", "arguments": "{}"}}
    return [
        {"role": "user", "content": "look"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": [{"type": "image_url", "image_url": {"url": data_url}}],
        },
    ]


def test_an_openai_base_url_without_v1_reaches_the_image_editing(proxy_url: str) -> None:
    g = grid(2, 2, 62)
    client = openai.OpenAI(base_url=proxy_url, api_key="sk-test", max_retries=0)
    reply = client.chat.completions.create(model="gpt-4.1", messages=_tool_messages(g.data_url))
    (image,) = seen(reply.choices[0].message.content or "")["images"]
    assert_placed(image, g)


class Rooted:
    """The reference server behind another API root, as Gemini's OpenAI endpoint
    (``/v1beta/openai``) or an Azure deployment (``/openai/deployments/NAME``, with a
    required ``api-version`` query) serve the OpenAI API."""

    def __init__(self, app: ASGIApp, root: str, *, query: bytes = b"") -> None:
        self.app, self.root, self.query = app, root, query
        self.paths: list[str] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self.paths.append(scope["path"])
            ok = scope["path"].startswith(self.root + "/") and (self.query in scope["query_string"])
            rest = scope["path"][len(self.root) :] if ok else "/nowhere"
            scope = {**scope, "path": "/v1" + rest, "raw_path": ("/v1" + rest).encode()}
        await self.app(scope, receive, send)


@pytest.mark.parametrize(
    ("root", "query"),
    [("/v1beta/openai", b""), ("/openai/deployments/gpt-4.1", b"api-version=2024-10-21")],
)
def test_an_upstream_whose_openai_root_is_not_v1(root: str, query: bytes) -> None:
    rooted = Rooted(create_app(), root, query=query)
    g = grid(2, 2, 63)
    with serve_app(rooted) as upstream:
        configured = upstream + root + ("?" + query.decode() if query else "")
        with serve_proxy(ProxyConfig(upstream=configured)) as url:
            client = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0)
            reply = client.chat.completions.create(
                model="gpt-4.1", messages=_tool_messages(g.data_url)
            )
    (image,) = seen(reply.choices[0].message.content or "")["images"]
    assert_placed(image, g)  # hoisted out of the tool message, then seen
    assert rooted.paths == [root + "/chat/completions"]
