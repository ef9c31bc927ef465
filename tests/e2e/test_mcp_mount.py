"""Mounted MCP servers, end to end on every wire, against the reference model.

- ``@modelcontextprotocol/server-everything`` (npm, a server nobody here wrote) over
  stdio: its ``get-tiny-image`` result reaches the model as an image, never as text.
- ``visus mcp`` over stdio as a second server: the agent calls its ``view`` on a
  picture of words and the reference model names them; a later turn elides the
  image and ``view("sha256:...")`` brings it back.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import zlib
from pathlib import Path

import pytest

from tests.e2e.conftest import WIRES, seen, view_call
from visus.agent import Agent, McpServerSpec, build_agent
from visus.providers import ProviderSettings
from visus.reference.grid import make_grid, score_grid
from visus.retention import RetentionPolicy

EVERYTHING = Path(__file__).parents[1] / "node" / "node_modules" / ".bin" / "mcp-server-everything"
_DIGEST = re.compile(r"call view\(\\?\"(sha256:[0-9a-f]{12,64})")
_SRC = str(Path(__file__).parents[2] / "src")


def _everything() -> McpServerSpec:
    if not EVERYTHING.exists() or shutil.which("node") is None:
        pytest.skip("server-everything not installed (bash scripts/setup-node.sh)")
    return McpServerSpec(name="everything", command=str(EVERYTHING))


def _visus_mcp(root: Path) -> McpServerSpec:
    # The SDK hands a stdio server only a safe subset of the environment: name what
    # this checkout's package needs.
    return McpServerSpec(
        name="visus",
        command=sys.executable,
        args=("-c", "from visus.cli import app; app()", "mcp", "--root", str(root)),
        env={"PYTHONPATH": _SRC, "VISUS_CONFIG": os.devnull},
    )


def _agent(url: str, wire: str, tmp: Path, servers: list[McpServerSpec]) -> Agent:
    work = tmp / "work"
    work.mkdir(exist_ok=True)
    return build_agent(
        f"reference:{wire}",
        data=tmp / "data",
        roots=[work],
        settings=ProviderSettings(reference_url=url, backoff_base=0.01, env={}),
        policy=RetentionPolicy(live_turns=1),
        mcp_servers=servers,
    )


@pytest.mark.parametrize("wire", WIRES)
async def test_server_everything_image_reaches_the_model_as_an_image(
    reference_url: str, tmp_path: Path, wire: str, agents: list[Agent]
) -> None:
    agent = _agent(reference_url, wire, tmp_path, [_everything()])
    agents.append(agent)

    result = await agent.run_turn("s", "call everything__get-tiny-image {}")

    assert result.notes == ()  # it started, and no image was refused on the way
    assert "everything__get-tiny-image" in agent.tools.names()
    data = seen(result.answer)
    assert [(i["width"], i["height"]) for i in data["images"]] == [(20, 20)]
    tool = next(m for m in result.messages if m.kind == "tool")
    assert "Here's the image you requested:" in tool.text
    assert "iVBOR" not in tool.text  # the PNG's base64 never became text
    assert [p.kind for p in tool.parts] == ["text", "image", "text"]


@pytest.mark.parametrize("wire", WIRES)
async def test_visus_mcp_view_then_elided_then_back_by_digest(
    reference_url: str, tmp_path: Path, wire: str, agents: list[Agent]
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    png, expected = make_grid(2, 2, seed=zlib.crc32(f"mcp-{wire}".encode()))
    (work / "words.png").write_bytes(png)
    agent = _agent(reference_url, wire, tmp_path, [_visus_mcp(work)])
    agents.append(agent)

    first = await agent.run_turn("s", 'call visus__view {"path": "words.png"}')
    assert first.notes == ()
    images = seen(first.answer)["images"]
    assert len(images) == 1
    assert score_grid(expected, images[0]["words"], 2, 2)[0] == 4

    later = seen((await agent.run_turn("s", "and now?")).answer)
    assert later["images"] == []
    (descriptor,) = later["descriptors"]
    ref = _DIGEST.search(descriptor)
    assert ref is not None, descriptor

    back = seen((await agent.run_turn("s", view_call(ref.group(1)))).answer)
    assert len(back["images"]) == 1
    assert score_grid(expected, back["images"][0]["words"], 2, 2)[0] == 4
