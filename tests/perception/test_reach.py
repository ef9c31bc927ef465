"""Reach: roots resolved after symlinks; nothing outside them is reachable."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from visus.errors import (
    InvalidInputError,
    NotFoundError,
    ReachError,
    TooLargeError,
    UnsupportedTypeError,
)
from visus.perception import Reach


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    (root / "a.txt").write_text("a")
    (root / "sub" / "b.txt").write_text("b")
    (outside / "secret.txt").write_text("secret")
    return root, outside


def test_resolves_relative_and_absolute(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    reach = Reach([root])
    assert reach.resolve("a.txt") == (root / "a.txt").resolve()
    assert reach.resolve(root / "sub" / "b.txt") == (root / "sub" / "b.txt").resolve()
    assert reach.resolve("sub/../a.txt") == (root / "a.txt").resolve()


def test_traversal_is_outside_reach(tree: tuple[Path, Path]) -> None:
    root, outside = tree
    reach = Reach([root])
    with pytest.raises(ReachError):
        reach.resolve("../outside/secret.txt")
    with pytest.raises(ReachError):
        reach.resolve(outside / "secret.txt")
    # A missing file outside is refused the same way: existence is not leaked.
    with pytest.raises(ReachError):
        reach.resolve("../outside/nope.txt")


def test_symlink_leaving_root_is_outside_reach(tree: tuple[Path, Path]) -> None:
    root, outside = tree
    (root / "link.txt").symlink_to(outside / "secret.txt")
    (root / "dirlink").symlink_to(outside, target_is_directory=True)
    (root / "dangling").symlink_to(outside / "missing.txt")
    reach = Reach([root])
    for ref in ["link.txt", "dirlink/secret.txt", "dangling"]:
        with pytest.raises(ReachError):
            reach.resolve(ref)


def test_symlink_inside_root_is_followed(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    (root / "alias.txt").symlink_to(root / "sub" / "b.txt")
    assert Reach([root]).resolve("alias.txt") == (root / "sub" / "b.txt").resolve()


def test_root_given_through_a_symlink(tree: tuple[Path, Path], tmp_path: Path) -> None:
    root, _ = tree
    (tmp_path / "rootlink").symlink_to(root, target_is_directory=True)
    reach = Reach([tmp_path / "rootlink"])
    assert reach.roots == (root.resolve(),)
    assert reach.resolve("a.txt") == (root / "a.txt").resolve()


def test_missing_directory_and_special_files(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    reach = Reach([root])
    with pytest.raises(NotFoundError):
        reach.resolve("nope.png")
    with pytest.raises(InvalidInputError, match="directory"):
        reach.resolve("sub")
    os.mkfifo(root / "fifo")
    with pytest.raises(UnsupportedTypeError):
        reach.resolve("fifo")


@pytest.mark.parametrize("ref", ["", "   ", "a\x00b"])
def test_malformed_refs(tree: tuple[Path, Path], ref: str) -> None:
    with pytest.raises(InvalidInputError):
        Reach([tree[0]]).resolve(ref)


def test_symlink_loop(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    (root / "loop1").symlink_to(root / "loop2")
    (root / "loop2").symlink_to(root / "loop1")
    with pytest.raises((InvalidInputError, ReachError, NotFoundError)):
        Reach([root]).resolve("loop1")


def test_multiple_roots_and_value_semantics(tree: tuple[Path, Path]) -> None:
    root, outside = tree
    reach = Reach([root, str(outside)], render=False)
    assert reach.resolve(outside / "secret.txt").name == "secret.txt"
    assert reach.render is False
    assert reach == Reach([root, outside], render=False)
    assert hash(reach) == hash(Reach([root, outside], render=False))
    with pytest.raises(AttributeError):
        reach.render = True  # type: ignore[misc]


def test_no_roots_reaches_nothing(tree: tuple[Path, Path]) -> None:
    with pytest.raises(ReachError):
        Reach([]).resolve(tree[0] / "a.txt")


def test_cwd(tree: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    root, _ = tree
    monkeypatch.chdir(root)
    assert Reach.cwd().resolve("a.txt") == (root / "a.txt").resolve()
    assert Reach.cwd(render=False).render is False


def test_read_bytes_bound(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    (root / "big.bin").write_bytes(b"x" * 100)
    reach = Reach([root])
    path = reach.resolve("big.bin")
    assert reach.read_bytes(path, max_bytes=100) == b"x" * 100
    with pytest.raises(TooLargeError):
        reach.read_bytes(path, max_bytes=99)


def test_read_bytes_refuses_a_path_that_leaves_the_roots(tree: tuple[Path, Path]) -> None:
    # As if a directory were swapped for a symlink between resolve() and the read.
    root, outside = tree
    (root / "swapped").symlink_to(outside, target_is_directory=True)
    reach = Reach([root])
    if not Path("/proc/self/fd").is_dir():
        pytest.skip("the OS does not name open files")
    with pytest.raises(ReachError):
        reach.read_bytes(root / "swapped" / "secret.txt")
    assert reach.read_bytes(root / "sub" / "b.txt") == b"b"
