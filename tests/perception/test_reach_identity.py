"""Redteam (issue 23): visus's own places are denied by what they are, not how they are spelled.

The deny-list compared resolved path strings. On a case-insensitive file system (macOS's
default APFS, Windows) ``.../Application Support/VISUS/sessions`` is the data folder
``.../Application Support/visus``, yet its spelling is not under it; a bind mount (or any
second mount of the same folder) is the same on Linux. Both reached session records.
Here the second spelling is a bind mount, which needs the right to mount.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from visus.agent.policy import guarded_reach
from visus.errors import ReachError


@pytest.fixture
def second_spelling(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """The data folder, and the same folder mounted again under the root."""
    data = tmp_path / "data"
    (data / "sessions").mkdir(parents=True)
    (data / "files").mkdir()
    (data / "sessions" / "s1.jsonl").write_text("a private conversation\n")
    (data / "files" / "chart.txt").write_text("for the agents\n")
    root = tmp_path / "root"
    again = root / "mirror"
    again.mkdir(parents=True)
    mounted = subprocess.run(["mount", "--bind", str(data), str(again)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("no permission to bind-mount here (CI runs it where it may)")
    try:
        yield root, again
    finally:
        subprocess.run(["umount", str(again)], check=True)


def test_a_second_spelling_of_the_data_folder_is_denied(
    second_spelling: tuple[Path, Path], tmp_path: Path
) -> None:
    root, again = second_spelling
    reach = guarded_reach([root], data=[tmp_path / "data"])
    with pytest.raises(ReachError, match="visus's own files"):
        reach.resolve(str(again / "sessions" / "s1.jsonl"))
    # The files folder handed to agents stays reachable under any spelling.
    assert reach.resolve(str(again / "files" / "chart.txt")) == again / "files" / "chart.txt"
