"""Integration fixtures: the reference server on loopback, grids, the answer's JSON."""

from __future__ import annotations

import gc
import io
import json
import os
import random
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from visus import paths
from visus.record.blobs import FileBlobStore
from visus.reference.grid import make_grid, score_grid
from visus.reference.server import serve_in_background

_JSON_BLOCK = re.compile(r"```json\n(.*?)\n```", re.DOTALL)

Grid = tuple[bytes, list[tuple[str, int, int, str]]]


@pytest.fixture(scope="session")
def reference_url() -> Iterator[str]:
    with serve_in_background() as url:
        yield url


def grid(rows: int, cols: int, case: str) -> Grid:
    """A word grid; stable per case unless VISUS_GRID_SEED says random (or a number)."""
    chosen = os.environ.get("VISUS_GRID_SEED", "")
    if chosen == "random":
        seed = random.SystemRandom().randrange(1 << 30)
    elif chosen:
        seed = int(chosen) + zlib.crc32(case.encode())
    else:
        seed = zlib.crc32(case.encode())
    return make_grid(rows, cols, seed)


def enlarged(png: bytes, edge: int) -> bytes:
    """``png`` scaled up so its long side is ``edge`` px (a screenshot too big to send)."""
    from PIL import Image

    with Image.open(io.BytesIO(png)) as im:
        scale = edge / max(im.size)
        big = im.resize((round(im.width * scale), round(im.height * scale)))
    out = io.BytesIO()
    big.save(out, "PNG")
    return out.getvalue()


def assert_view_descriptor(descriptor: str, source: str, turn: int) -> None:
    """``descriptor`` is visus's for a view (of ``source`` in ``turn``, which its call
    and the view's own line say): it offers the one digest that shows exactly it (the
    path may hold another screen by now), and nothing else."""
    pattern = r'\[image elided: call view\("sha256:[0-9a-f]{16}"\) to see it again\]'
    assert re.fullmatch(pattern, descriptor), descriptor


def digests_named(text: str) -> set[str]:
    """The distinct digests ``text`` names (``sha256:`` and 12 or more hex digits)."""
    return set(re.findall(r"sha256:([0-9a-f]{12,})", text))


def assert_zoom_left(view_text: str, descriptor: str) -> None:
    """After a zoom of screen.png in turn 1 and a plain view of the unchanged file in
    turn 2: the plain view's line names one digest, its own, and the zoom's descriptor
    names the zoom's (its region is in the zoom's own line, which stays)."""
    assert_view_descriptor(descriptor, "screen.png", 1)
    assert len(digests_named(view_text)) == 1, view_text
    assert digests_named(descriptor).isdisjoint(digests_named(view_text))


def elided_digest(descriptor: str) -> str:
    """The ``sha256:...`` a descriptor offers to ``view`` again."""
    found = re.search(r'call view\("(sha256:[0-9a-f]{12,64})"\)', descriptor)
    assert found, descriptor
    return found.group(1)


def followed(descriptor: str) -> str:
    """The path a descriptor tells the model to view, exactly as it says it."""
    found = re.search(r'call view\(("(?:[^"\\]|\\.)*")', descriptor)
    assert found, descriptor
    path = json.loads(found.group(1))
    assert isinstance(path, str)
    return path


#: How many times the screenshot file is overwritten in the descriptor-after-overwrite
#: tests (issue 25: a turn-1 descriptor followed after four turns showed turn 4).
SCREENS = 4


def screens(case: str) -> list[Grid]:
    """Four different screens, one per turn, all saved to the same file."""
    return [grid(1, 2, f"{case}-screen-{n}") for n in range(1, SCREENS + 1)]


def shows(image: dict[str, Any], screen: Grid) -> bool:
    """The reference model read every word of ``screen`` in ``image``."""
    return score_grid(screen[1], image["words"], 1, 2)[0] == 2


def seen(answer: str) -> dict[str, Any]:
    """The reference model's JSON block from an answer."""
    blocks = _JSON_BLOCK.findall(answer)
    assert len(blocks) == 1, f"expected one JSON block in the answer: {answer[:400]!r}"
    data = json.loads(blocks[0])
    assert isinstance(data, dict)
    return data


def collect_garbage(data: Path) -> None:
    """``visus gc --grace 0`` on the data folder ``data``, proven to collect there: a
    blob no session names (put in the sessions' store first) is gone after."""
    from typer.testing import CliRunner

    from visus.cli import app

    stray = FileBlobStore(paths.blobs_dir(data)).put(b"no session names this", "image/png")
    out = CliRunner().invoke(app, ["gc", "--data", str(data), "--grace", "0"])
    assert out.exit_code == 0, out.output
    assert not FileBlobStore(paths.blobs_dir(data)).has(stray), out.output


def view_call(path: str) -> str:
    return f"call view {json.dumps({'path': path})}"


@pytest.fixture(autouse=True)
def _collect_framework_garbage() -> Iterator[None]:
    """Run the frameworks' finalizers (their unclosed HTTP clients) inside the test.

    Left to a later collection, they can run in the middle of another test's
    ``ast.parse`` and trip CPython 3.11's "AST constructor recursion depth mismatch".
    """
    yield
    gc.collect()


def zoom_call(path: str, region: list[int]) -> str:
    """The reference model's instruction to view ``region`` of ``path``."""
    return f"call view {json.dumps({'path': path, 'region': region})}"


def words_seen(answer: str) -> set[str]:
    """The words the reference model read in the images of ``answer`` (all of them)."""
    return {
        w["text"] if isinstance(w, dict) else str(w)
        for image in seen(answer)["images"]
        for w in image["words"]
    }
