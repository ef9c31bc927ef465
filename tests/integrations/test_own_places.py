"""Redteam (issue 23): an integration's view and read never reach visus's own files.

The framework's model is as hostile as any client (its prompt may carry someone
else's words). Whatever roots the application gives the integration, the data folder
(session records, blobs), the configuration file and the integration's own blob store
stay out of reach, as they do for visus's own agent.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from PIL import Image

from visus.agent.options import VisionOptions
from visus.integrations.core import VisionCore
from visus.record.blobs import FileBlobStore


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home folder that holds visus's data folder and configuration file, and a
    picture the application means the model to see."""
    data = tmp_path / ".local/share/visus"
    (data / "sessions").mkdir(parents=True)
    (data / "sessions" / "s1.jsonl").write_text('{"text": "a private conversation"}\n')
    config = tmp_path / ".config/visus/visus.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[server]\ntoken = "hunter2"\n')
    monkeypatch.setenv("VISUS_DATA", str(data))
    monkeypatch.setenv("VISUS_CONFIG", str(config))
    Image.new("RGB", (16, 16), "red").save(tmp_path / "shot.png")
    return tmp_path


def _call(core: VisionCore, tool: str, path: str) -> str:
    """The text the model reads back; a refusal's is marked an error."""
    spec = core.model_spec("claude-sonnet-4-6", "anthropic")
    seen = asyncio.run(core.call(tool, {"path": path}, spec))
    assert seen.is_error == seen.text.startswith("refused ("), seen.text
    return seen.text


OUT_OF_REACH = "refused (outside_reach)"


@pytest.mark.parametrize("tool", ["read", "view"])
@pytest.mark.parametrize(
    "path", [".local/share/visus/sessions/s1.jsonl", ".config/visus/visus.toml"]
)
def test_the_data_folder_and_the_configuration_are_out_of_reach(
    home: Path, tool: str, path: str
) -> None:
    core = VisionCore(
        VisionOptions.of([home])
    )  # the data folder: $VISUS_DATA, as the application left it
    text = _call(core, tool, path)
    assert text.startswith(OUT_OF_REACH), text
    assert "private" not in text
    assert "hunter2" not in text
    assert not _call(core, "view", "shot.png").startswith("refused")  # the roots still work


def test_an_explicit_data_folder_and_its_blobs_are_out_of_reach(home: Path) -> None:
    data = home / "app-data"
    (data / "sessions").mkdir(parents=True)
    (data / "sessions" / "s2.jsonl").write_text("private\n")
    core = VisionCore(VisionOptions.of([home], data=data))
    blob = core.blobs.put((home / "shot.png").read_bytes(), "image/png")
    assert isinstance(core.blobs, FileBlobStore)
    stored = str(core.blobs.path(blob))
    for tool, path in [("read", "app-data/sessions/s2.jsonl"), ("view", stored)]:
        assert _call(core, tool, path).startswith(OUT_OF_REACH), path


def test_a_blob_store_the_application_gives_is_out_of_reach(home: Path) -> None:
    core = VisionCore(VisionOptions.of([home], blobs=FileBlobStore(home / "app-blobs")))
    blob = core.blobs.put((home / "shot.png").read_bytes(), "image/png")
    assert isinstance(core.blobs, FileBlobStore)
    assert _call(core, "view", str(core.blobs.path(blob))).startswith(OUT_OF_REACH)
