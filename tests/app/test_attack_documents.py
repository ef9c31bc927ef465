"""Issue 33, item 1: a PDF object-stream bomb, sent where a server parses documents.

A 2 MB PDF whose page tree sits in an ``/ObjStm`` inflating to 2 GB: opening it (a page
count, a probe) made PDFium inflate the whole stream in the server's own process, with
no budget, under a global lock: ``read_attachment`` took a `visus serve` from 470 MB
to 3.55 GB, ``/mcp``'s ``vision_analyze`` likewise, and an Anthropic image block through
`visus proxy` from 245 MB to 3.2 GB (under a 3 GB address-space limit the process
aborted). Every parse of untrusted bytes now runs in the render worker, under its time
budget and memory cap: each surface refuses the file in words, the server's own memory
stays where it was, and it answers the next client at once.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import TextContent

from tests import hostile
from tests.media.bombs import objstm_pdf
from tests.timing import within
from visus.reference.server import serve_in_background

pytestmark = pytest.mark.slow

#: Inflated size of the bomb: past the render worker's 2 GB address space whatever the
#: machine's speed, so the worker's memory cap (or its time budget) certainly stops it.
INFLATED = 2 * 1024 * hostile.MB
#: What the server's own process may grow by while it refuses the bomb (it grew by
#: 3 GB): room for a request's bytes and the allocator, far below the bomb.
GROWTH = 300 * hostile.MB
#: The worker's time budget in these servers: the bomb takes far longer than this to
#: inflate on any machine (or runs out of memory first).
BOUNDS = {"RENDER_TIME_BUDGET_SECONDS": 5.0}


@pytest.fixture(scope="module")
def bomb() -> bytes:
    return objstm_pdf(INFLATED)


@pytest.fixture(scope="module")
def reference_url() -> Iterator[str]:
    with serve_in_background() as url:
        yield url


def _growth(server: hostile.Server, before: int) -> int:
    grew = server.peak() - before
    print(f"peak growth {grew / hostile.MB:.0f} MB, cpu {server.cpu():.1f} s")  # -s shows it
    return grew


def _tool_text(conversation: dict[str, Any]) -> str:
    return json.dumps(conversation)


async def test_read_attachment_of_a_pdf_bomb_stays_in_the_budget(
    tmp_path: Path, bomb: bytes, reference_url: str
) -> None:
    with hostile.serve(tmp_path, reference_url=reference_url, bounds=BOUNDS) as server:
        async with server.async_client(timeout=180) as http:
            iid = (await http.get("/web/api/config")).json()["instance"]
            upload = {
                "filename": "report.pdf",
                "contentBase64": base64.b64encode(bomb).decode(),
                "mimeType": "application/pdf",
            }
            put = await http.post("/web/api/sessions/s1/attachments", json=upload)
            assert put.status_code == 201, put.text
            server.reset_peak()
            before = server.rss()
            call = 'call read_attachment {"filename": "report.pdf"}'
            done = await hostile.turn(http, iid, "s1", call)
            grew = _growth(server, before)
            assert done["type"] == "assistant.done", done
            said = _tool_text((await http.get("/web/api/sessions/s1")).json())
            assert "too large" in said or "budget" in said or "memory cap" in said, said[-2000:]
            assert grew < GROWTH, f"the server grew by {grew / hostile.MB:.0f} MB"
            # It answers the next client at once.
            start = time.monotonic()
            assert (await http.get("/web/api/sessions")).status_code == 200
            assert time.monotonic() - start < within(5)


async def test_mcp_vision_analyze_of_a_pdf_bomb_stays_in_the_budget(
    tmp_path: Path, bomb: bytes, reference_url: str
) -> None:
    with hostile.serve(tmp_path, reference_url=reference_url, bounds=BOUNDS) as server:
        http = httpx.AsyncClient(headers=server.headers, timeout=180)
        async with Client(streamable_http_client(f"{server.url}/mcp", http_client=http)) as mcp:
            server.reset_peak()
            before = server.rss()
            args = {"prompt": "what is it?", "file_base64": base64.b64encode(bomb).decode()}
            result = await mcp.call_tool("vision_analyze", args)
            grew = _growth(server, before)
            said = "".join(c.text for c in result.content if isinstance(c, TextContent))
            assert result.is_error, said
            assert "too_large" in said or "FILE_TOO_LARGE" in said, said
            assert grew < GROWTH, f"the server grew by {grew / hostile.MB:.0f} MB"


def test_an_anthropic_image_block_of_a_pdf_bomb_through_the_proxy(
    tmp_path: Path, bomb: bytes, reference_url: str
) -> None:
    with hostile.proxy(tmp_path, reference_url, bounds=BOUNDS) as proxy:
        block = {
            "type": "image",
            "source": {
                "type": "base64",
                "media_type": "image/png",
                "data": base64.b64encode(bomb).decode(),
            },
        }
        body = {
            "model": "claude-sonnet-4-6",
            "max_tokens": 64,
            "messages": [{"role": "user", "content": [block, {"type": "text", "text": "hi"}]}],
        }
        headers = {"x-api-key": "k", "anthropic-version": "2023-06-01"}
        proxy.reset_peak()
        before = proxy.rss()
        with proxy.client(timeout=180) as http:
            answered = http.post("/v1/messages", json=body, headers=headers)
            grew = _growth(proxy, before)
            assert answered.status_code < 500, answered.text
            assert grew < GROWTH, f"the proxy grew by {grew / hostile.MB:.0f} MB"
            plain = {**body, "messages": [{"role": "user", "content": "hello"}]}
            start = time.monotonic()
            assert http.post("/v1/messages", json=plain, headers=headers).status_code == 200
            assert time.monotonic() - start < within(10)
