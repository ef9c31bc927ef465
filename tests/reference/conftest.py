"""Shared fixtures: one reference server per session and fresh, random grids."""

from __future__ import annotations

import base64
import json
import os
import random
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from visus.reference.grid import make_grid, score_grid
from visus.reference.server import serve_in_background

_JSON_BLOCK = re.compile(r"```json\n(.*?)\n```", re.S)


@dataclass(frozen=True)
class Grid:
    png: bytes
    expected: list[tuple[str, int, int, str]]
    rows: int
    cols: int
    seed: int

    @property
    def b64(self) -> str:
        return base64.b64encode(self.png).decode()

    @property
    def data_url(self) -> str:
        return "data:image/png;base64," + self.b64


def _grid(rows: int, cols: int) -> Grid:
    # Stable by default, so a CI run is reproducible; VISUS_GRID_SEED=random draws a
    # fresh one (the seed is in the Grid, so a failure names it).
    chosen = os.environ.get("VISUS_GRID_SEED", "")
    if chosen == "random":
        seed = random.SystemRandom().randrange(1 << 30)
    else:
        seed = int(chosen) if chosen else zlib.crc32(f"{rows}x{cols}".encode())
    png, expected = make_grid(rows, cols, seed)
    return Grid(png, expected, rows, cols, seed)


@pytest.fixture(scope="session")
def grid2() -> Grid:
    """A fresh 2x2 grid (new random words and colours every run)."""
    return _grid(2, 2)


@pytest.fixture(scope="session")
def grid3() -> Grid:
    """A fresh 3x3 grid."""
    return _grid(3, 3)


@pytest.fixture(scope="session")
def base_url() -> Iterator[str]:
    with serve_in_background() as url:
        yield url


@pytest.fixture(scope="session")
def small_url() -> Iterator[str]:
    """A server whose model has a 2000-token context window."""
    with serve_in_background(context_tokens=2000) as url:
        yield url


def answer_json(text: str) -> dict[str, Any]:
    """The one fenced JSON block of a reference answer."""
    blocks = _JSON_BLOCK.findall(text)
    assert len(blocks) == 1, text
    data: dict[str, Any] = json.loads(blocks[0])
    return data


def assert_grid_seen(text: str, grid: Grid, image_index: int = 1) -> None:
    """Every word of ``grid`` is in its own cell, in its own colour, in image ``image_index``."""
    data = answer_json(text)
    image = next(im for im in data["images"] if im["index"] == image_index)
    placed, coloured = score_grid(grid.expected, image["words"], grid.rows, grid.cols)
    n = len(grid.expected)
    assert (placed, coloured) == (n, n), (grid.seed, grid.expected, image["words"])
