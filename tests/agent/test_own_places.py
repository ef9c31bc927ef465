"""visus's own files (configuration, data folder: blobs, session records, logs,
attachments) are out of every agent's reach whatever the roots, on every surface that
builds a reach: `visus run`/`chat` (build_agent), `visus mcp`'s view, and the reach
itself when a symlink leads there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from visus.agent import ToolContext, build_agent
from visus.config import load_config
from visus.mcp_server import view_result
from visus.providers import ProviderSettings
from visus.record.blobs import FileBlobStore

SECRET = "sk-own-secret-1234"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user's folder holding visus's config and data folder, and a project."""
    config = tmp_path / "config" / "visus.toml"
    config.parent.mkdir()
    config.write_text(f'[providers.openai]\napi_key = "{SECRET}"\n')
    monkeypatch.setenv("VISUS_CONFIG", str(config))
    data = tmp_path / "data"
    monkeypatch.setenv("VISUS_DATA", str(data))
    (data / "sessions").mkdir(parents=True)
    (data / "sessions" / "s1.jsonl").write_text('{"kind": "session"}\n')
    (data / "files").mkdir()
    (data / "files" / "shared.txt").write_text("for agents\n")
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "readme.txt").write_text("hello\n")
    (tmp_path / "project" / "conf").symlink_to(config.parent)
    return tmp_path


def _agent(home: Path) -> object:
    return build_agent(
        "reference",
        data=home / "data",
        roots=[home],
        config=load_config(env={}),
        settings=ProviderSettings(reference_url="http://127.0.0.1:9", env={}),
    )


async def test_run_and_chat_agents_never_read_visus_files(home: Path) -> None:
    agent = _agent(home)
    ctx = ToolContext(
        reach=agent.reach,  # type: ignore[attr-defined]
        model=agent.model,  # type: ignore[attr-defined]
        blobs=FileBlobStore(home / "blobs-elsewhere"),
    )
    tools = agent.tools  # type: ignore[attr-defined]
    for path in (
        home / "config" / "visus.toml",
        home / "project" / "conf" / "visus.toml",  # the same file through a symlink
        home / "data" / "sessions" / "s1.jsonl",
    ):
        out = await tools.call("read", {"path": str(path)}, ctx)
        assert out.is_error, path
        assert "visus's own files" in out.parts[0].text, out
        assert SECRET not in out.parts[0].text
    ok = await tools.call("read", {"path": str(home / "project" / "readme.txt")}, ctx)
    assert not ok.is_error
    shared = await tools.call("read", {"path": str(home / "data" / "files" / "shared.txt")}, ctx)
    assert not shared.is_error  # the data folder's files folder is the agents' own


def test_mcp_view_never_shows_visus_files(home: Path) -> None:
    for path in (home / "config" / "visus.toml", home / "data" / "sessions" / "s1.jsonl"):
        result = view_result(str(path), roots=[home])
        assert result.is_error
        refusal = json.loads(result.content[0].text)  # type: ignore[union-attr]
        assert refusal["reason"] == "outside_reach"
        assert "visus's own files" in refusal["message"]
    assert not view_result(str(home / "project" / "readme.txt"), roots=[home]).is_error
