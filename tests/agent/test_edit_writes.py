"""Redteam (issue 23): the edit tool writes only the file it was asked to, inside the roots.

Its temporary file had a fixed name next to the target (``.NAME.visus-tmp``), written
by following symlinks: anyone able to write into a root (another local user of a shared
folder, another tool) could plant that name as a symlink and have the next edit write
the agent's text to any file the server can write, then swap the target for the link.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import pytest

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


class _SwapAfterCheck(Reach):
    """A reach whose next check is followed at once by ``then`` (the attacker's move in
    the window between the edit tool's reach check and its write)."""

    then: ClassVar[list[Callable[[], None]]] = []

    def resolve(self, ref: str | os.PathLike[str]) -> Path:
        resolved = super().resolve(ref)
        while self.then:
            self.then.pop()()
        return resolved


def _swap_folder(folder: Path, target: Path) -> None:
    folder.rename(folder.with_name(folder.name + "-moved"))
    folder.symlink_to(target)


def _swap_file(file: Path, target: Path) -> None:
    file.unlink()
    file.symlink_to(target)


@pytest.mark.parametrize("swap", ["folder", "file"])
async def test_a_path_swapped_for_a_symlink_after_the_check_is_not_written_through(
    tmp_path: Path, swap: str
) -> None:
    """Issue 23 (left open): the edit tool checked the path, then read and wrote it by
    name; a folder swapped for a symlink in between sent the write outside the roots.
    The attacker's copy outside holds the same text, so the freshness check passed."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    text = "one\ntwo\n"
    (root / "sub" / "notes.txt").write_text(text)
    (outside / "notes.txt").write_text(text)
    ctx = ToolContext(
        reach=_SwapAfterCheck([root]), model=get_model("claude-sonnet-4-6"), blobs=MemoryBlobStore()
    )
    registry = ToolRegistry.builtin()
    assert not (await registry.call("read", {"path": "sub/notes.txt"}, ctx)).is_error
    if swap == "folder":
        _SwapAfterCheck.then.append(lambda: _swap_folder(root / "sub", outside))
    else:
        _SwapAfterCheck.then.append(
            lambda: _swap_file(root / "sub" / "notes.txt", outside / "notes.txt")
        )
    edit = {"path": "sub/notes.txt", "old_string": "two", "new_string": "PWNED"}
    outcome = await registry.call("edit", edit, ctx)
    assert not _SwapAfterCheck.then, "the swap ran"
    assert outcome.is_error, outcome
    assert "outside the allowed roots" in outcome.parts[0].text  # type: ignore[union-attr]
    assert (outside / "notes.txt").read_text() == text
    assert sorted(p.name for p in outside.iterdir()) == ["notes.txt"]  # no temp file left
    assert not any("PWNED" in p.read_text() for p in root.rglob("*.txt") if p.is_file())
