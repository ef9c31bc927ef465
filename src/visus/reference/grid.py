"""Guess-proof grid images for end-to-end tests of perception.

A grid holds one random nonsense word per cell, each drawn in a random,
non-obvious shade of a palette colour on white. Nothing about the words or
their placement can be guessed from a prompt, so a model (or the reference
model) can only answer correctly if it really received the pixels.

Example:
    >>> png, expected = make_grid(2, 2, seed=7)
    >>> png[:8] == b"\\x89PNG\\r\\n\\x1a\\n", len(expected)
    (True, 4)
    >>> word, row, col, colour = expected[0]
    >>> (row, col)
    (0, 0)
"""

from __future__ import annotations

import io
import random
from functools import lru_cache

from PIL import Image, ImageDraw, ImageFont

from visus.media import font_path
from visus.reference.palette import hex_of, nearest_colour

__all__ = ["GRID_COLOURS", "make_grid", "score_grid"]

#: Palette names a grid draws words in: all legible on white and far apart in CIELAB.
GRID_COLOURS: tuple[str, ...] = (
    "red",
    "orange",
    "green",
    "teal",
    "blue",
    "purple",
    "magenta",
    "brown",
)

# Letters that OCR rarely confuses with one another or with digits (no i/l/o/c/e pairs
# like rn/m); nonsense words come from consonant-vowel syllables over these.
# v and w are left out: OCR reads a small "v" as "y" now and then (seen in CI-like runs).
_CONSONANTS = "bdfghkmnprstz"
_VOWELS = "aou"
_LOWER_SHAPES = frozenset("bdfghkmnpr")
_CELL_W = 300
_CELL_H = 130
_FONT_PX = 40


@lru_cache(maxsize=1)
def _font_path() -> str:
    return font_path("DejaVuSans.ttf")


def _word(rng: random.Random) -> str:
    syllables = rng.randint(3, 4)
    out = "".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(syllables))
    if rng.random() < 0.5:
        out += rng.choice(_CONSONANTS)
    # Letters like s, u, v, w, z look the same in both cases; two distinctly
    # lower-case letters keep OCR from reading the whole word as capitals.
    if sum(ch in _LOWER_SHAPES for ch in out) < 2:
        return _word(rng)
    return out


def _shade(rng: random.Random, name: str) -> tuple[int, int, int]:
    """A random shade of ``name`` that still classifies as ``name``."""
    base = bytes.fromhex(hex_of(name)[1:])
    while True:
        rgb = tuple(max(0, min(255, c + rng.randint(-28, 28))) for c in base)
        shade = (rgb[0], rgb[1], rgb[2])
        if nearest_colour(shade) == name:
            return shade


def make_grid(rows: int, cols: int, seed: int) -> tuple[bytes, list[tuple[str, int, int, str]]]:
    """Draw a ``rows`` x ``cols`` grid of random words; return PNG bytes and the truth.

    ``expected`` lists ``(word, row, col, colour_name)`` in row-major order; rows and
    columns count from 0. The same seed always gives the same image.
    """
    if rows < 1 or cols < 1:
        raise ValueError("a grid needs at least one row and one column")
    rng = random.Random(seed)
    font = ImageFont.truetype(_font_path(), _FONT_PX)
    image = Image.new("RGB", (cols * _CELL_W, rows * _CELL_H), (255, 255, 255))
    draw = ImageDraw.Draw(image)
    # Light separators make it a grid for a human eye; they are far too faint to
    # count as ink for the colour measurement and too thin for OCR to read.
    for c in range(1, cols):
        draw.line([(c * _CELL_W, 0), (c * _CELL_W, rows * _CELL_H)], fill=(225, 225, 225))
    for r in range(1, rows):
        draw.line([(0, r * _CELL_H), (cols * _CELL_W, r * _CELL_H)], fill=(225, 225, 225))
    used: set[str] = set()
    expected: list[tuple[str, int, int, str]] = []
    for r in range(rows):
        for c in range(cols):
            word = _word(rng)
            while word in used:
                word = _word(rng)
            used.add(word)
            name = rng.choice(GRID_COLOURS)
            cx = c * _CELL_W + _CELL_W / 2
            cy = r * _CELL_H + _CELL_H / 2
            draw.text((cx, cy), word, font=font, fill=_shade(rng, name), anchor="mm")
            expected.append((word, r, c, name))
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue(), expected


def score_grid(
    expected: list[tuple[str, int, int, str]],
    words: list[dict[str, object]],
    rows: int,
    cols: int,
) -> tuple[int, int]:
    """Count expected words found in their own cell, and those also in the right colour.

    ``words`` are the reference model's JSON words (``text``, ``x``, ``y``, ``color``):
    a word counts only when a seen word with that exact text has its centre inside
    the word's cell, so naming words anywhere else scores nothing.
    """
    placed = coloured = 0
    for word, row, col, colour in expected:
        for seen in words:
            x, y = seen.get("x"), seen.get("y")
            text = seen.get("text")
            if not isinstance(text, str) or text.lower() != word or not isinstance(x, float | int):
                continue
            if not isinstance(y, float | int):
                continue
            if int(x * cols) == col and int(y * rows) == row:
                placed += 1
                coloured += seen.get("color") == colour
                break
    return placed, coloured
