"""The real agent loop, over real HTTP, on every wire, against the reference model.

The reference model perceives only real image parts (OCR + colour), so these tests
fail if an image is stringified, dropped or misplaced anywhere between the view tool
and the provider's wire. Scoring is by position: a word counts only in its own cell.
"""

from __future__ import annotations

import re
import zlib
from pathlib import Path

import pytest

from tests.e2e.conftest import WIRES, make_agent, seen, view_call
from visus.agent import Agent
from visus.reference.grid import make_grid, score_grid


@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize(("rows", "cols"), [(2, 2), (3, 3)])
async def test_agent_views_grid_and_places_every_word(
    reference_url: str, tmp_path: Path, wire: str, rows: int, cols: int, agents: list[Agent]
) -> None:
    agent = make_agent(reference_url, wire, tmp_path)
    agents.append(agent)
    # A stable seed per case: fresh nonsense the model cannot guess, and the same run
    # after run (Python's str hash is salted per process).
    png, expected = make_grid(rows, cols, seed=zlib.crc32(f"{wire}-{rows}".encode()))
    (tmp_path / "work" / "grid.png").write_bytes(png)

    result = await agent.run_turn("s1", view_call("grid.png"))

    assert result.stopped == "answer"
    assert result.steps == 2  # the tool call, then the answer
    data = seen(result.answer)
    assert len(data["images"]) == 1
    placed, coloured = score_grid(expected, data["images"][0]["words"], rows, cols)
    assert placed == rows * cols, (expected, data["images"][0]["words"])
    assert coloured >= rows * cols - 1
    assert result.usage.input_tokens > 0
    assert result.notes == ()  # no image was refused and silently elided on the way


@pytest.mark.parametrize("wire", WIRES)
async def test_cross_turn_live_then_elided_then_viewed_again(
    reference_url: str, tmp_path: Path, wire: str, agents: list[Agent]
) -> None:
    agent = make_agent(reference_url, wire, tmp_path, live_turns=2)
    agents.append(agent)
    png, expected = make_grid(2, 2, seed=99)
    (tmp_path / "work" / "grid.png").write_bytes(png)

    first = await agent.run_turn("s", view_call("grid.png"))
    assert score_grid(expected, seen(first.answer)["images"][0]["words"], 2, 2)[0] == 4

    # Turn 2: still inside live_turns=2, the model still sees the pixels.
    second = await agent.run_turn("s", "What was in the picture?")
    data = seen(second.answer)
    assert len(data["images"]) == 1
    assert score_grid(expected, data["images"][0]["words"], 2, 2)[0] == 4

    # Turn 3: the window has passed; the model sees a descriptor, not pixels.
    third = await agent.run_turn("s", "And now?")
    data = seen(third.answer)
    assert data["images"] == []
    # The descriptor names one digest, the image's own, and how to see it again.
    refs = {m for d in data["descriptors"] for m in re.findall(r'view\("(sha256:[0-9a-f]+)"\)', d)}
    assert len(refs) == 1, data["descriptors"]

    # Turn 4: viewing that digest restores exactly what was seen.
    fourth = await agent.run_turn("s", view_call(refs.pop()))
    data = seen(fourth.answer)
    assert len(data["images"]) == 1
    assert score_grid(expected, data["images"][0]["words"], 2, 2)[0] == 4

    # Turn 5: and so does viewing the file again.
    fifth = await agent.run_turn("s", view_call("grid.png"))
    data = seen(fifth.answer)
    assert len(data["images"]) == 1
    assert score_grid(expected, data["images"][0]["words"], 2, 2)[0] == 4
