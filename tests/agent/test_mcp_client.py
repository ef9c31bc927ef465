"""Mounted MCP servers: result mapping and every way a server can fail.

The peer is a real stdio MCP server built on the official SDK (``mcp_peer.py``); the
agent side is :class:`visus.agent.McpMounts` as ``build_agent`` wires it.
"""

from __future__ import annotations

import base64
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.timing import within
from visus import limits
from visus.agent import McpMounts, McpServerSpec, ToolContext, ToolRegistry, build_agent
from visus.errors import InvalidInputError
from visus.models import get_model
from visus.perception import Reach
from visus.providers import ProviderSettings
from visus.record.blobs import MemoryBlobStore
from visus.record.messages import ImagePart, TextPart
from visus.reference.server import serve_in_background

PEER = str(Path(__file__).with_name("mcp_peer.py"))
SRC = str(Path(__file__).parents[2] / "src")
#: The peer's call timeout: what a hang waits for.
CALL_TIMEOUT = float(round(within(2.0)))


def _peer(timeout: float = 20.0) -> McpServerSpec:
    return McpServerSpec(
        name="peer", command=sys.executable, args=(PEER,), env={"PYTHONPATH": SRC}, timeout=timeout
    )


def _ctx(tmp: Path) -> ToolContext:
    return ToolContext(
        reach=Reach([tmp]), model=get_model("claude-sonnet-4-6"), blobs=MemoryBlobStore()
    )


@pytest.fixture
async def mounted(tmp_path: Path) -> AsyncIterator[tuple[ToolRegistry, list[str], Path]]:
    registry = ToolRegistry()
    # Every call must answer within it, so a loaded machine gets more than 2 s.
    mounts = McpMounts([_peer(timeout=CALL_TIMEOUT)], log_dir=tmp_path / "logs")
    warnings = await mounts.start(registry.add)
    try:
        yield registry, warnings, tmp_path
    finally:
        await mounts.aclose()


