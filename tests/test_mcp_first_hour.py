"""visus in an MCP host, as a newcomer wires it (issue 27), with the official MCP client:
the printed mcpServers entry starts a working server from anywhere, descriptions read
cleanly, bad arguments get visus's own refusals, and the tether tools say what to do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import CallToolResult, ImageContent, TextContent
from PIL import Image

try:
    from tests.ports import dead_port
    from tests.tether.doubles import Factory
except ImportError:  # tests/ not a package: pytest put tests/ itself on sys.path
    from ports import dead_port  # type: ignore[no-redef]
    from tether.doubles import Factory  # type: ignore[no-redef]
from visus.config import load_config
from visus.mcp_server import build_server
from visus.reference.server import serve_in_background
from visus.tether.client import TetherClient
from visus.tether.server import create_app


def _text(result: CallToolResult) -> str:
    item = result.content[0]
    assert isinstance(item, TextContent)
    return item.text


def _printed_entry(tmp_path: Path, root: Path) -> dict[str, object]:
    """`visus mcp --print-config` run from a folder that is not the root."""
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from visus.cli import main; main()",
            "mcp",
            "--print-config",
            "--root",
            str(root),
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        env={**os.environ, "VISUS_TOKEN": ""},
    ).stdout
    entry: dict[str, object] = json.loads(out)["mcpServers"]["visus"]
    return entry


async def test_the_printed_entry_starts_a_server_a_host_can_use(tmp_path: Path) -> None:
    files = tmp_path / "files"
    files.mkdir()
    Image.new("RGB", (64, 48), (0, 0, 255)).save(files / "blue.png")
    entry = _printed_entry(tmp_path, files)
    command = str(entry["command"])
    assert Path(command).is_absolute()
    assert entry["args"] == ["mcp", "--root", str(files.resolve())]
    # A host starts it with a PATH of its own and in a folder of its own. Where the
    # entry's tether URL (8750) is, the user's own `visus serve` may be running: the
    # tether tools look at a port where nothing answers instead.
    host_dir = tmp_path / "host"
    host_dir.mkdir()
    with dead_port() as port:
        params = StdioServerParameters(
            command=command,
            args=list(entry["args"]),  # type: ignore[call-overload]
            env={
                "PATH": "/usr/bin:/bin",
                "HOME": str(tmp_path),
                "VISUS_TETHER_URL": f"http://127.0.0.1:{port}",
            },
            cwd=str(host_dir),
        )
        async with Client(params, mode="legacy") as client:
            seen = await client.call_tool("view", {"path": "blue.png"})
            assert not seen.is_error, seen
            assert isinstance(seen.content[1], ImageContent)
            # The tether tools need a running `visus serve`, and say so.
            lost = await client.call_tool("tether_instances", {})
            assert lost.is_error
            assert "start one with `visus serve`" in _text(lost)


async def test_descriptions_read_cleanly_and_bad_arguments_get_visus_refusals(
    tmp_path: Path,
) -> None:
    Image.new("RGB", (64, 48), "white").save(tmp_path / "w.png")
    tc = TetherClient("http://127.0.0.1:9")
    server = build_server(tc, roots=[tmp_path])
    async with Client(server, mode="legacy") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        for tool in tools.values():
            assert "\n    " not in (tool.description or ""), tool.name
            assert "  " not in (tool.description or ""), tool.name
        assert "assistant.done" in (tools["tether_read"].description or "")
        assert "until_done" in tools["tether_read"].input_schema["properties"]
        assert tools["view"].input_schema["properties"]["page"]["minimum"] == 1
        paged = await client.call_tool("view", {"path": "w.png", "page": 0})
        assert paged.is_error
        refusal = json.loads(_text(paged))
        assert refusal["reason"] == "invalid_input"
        assert "page must be at least 1" in refusal["message"]
    await tc.aclose()


async def test_vision_analyze_takes_path_as_view_does(tmp_path: Path) -> None:
    from PIL import ImageDraw, ImageFont

    from visus.media import font_path

    sign = Image.new("RGB", (640, 240), "white")
    font = ImageFont.truetype(str(font_path("DejaVuSans.ttf")), 72)
    ImageDraw.Draw(sign).text((60, 70), "HARBOUR", fill="black", font=font)
    sign.save(tmp_path / "sign.png")
    with serve_in_background() as url:
        cfg = load_config(
            env={
                "VISUS_DATA": str(tmp_path / "data"),
                "VISUS_PROVIDERS__REFERENCE__BASE_URL": url,
                "VISUS_CONFIG": "",
            }
        )
        tc = TetherClient("http://unused")
        server = build_server(tc, roots=[tmp_path], analyze_config=cfg)
        async with Client(server, mode="legacy") as client:
            r = await client.call_tool("vision_analyze", {"prompt": "Read it", "path": "sign.png"})
            assert not r.is_error, r
            assert "HARBOUR" in json.loads(_text(r))["text"]
        await tc.aclose()


async def test_tether_read_until_done_waits_for_the_end_of_the_turn(tmp_path: Path) -> None:
    factory = Factory()
    app = create_app(data_dir=tmp_path / "data", runner_factory=factory)
    tc = TetherClient("http://127.0.0.1", transport=httpx.ASGITransport(app=app))
    iid = (await tc.create_instance("reference"))["id"]
    server = build_server(tc, roots=[tmp_path])
    async with Client(server, mode="legacy") as client:
        sent = json.loads(
            _text(await client.call_tool("tether_send", {"instance": iid, "text": "hi"}))
        )
        r = await client.call_tool(
            "tether_read",
            {"instance": iid, "after_seq": sent["seq"], "until_done": True, "wait_ms": 20000},
        )
        frames = json.loads(_text(r))["frames"]
        assert frames[-1]["type"] == "assistant.done"
    await tc.aclose()
    await app.state.registry.aclose()


@pytest.mark.parametrize("token", ["", "tok-123"])
def test_print_config_carries_the_token_only_when_given(tmp_path: Path, token: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", "from visus.cli import main; main()", "mcp", "--print-config"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        env={**os.environ, "VISUS_TOKEN": token},
    ).stdout
    entry = json.loads(out)["mcpServers"]["visus"]
    assert entry["args"] == ["mcp", "--root", str(tmp_path.resolve())]
    assert entry.get("env") == ({"VISUS_TOKEN": token} if token else None)
