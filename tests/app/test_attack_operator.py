"""Issue 33, items 8 and 9: what the operator pays with stays the operator's.

- ``/mcp``'s ``vision_analyze`` without ``model`` used the configured default (the
  model of the provider key in the environment) even when the operator allowed only
  ``reference`` (``[server] models``): every such call spent that key.
- A stdio MCP server configured with ``env`` received visus's whole environment,
  provider keys included; it gets what the operator listed, and what a process needs to
  start.
- Smaller: refusals named the server's layout (the allowed roots, the data folder, the
  path in an OS error) where the client gave none of it; a recursive ``$ref`` answered
  500 with a traceback.

All against a real `visus serve` (whose environment holds a provider key).
"""

from __future__ import annotations

import base64
import io
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import TextContent
from PIL import Image

from tests import hostile
from visus.reference.server import serve_in_background

pytestmark = pytest.mark.slow

KEY = "sk-ant-operators-own-0123456789"
PEER = Path(__file__).resolve().parents[1] / "agent" / "mcp_peer.py"


@pytest.fixture(scope="module")
def reference_url() -> Iterator[str]:
    with serve_in_background() as url:
        yield url


def _png() -> str:
    buf = io.BytesIO()
    Image.new("RGB", (32, 32), (0, 90, 200)).save(buf, "PNG")
    return base64.b64encode(buf.getvalue()).decode()


async def test_mcp_vision_analyze_without_a_model_keeps_to_the_allowed_ones(
    tmp_path: Path, reference_url: str
) -> None:
    with hostile.Recorder() as anthropic:
        env = {"ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": anthropic.url}
        with hostile.serve(tmp_path, reference_url=reference_url, env=env) as server:
            http = httpx.AsyncClient(headers=server.headers, timeout=120)
            mcp_url = f"{server.url}/mcp"
            async with Client(streamable_http_client(mcp_url, http_client=http)) as mcp:
                args = {"prompt": "what colour is it?", "file_base64": _png()}
                result = await mcp.call_tool("vision_analyze", args)
        said = "".join(c.text for c in result.content if isinstance(c, TextContent))
        assert anthropic.seen == [], anthropic.seen  # the key was spent there
        assert not result.is_error, said
        assert json.loads(said)["model"] == "reference", said


async def test_a_stdio_mcp_server_gets_only_the_variables_it_was_given(
    tmp_path: Path, reference_url: str
) -> None:
    config = (
        f"[[mcp.servers]]\nname = 'peer'\ncommand = '{sys.executable}'\n"
        f"args = ['{PEER}']\nenv = {{ PEER_MODE = 'listed' }}\n"
    )
    env = {"ANTHROPIC_API_KEY": KEY, "OPENAI_API_KEY": "sk-openai-own"}
    with hostile.serve(tmp_path, reference_url=reference_url, config=config, env=env) as server:
        async with server.async_client(timeout=120) as http:
            iid = (await http.get("/web/api/config")).json()["instance"]
            done = await hostile.turn(http, iid, "env", "call peer__environment {}")
            assert done["type"] == "assistant.done", done
            conv = (await http.get("/web/api/sessions/env")).json()
    results = [m for m in conv["messages"] if m["kind"] == "tool"]
    assert results, conv
    assert not results[0]["is_error"], results
    names = set(results[0]["text"].split())
    assert "PEER_MODE" in names, names  # what the operator listed
    assert "PATH" in names, names  # what a process needs to start
    assert not names & {"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "VISUS_TOKEN"}, names


async def test_refusals_keep_the_servers_layout_and_a_recursive_schema_is_refused(
    tmp_path: Path, reference_url: str
) -> None:
    """Issue 33, smaller items: a refusal named the operator's allowed root (a create
    request's roots), the absolute path an OS error carried (a symlink loop) and the
    data folder (a session or blob not found); a
    ``format`` whose ``$ref`` loops back on itself went on to the model, whose server
    answered 500 with a RecursionError traceback per call."""
    with hostile.serve(tmp_path, reference_url=reference_url) as server:
        files = tmp_path / "data" / "files"
        (files / "loop").symlink_to(files / "loop")
        async with server.async_client(timeout=120) as http:
            r = await http.post("/v1/instances", json={"model": "reference", "roots": ["/"]})
            assert r.status_code == 403, r.text
            assert str(files) not in r.text, r.text
            assert str(tmp_path) not in r.text, r.text
            # A session or blob that is not there: its folder is the server's own.
            r = await http.patch(f"/web/api/sessions/{'0' * 26}", json={"title": "x"})
            assert r.status_code == 404, r.text
            assert str(tmp_path) not in r.text, r.text
            r = await http.get(f"/web/api/blobs/{'a' * 64}")
            assert r.status_code == 404, r.text
            assert str(tmp_path) not in r.text, r.text
        http2 = httpx.AsyncClient(headers=server.headers, timeout=120)
        async with Client(streamable_http_client(f"{server.url}/mcp", http_client=http2)) as mcp:
            looped = await mcp.call_tool("view", {"path": "loop"})
            said = "".join(c.text for c in looped.content if isinstance(c, TextContent))
            assert looped.is_error, said
            assert str(tmp_path) not in said, said
            schema = {"$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"}
            args = {"prompt": "what?", "file_base64": _png(), "format": schema}
            before = server.log.stat().st_size
            refused = await mcp.call_tool("vision_analyze", args)
            said = "".join(c.text for c in refused.content if isinstance(c, TextContent))
            assert refused.is_error, said
            assert "refers to itself" in said, said
            assert server.log.stat().st_size - before < 2000  # no traceback


async def test_attachments_across_many_chats_stop_at_the_instance_cap(tmp_path: Path) -> None:
    """Issue 33, smaller: the attachment caps were per session and a client opens any
    number of sessions (fifty of 200 MB were all accepted). Over the web chat's API of a
    real `visus serve`, the chats together stop at ATTACHMENT_MAX_INSTANCE_BYTES (1 MB
    here): 413 naming it, nothing stored past it."""
    bounds = {"ATTACHMENT_MAX_INSTANCE_BYTES": 1024 * 1024}
    with hostile.serve(tmp_path, bounds=bounds) as server:
        async with server.async_client(timeout=120) as http:
            chunk = base64.b64encode(b"x" * 300_000).decode()
            codes = []
            for i in range(6):
                sid = f"01JABCDEFGHJKMNPQRSTVWX{i:03d}"
                body = {"filename": "a.bin", "contentBase64": chunk, "mimeType": "text/plain"}
                r = await http.post(f"/web/api/sessions/{sid}/attachments", json=body)
                codes.append(r.status_code)
                if r.status_code == 413:
                    assert r.json()["error"]["limit"] == "ATTACHMENT_MAX_INSTANCE_BYTES", r.text
            assert codes == [201, 201, 201, 413, 413, 413], codes
