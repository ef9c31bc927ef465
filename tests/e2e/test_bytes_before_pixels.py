"""Bytes before pixels, end to end: an agent that viewed twelve 1200x900 noise screens
(each ~3.2 MB as PNG, over Anthropic's 32 MB together) sends all twelve, re-encoded, and
the reference model reads the word on every one from what it received over HTTP."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from tests.e2e.conftest import seen
from visus.agent import Agent, build_agent
from visus.media import font_path
from visus.providers import ProviderSettings
from visus.retention import RetentionPolicy


def _noise_screen(seed: int) -> tuple[bytes, str]:
    rng = random.Random(seed)
    im = Image.frombytes("RGB", (1200, 900), rng.randbytes(1200 * 900 * 3))
    word = "".join(rng.choice("bdfgkmnprst") + rng.choice("aou") for _ in range(3))
    draw = ImageDraw.Draw(im)
    draw.rectangle((400, 400, 800, 480), fill=(245, 245, 240))
    font = ImageFont.truetype(str(font_path("DejaVuSans.ttf")), 40)
    draw.text((600, 440), word, font=font, fill=(20, 20, 30), anchor="mm")
    buf = io.BytesIO()
    im.save(buf, "PNG", compress_level=1)
    return buf.getvalue(), word


async def test_twelve_noise_screens_all_reach_the_model_and_are_read(
    reference_url: str, tmp_path: Path, agents: list[Agent]
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    words = []
    for n in range(12):
        png, word = _noise_screen(n)
        (work / f"s{n}.png").write_bytes(png)
        words.append(word)
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
    assert data["descriptors"] == []  # none left out for the request's 32 MB
    assert len(data["images"]) == 12
    for image, word in zip(data["images"], words, strict=True):
        assert (image["width"], image["height"]) == (1200, 900)
        assert word in [w["text"] for w in image["words"]]
