"""Redteam (issue 23): the edit tool writes only the file it was asked to, inside the roots.

Its temporary file had a fixed name next to the target (``.NAME.visus-tmp``), written
by following symlinks: anyone able to write into a root (another local user of a shared
folder, another tool) could plant that name as a symlink and have the next edit write
the agent's text to any file the server can write, then swap the target for the link.
"""

from __future__ import annotations

from pathlib import Path

from visus.agent import ToolContext, ToolRegistry
from visus.models import get_model
from visus.perception import Reach
from visus.record.blobs import MemoryBlobStore


async def test_a_planted_temporary_name_is_never_followed(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside.txt"
    root.mkdir()
    outside.write_text("the operator's file\n")
    target = root / "notes.txt"
    target.write_text("one\ntwo\n")
    target.chmod(0o750)
    (root / ".notes.txt.visus-tmp").symlink_to(outside)
    ctx = ToolContext(
        reach=Reach([root]), model=get_model("claude-sonnet-4-6"), blobs=MemoryBlobStore()
    )
    registry = ToolRegistry.builtin()
    assert not (await registry.call("read", {"path": "notes.txt"}, ctx)).is_error
    edit = {"path": "notes.txt", "old_string": "two", "new_string": "2"}
    assert not (await registry.call("edit", edit, ctx)).is_error
    assert outside.read_text() == "the operator's file\n"
    assert not target.is_symlink()
    assert target.read_text() == "one\n2\n"
    assert target.stat().st_mode & 0o777 == 0o750  # the file keeps its permissions
    assert sorted(p.name for p in root.iterdir()) == [".notes.txt.visus-tmp", "notes.txt"]
