"""Only what changed, end to end: a screen that differs from the one before it in a small
area reaches the model as that area's crop (and a note), on every wire that can place
them, and the reference model reads the change from the crop it received over HTTP.

The screens are the nearsame editor (tests/nearsame.py) with a nonsense word in its
status bar, so only pixels that really arrived can answer.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from tests.e2e.conftest import WIRES, make_agent, seen, view_call
from tests.nearsame import HEIGHT, WIDTH, Screen, draw
from visus.agent import Agent
from visus.record.messages import ImagePart, ToolResult

_DIGEST = re.compile(r"sha256:([0-9a-f]{16})")


def _word(seed: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice("bdfgkmnprst") + rng.choice("aou") for _ in range(3)).capitalize()


def _screens(work: Path, seed: int) -> str:
    word = _word(seed)
    (work / "before.png").write_bytes(draw(Screen()))
    (work / "after.png").write_bytes(draw(Screen(status=word)))
    return word


def _each(*paths: str) -> str:
    return "each view " + json.dumps([{"path": p} for p in paths])


def _words(image: dict[str, object]) -> list[str]:
    words = image["words"]
    assert isinstance(words, list)
    return [str(w["text"]) for w in words]


@pytest.mark.parametrize("wire", WIRES)
async def test_a_small_change_arrives_as_its_crop_and_is_read(
    reference_url: str, tmp_path: Path, wire: str, agents: list[Agent]
) -> None:
    agent = make_agent(reference_url, wire, tmp_path)
    agents.append(agent)
    word = _screens(tmp_path / "work", seed=len(wire))

    result = await agent.run_turn("s", _each("before.png", "after.png"))
    images = seen(result.answer)["images"]
    assert len(images) == 2
    assert (images[0]["width"], images[0]["height"]) == (WIDTH, HEIGHT)  # the base, whole
    assert word in _words(images[1])  # the change, read from what arrived
    record = agent.sessions.load("s").messages
    after = [p for m in record if isinstance(m, ToolResult) for p in m.parts][-1]
    assert isinstance(after, ImagePart)
    assert after.changed_from is not None
    if wire == "ollama":  # no note can stand beside a crop there: the whole screen goes
        assert (images[1]["width"], images[1]["height"]) == (WIDTH, HEIGHT)
    else:
        crop = after.changed_from.crops[0]
        assert len(after.changed_from.crops) == 1
        assert (images[1]["width"], images[1]["height"]) == (crop.width, crop.height)
        assert crop.width * crop.height * 50 < WIDTH * HEIGHT  # a fraction of the pixels


async def test_the_whole_screen_goes_once_its_base_has_left_and_its_digest_shows_it_whole(
    reference_url: str, tmp_path: Path, agents: list[Agent]
) -> None:
    agent = make_agent(reference_url, "anthropic", tmp_path)
    agents.append(agent)
    word = _screens(tmp_path / "work", seed=7)
    await agent.run_turn("s", _each("before.png", "after.png"))
    record = agent.sessions.load("s").messages
    after = [p for m in record if isinstance(m, ToolResult) for p in m.parts][-1]
    assert isinstance(after, ImagePart)

    # Turn 2: both left the live window; the descriptor of the one sent as a crop names
    # its own digest, and viewing that digest shows the whole screen, change included.
    again = seen((await agent.run_turn("s", view_call(f"sha256:{after.digest[:16]}"))).answer)
    assert any(after.digest[:16] in d for d in again["descriptors"])
    (image,) = again["images"]
    assert (image["width"], image["height"]) == (WIDTH, HEIGHT)
    assert word in _words(image)