async def test_tools_results_and_failures(
    mounted: tuple[ToolRegistry, list[str], Path],
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    registry, warnings, tmp = mounted
    assert warnings == []
    assert {"peer__picture", "peer__hang", "peer__crash"} <= set(registry.names())
    spec = registry.get("peer__picture")
    assert spec is not None
    assert spec.spec.parameters["type"] == "object"
    ctx = _ctx(tmp)

    # text and a fitted image stored as a blob, re-viewable by digest
    out = await registry.call("peer__picture", {}, ctx)
    assert not out.is_error
    text, image = out.parts
    assert text == TextPart("a red picture")
    assert isinstance(image, ImagePart)
    assert (image.width, image.height) == (64, 32)
    assert ctx.blobs.has(image.digest)
    assert image.origin.kind == "perception"
    assert image.origin.source == f"sha256:{image.digest}"

    # one long-lived session: the same process answers every call
    first = await registry.call("peer__pid", {}, ctx)
    second = await registry.call("peer__pid", {}, ctx)
    assert first.parts == second.parts

    # isError -> an error result; malformed image data -> a note, not a crash
    failing = await registry.call("peer__failing", {}, ctx)
    assert failing.is_error
    assert failing.parts == (TextPart("no such thing"),)
    broken = await registry.call("peer__broken_picture", {}, ctx)
    assert broken.parts[0].kind == "text"
    assert "not valid base64" in broken.parts[0].text

    # oversized content is refused before it is decoded
    monkeypatch.setattr(limits, "MCP_CLIENT_MAX_IMAGE_BYTES", 100)
    big = await registry.call("peer__picture", {}, ctx)
    assert "over MCP_CLIENT_MAX_IMAGE_BYTES" in big.parts[1].text
    monkeypatch.undo()

    # a hang is a tool error after the timeout, and the server still answers after it
    hung = await registry.call("peer__hang", {}, ctx)
    assert hung.is_error
    assert f"did not answer hang within {CALL_TIMEOUT:g} s" in hung.parts[0].text
    assert not (await registry.call("peer__picture", {}, ctx)).is_error

    # a crash is a tool error; later calls say the server is gone
    crashed = await registry.call("peer__crash", {}, ctx)
    assert crashed.is_error
    assert "peer" in crashed.parts[0].text
    after = await registry.call("peer__picture", {}, ctx)
    assert after.is_error
    assert "is not running (it stopped during crash" in after.parts[0].text

    # the server's stderr went to its log file, never to the terminal
    log = (tmp / "logs" / "mcp-peer.log").read_text()
    assert "peer: started" in log
    assert "peer: started" not in capfd.readouterr().err


async def test_a_server_that_does_not_start_is_a_warning_and_the_agent_runs(
    tmp_path: Path,
) -> None:
    missing = McpServerSpec(name="ghost", command=str(tmp_path / "no-such-program"))
    with serve_in_background() as url:
        agent = build_agent(
            "reference",
            data=tmp_path / "data",
            roots=[tmp_path],
            settings=ProviderSettings(reference_url=url, env={}),
            mcp_servers=[missing, _peer()],
        )
        try:
            result = await agent.run_turn("s", "call peer__pid {}")
            (warning,) = result.notes
            assert "MCP server 'ghost'" in warning
            assert "did not start" in warning
            assert result.stopped == "answer"
            tool = next(m for m in result.messages if m.kind == "tool")
            assert tool.tool_name == "peer__pid"
            assert not tool.is_error
            again = await agent.run_turn("s", "hello")
            assert again.notes == ()  # warned once
        finally:
            await agent.aclose()


def test_flag_and_spec_parsing() -> None:
    spec = McpServerSpec.parse("fs=npx -y '@scope/server fs' --root /tmp")
    assert (spec.name, spec.command, spec.args) == (
        "fs",
        "npx",
        ("-y", "@scope/server fs", "--root", "/tmp"),
    )
    web = McpServerSpec.parse("web=https://example.com/mcp")
    assert (web.url, web.command) == ("https://example.com/mcp", None)
    for bad in ("noequals", "=cmd", "a__b=cmd", "x=", "bad name=cmd"):
        with pytest.raises(InvalidInputError):
            McpServerSpec.parse(bad)
    with pytest.raises(InvalidInputError, match="unique"):
        McpMounts([McpServerSpec.parse("a=x"), McpServerSpec.parse("a=y")])


async def test_resource_blobs_of_text_reach_the_model_as_text(tmp_path: Path) -> None:
    """A text file sent as a base64 blob (server-everything's blob resources) is read,
    not reduced to a note; a blob that is not UTF-8 text says so; binary stays a note."""
    from mcp.types import BlobResourceContents, CallToolResult, EmbeddedResource

    from visus.agent.mcp_client import result_outcome

    def blob(data: bytes, mime: str) -> EmbeddedResource:
        contents = BlobResourceContents(
            uri="demo://r", mime_type=mime, blob=base64.b64encode(data).decode()
        )
        return EmbeddedResource(type="resource", resource=contents)

    result = CallToolResult(
        content=[
            blob("Resource 2: héllo".encode(), "text/plain"),
            blob(b'{"a": 1}', "application/json; charset=utf-8"),
            blob(b"\xff\xfe\x00bad", "text/plain"),
            blob(b"\x00\x01", "application/octet-stream"),
        ]
    )
    outcome = await result_outcome(result, _ctx(tmp_path), conn=None, tool="ev__blob")
    texts = [p.text for p in outcome.parts if isinstance(p, TextPart)]
    assert texts[0] == "[resource demo://r]\nResource 2: héllo"
    assert texts[1] == '[resource demo://r]\n{"a": 1}'
    assert "not base64 of UTF-8 text" in texts[2]
    assert texts[3].startswith("[resource demo://r (application/octet-stream")


async def test_an_http_server_refusing_the_token_says_its_status(tmp_path: Path) -> None:
    """A streamable-HTTP server answering 401 is named with its status and a hint; the
    SDK alone says only "Server returned an error response"."""
    try:
        from tests.tether.doubles import Factory, live_server
    except ImportError:  # tests/ not a package
        from tether.doubles import Factory, live_server  # type: ignore[no-redef]
    from visus.mcp_server import mount_mcp
    from visus.tether.server import create_app

    app = create_app(data_dir=tmp_path, runner_factory=Factory(), token="tok")
    mount_mcp(app, roots=[tmp_path])
    with live_server(app) as base:
        wrong = McpServerSpec(name="vis", url=f"{base}/mcp", headers={"Authorization": "x"})
        right = McpServerSpec(name="ok", url=f"{base}/mcp", headers={"Authorization": "Bearer tok"})
        registry = ToolRegistry()
        mounts = McpMounts([wrong, right])
        try:
            warnings = await mounts.start(registry.add)
            assert "ok__view" in registry.names()
        finally:
            await mounts.aclose()
    assert len(warnings) == 1
    assert "'vis'" in warnings[0]
    assert "the server answered HTTP 401 Unauthorized (check the headers" in warnings[0]


async def test_line_wrapped_base64_images_are_images(tmp_path: Path) -> None:
    """Base64 wrapped at 76 columns (Python's encodebytes, MIME) is an image, not
    '[image omitted: ... not valid base64]'."""
    import io

    from mcp.types import CallToolResult, ImageContent
    from PIL import Image

    from visus.agent.mcp_client import result_outcome

    buf = io.BytesIO()
    Image.frombytes("RGB", (40, 40), bytes(range(256)) * 18 + bytes(192)).save(buf, "PNG")
    wrapped = base64.encodebytes(buf.getvalue()).decode()
    assert "\n" in wrapped.strip()
    result = CallToolResult(
        content=[ImageContent(type="image", data=wrapped, mime_type="image/png")]
    )
    outcome = await result_outcome(result, _ctx(tmp_path), conn=None, tool="p__pic")
    assert [type(p) for p in outcome.parts] == [ImagePart]
