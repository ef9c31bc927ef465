"""A tool image that left the context reaches the model as its descriptor, in plain
words on every wire (Gemini's tool output is JSON, so there it follows the function
responses as text), and the model that follows it as written sees the same pixels."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import WIRES, make_agent, seen, view_call
from visus.agent import Agent
from visus.reference.grid import make_grid, score_grid


@pytest.mark.parametrize("wire", WIRES)
async def test_an_elided_view_is_followed_from_its_descriptor_as_written(
    reference_url: str, tmp_path: Path, wire: str, agents: list[Agent]
) -> None:
    agent = make_agent(reference_url, wire, tmp_path)  # live_turns=1
    agents.append(agent)
    png, expected = make_grid(2, 2, seed=123)
    (tmp_path / "work" / "grid.png").write_bytes(png)
    first = await agent.run_turn("s", view_call("grid.png"))
    assert score_grid(expected, seen(first.answer)["images"][0]["words"], 2, 2)[0] == 4

    second = seen((await agent.run_turn("s", "and now?")).answer)
    assert second["images"] == []
    (descriptor,) = second["descriptors"]
    assert descriptor.startswith('[image elided: call view("sha256:')
    assert '\\"' not in descriptor  # the quotes the model reads, not JSON's escapes

    # The model asks about the picture: it calls what the descriptor says.
    third = await agent.run_turn("s", "What did the picture say?")
    data = seen(third.answer)
    assert len(data["images"]) == 1
    assert score_grid(expected, data["images"][0]["words"], 2, 2)[0] == 4
