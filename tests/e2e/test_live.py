"""Live: the grid test through the real agent loop against real providers.

Each case runs only when its key (or host) is set. The model must call the ``view``
tool itself on a freshly drawn 2x2 grid of random nonsense words, then answer in a
fixed JSON shape; the answer is scored by position, so naming the words in the wrong
cells fails. Nothing about the words can be guessed from the prompt.

Run e.g. ``OPENAI_API_KEY=... .venv/bin/pytest -m live tests/e2e/test_live.py``.
``VISUS_LIVE_<NAME>_MODEL`` overrides a case's model (e.g. VISUS_LIVE_OLLAMA_MODEL: on
Ollama, llama3.2-vision refuses tool definitions, see ollama/ollama#8345; a vision model
with tool support such as qwen2.5vl passes through the same test).
"""

from __future__ import annotations

import json
import os
import random
import re
from pathlib import Path
from typing import Any

import pytest

from visus.agent import build_agent
from visus.errors import ProviderError
from visus.providers import ProviderSettings
from visus.record.messages import ImagePart, ToolResult
from visus.reference.grid import make_grid

CASES = [
    ("openai", ("OPENAI_API_KEY",), "openai:gpt-4.1-mini"),
    ("anthropic", ("ANTHROPIC_API_KEY",), "anthropic:claude-haiku-4-5"),
    ("gemini", ("GEMINI_API_KEY", "GOOGLE_API_KEY"), "gemini:gemini-2.5-flash"),
    ("openrouter", ("OPENROUTER_API_KEY",), "openai-compatible:openai/gpt-4.1-mini"),
    ("ollama", ("OLLAMA_HOST",), "ollama:llama3.2-vision"),
]

PROMPT = (
    "Use the view tool on grid.png, then answer. The image is a 2x2 grid with one "
    "made-up word in each cell. Reply with only this JSON and nothing else, each "
    'placeholder replaced by the word in that cell, exactly as written: {"cells": '
    '[["w00", "w01"], ["w10", "w11"]]} where w00 is the top-left cell, w01 top-right, '
    "w10 bottom-left and w11 bottom-right."
)

_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


def cells_of(answer: str) -> list[list[str]]:
    """The ``cells`` grid from an answer (tolerating a code fence around the JSON)."""
    match = _OBJECT.search(answer)
    assert match, f"no JSON object in the answer: {answer!r}"
    data: Any = json.loads(match.group(0))
    cells = data["cells"]
    assert isinstance(cells, list), answer
    return [[str(w).strip().lower() for w in row] for row in cells]


def score(expected: list[tuple[str, int, int, str]], cells: list[list[str]]) -> int:
    """Words the answer put in their own cell."""
    placed = 0
    for word, row, col, _colour in expected:
        if row < len(cells) and col < len(cells[row]) and cells[row][col] == word:
            placed += 1
    return placed


def test_score_counts_position_not_presence() -> None:
    expected = [("baka", 0, 0, "red"), ("dugo", 0, 1, "blue"), ("fumo", 1, 0, "red")]
    assert score(expected, [["baka", "dugo"], ["fumo", "x"]]) == 3
    assert score(expected, [["dugo", "baka"], ["x", "fumo"]]) == 0  # all named, none placed
    assert cells_of('```json\n{"cells": [["A", "b"]]}\n```') == [["a", "b"]]


@pytest.mark.live
@pytest.mark.parametrize(("name", "env", "ref"), CASES, ids=[c[0] for c in CASES])
async def test_live_agent_views_grid_and_places_every_word(
    name: str, env: tuple[str, ...], ref: str, tmp_path: Path
) -> None:
    if not any(os.environ.get(v) for v in env):
        pytest.skip(f"set {' or '.join(env)} to run the live {name} grid test")
    ref = os.environ.get(f"VISUS_LIVE_{name.upper()}_MODEL", ref)
    seed = random.SystemRandom().randrange(1 << 30)
    png, expected = make_grid(2, 2, seed=seed)
    work = tmp_path / "work"
    work.mkdir()
    (work / "grid.png").write_bytes(png)

    agent = build_agent(
        ref,
        data=tmp_path / "data",
        roots=[work],
        settings=ProviderSettings(max_retries=2),
    )
    deltas: list[str] = []
    try:
        result = await agent.run_turn("live", PROMPT, on_delta=deltas.append)
    except ProviderError as e:
        if "does not support tools" in str(e):
            pytest.xfail(f"{ref} cannot take tool definitions: {e}")
        raise
    finally:
        await agent.aclose()

    # The model called view itself and the pixels came back as a real image part.
    views = [m for m in result.messages if isinstance(m, ToolResult) and m.tool_name == "view"]
    assert views, f"the model never called view: {result.answer!r}"
    assert any(isinstance(p, ImagePart) for m in views for p in m.parts)
    assert result.stopped == "answer"
    assert result.steps >= 2

    cells = cells_of(result.answer)
    truth = [[w for w, r, _c, _ in expected if r == row] for row in range(2)]
    assert score(expected, cells) == 4, f"seed {seed}: expected {truth}, got {cells}"
    assert result.usage.input_tokens > 0
    assert "".join(deltas).strip() != ""
