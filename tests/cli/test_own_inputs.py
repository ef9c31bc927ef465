"""Inputs a newcomer tries on the command line (issue 36): the user at the terminal is
the operator, so ``visus view /abs/path.png`` opens their file (and with ``--root`` the
refusal names the roots and the flag); a truncated PNG is exit 3 with one line naming
the file, for ``visus view`` and ``visus run --image`` alike, however the decoder
failed (Pillow's "truncated", libvips's stacked "unable to write to memory" lines).

Every command runs in its own process, as a newcomer runs it: what it prints on
stderr is all of what they see."""

from __future__ import annotations

import io
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

from visus.reference.server import serve_in_background


def _png(width: int, height: int, seed: int = 1) -> bytes:
    rng = random.Random(seed)
    img = Image.frombytes("RGB", (width, height), rng.randbytes(width * height * 3))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def reference_url() -> Iterator[str]:
    with serve_in_background() as url:
        yield url


@pytest.fixture
def place(tmp_path: Path, reference_url: str) -> tuple[Path, dict[str, str]]:
    """A working folder, and an environment without keys whose data is under tmp_path."""
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and k != "VISUS_DATA"}
    env |= {
        "VISUS_CONFIG": os.devnull,
        "VISUS_DATA": str(tmp_path / "data"),
        "VISUS_REFERENCE_URL": reference_url,
    }
    return work, env


def _visus(
    place: tuple[Path, dict[str, str]], *args: str, stdin: bytes = b""
) -> tuple[int, str, str]:
    work, env = place
    done = subprocess.run(
        [str(Path(sys.executable).with_name("visus")), *args],
        cwd=work,
        env=env,
        input=stdin,
        capture_output=True,
        timeout=300,
    )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def test_view_opens_an_absolute_path_of_the_users_own(
    place: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere" / "shot.png"
    elsewhere.parent.mkdir()
    elsewhere.write_bytes(_png(60, 40))
    code, out, err = _visus(place, "view", str(elsewhere), "--json")
    assert code == 0, err
    assert '"ok": true' in out
    # With --root the user asked for a tool's reach: refused, naming the roots and the flag.
    root = place[0]
    code, out, err = _visus(place, "view", str(elsewhere), "--root", str(root))
    assert code == 3
    (line,) = err.splitlines()
    assert line.startswith("visus: refused (outside_reach): ")
    assert f"--root: {root.resolve()}" in line
    assert "--root DIR" in line


@pytest.mark.parametrize(
    "size",
    [
        (300, 200),  # decoded by Pillow in the calling process: "image file is truncated"
        (3000, 3000),  # shrunk by libvips: "unable to write to memory" + "libpng read error"
    ],
)
def test_a_truncated_png_is_exit_3_with_one_line_naming_it_everywhere(
    place: tuple[Path, dict[str, str]], size: tuple[int, int]
) -> None:
    whole = _png(*size)
    (place[0] / "broken.png").write_bytes(whole[: len(whole) // 2])
    runs = {
        "view": _visus(place, "view", "broken.png"),
        "run --image": _visus(place, "run", "--image", "broken.png", "what is this?"),
        "run, piped": _visus(place, "run", "what is this?", stdin=whole[: len(whole) // 2]),
    }
    for how, (code, out, err) in runs.items():
        assert code == 3, (how, err)
        assert out == "", how
        lines = err.splitlines()
        assert len(lines) == 1, (how, err)
        assert lines[0].startswith("visus: refused (undecodable): "), (how, err)
        name = "stdin" if how == "run, piped" else "broken.png"
        assert name in lines[0], (how, err)
        assert "unable to write to memory" not in lines[0], (how, err)
        assert lines[0].count("be decoded") == 1, (how, err)  # said once, not stuttered
