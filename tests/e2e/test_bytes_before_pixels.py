"""Bytes before pixels, end to end: an agent that viewed twelve noise screens, over the
request's image budget together, sends all twelve, re-encoded, and the reference model
reads the word on every one from what it received over HTTP.

Anthropic's budget (30 MB of base64 for a request's images) against twelve 1200x900
screens (~3.2 MB each as PNG) is the case; here a quarter of each: 600x450 screens
(~0.8 MB each) and a 7.5 MB budget, so their base64 is 1.7 times the budget as there,
with a quarter of the noise to encode and read (a minute of the suite before).
"""

from __future__ import annotations

import dataclasses
import io
import json
import random
from pathlib import Path
from types import MappingProxyType

import pytest
from PIL import Image, ImageDraw, ImageFont

from tests.e2e.conftest import seen
from visus import limits, wire
from visus.agent import Agent, build_agent
from visus.media import font_path
from visus.providers import ProviderSettings
from visus.retention import RetentionPolicy

SIZE = (600, 450)
BUDGET = limits.ANTHROPIC_MAX_REQUEST_IMAGE_B64 // 4


def _noise_screen(seed: int) -> tuple[bytes, str]:
    rng = random.Random(seed)
    width, height = SIZE
    im = Image.frombytes("RGB", SIZE, rng.randbytes(width * height * 3))
    word = "".join(rng.choice("bdfgkmnprst") + rng.choice("aou") for _ in range(3))
    draw = ImageDraw.Draw(im)
    x, y = width // 2, height // 2
    draw.rectangle((x - 200, y - 40, x + 200, y + 40), fill=(245, 245, 240))
    font = ImageFont.truetype(str(font_path("DejaVuSans.ttf")), 40)
    draw.text((x, y), word, font=font, fill=(20, 20, 30), anchor="mm")
    buf = io.BytesIO()
    im.save(buf, "PNG", compress_level=1)
    return buf.getvalue(), word


@pytest.fixture
def small_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """Anthropic's wire with :data:`BUDGET` for a request's images."""
    spec = wire.WIRES["anthropic"]
    rules = dataclasses.replace(spec.rules, max_request_image_bytes=BUDGET)
    wires = {**wire.WIRES, "anthropic": dataclasses.replace(spec, rules=rules)}
    monkeypatch.setattr(wire, "WIRES", MappingProxyType(wires))


@pytest.mark.usefixtures("small_budget")
async def test_twelve_noise_screens_all_reach_the_model_and_are_read(
    reference_url: str, tmp_path: Path, agents: list[Agent]
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    words = []
    sent = 0
    for n in range(12):
        png, word = _noise_screen(n)
        (work / f"s{n}.png").write_bytes(png)
        words.append(word)
        sent += (len(png) + 2) // 3 * 4
    assert sent > BUDGET * 5 // 4  # as PNGs they are far over the budget
    agent = build_agent(
        "reference:anthropic",
        data=tmp_path / "data",
        roots=[work],
        settings=ProviderSettings(reference_url=reference_url, backoff_base=0.01, env={}),
        policy=RetentionPolicy(live_images=12, image_chunk=12),
    )
    agents.append(agent)
    paths = json.dumps([{"path": f"s{n}.png"} for n in range(12)])
    result = await agent.run_turn("s", f"each view {paths}")
    data = seen(result.answer)
    assert data["descriptors"] == []  # none left out for the request's budget
    assert len(data["images"]) == 12
    for image, word in zip(data["images"], words, strict=True):
        assert (image["width"], image["height"]) == SIZE
        assert word in [w["text"] for w in image["words"]]
