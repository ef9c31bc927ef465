"""A pasted image leaves the context after its window and ``view("sha256:...")`` brings
it back, on every wire, judged by the reference model's OCR of what it received."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.e2e.conftest import WIRES, make_agent, seen, view_call
from visus.agent import Agent, PastedImage
from visus.reference.grid import make_grid, score_grid

_DIGEST = re.compile(r'view\("(sha256:[0-9a-f]{12,64})"\)')


@pytest.mark.parametrize("wire", WIRES)
async def test_pasted_image_is_elided_then_viewed_again_by_digest(
    reference_url: str, tmp_path: Path, wire: str, agents: list[Agent]
) -> None:
    agent = make_agent(reference_url, wire, tmp_path)  # attachments: 3 turns by default
    agents.append(agent)
    png, expected = make_grid(2, 2, seed=71)

    first = await agent.run_turn("s", "What is this?", [PastedImage(png, filename="g.png")])
    assert score_grid(expected, seen(first.answer)["images"][0]["words"], 2, 2)[0] == 4
    for _ in range(2):  # turns 2 and 3: still live
        assert len(seen((await agent.run_turn("s", "and now?")).answer)["images"]) == 1

    fourth = seen((await agent.run_turn("s", "and now?")).answer)
    assert fourth["images"] == []
    (descriptor,) = fourth["descriptors"]
    assert "g.png pasted in turn 1" in descriptor
    ref = _DIGEST.search(descriptor)
    assert ref is not None, descriptor

    back = seen((await agent.run_turn("s", view_call(ref.group(1)[:19]))).answer)
    assert len(back["images"]) == 1
    assert score_grid(expected, back["images"][0]["words"], 2, 2)[0] == 4
