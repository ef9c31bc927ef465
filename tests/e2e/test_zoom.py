"""The agent zooms (issue 26): a word its plain view of a 4K screen cannot read is read in
a view of a region, over real HTTP against the reference server, whose OCR reads only the
image parts it receives. The zoomed view's record keeps the region, its descriptor names
it once it leaves the window, and the digest the descriptor offers brings the crop back."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.e2e.conftest import make_agent, seen, view_call
from tests.zoomshot import REGION, WORDS, write_screen
from visus.agent import Agent
from visus.record.messages import ImagePart, PerceptionOrigin, TextPart, ToolResult

_DIGEST = re.compile(r'view\("(sha256:[0-9a-f]{12,64})"\)')


def _words(answer: str) -> set[str]:
    (image,) = seen(answer)["images"]
    return {w["text"] if isinstance(w, dict) else str(w) for w in image["words"]}


@pytest.mark.parametrize("wire", ["anthropic", "openai-responses"])
async def test_the_agent_reads_small_text_by_zooming(
    reference_url: str, tmp_path: Path, wire: str, agents: list[Agent]
) -> None:
    agent = make_agent(reference_url, wire, tmp_path)
    agents.append(agent)
    write_screen(tmp_path / "work", width=3840, height=2160)

    plain = await agent.run_turn("s", view_call("screen.png"))
    assert not set(WORDS) & _words(plain.answer)
    zoom = json.dumps({"path": "screen.png", "region": REGION})
    zoomed = await agent.run_turn("s", f"call view {zoom}")
    assert set(WORDS) <= _words(zoomed.answer)

    # What the tool said, and what the record keeps.
    messages = agent.sessions.load("s", blobs=agent.blobs).messages
    results = [m for m in messages if isinstance(m, ToolResult)]
    first_text = next(p.text for p in results[0].parts if isinstance(p, TextPart))
    assert "3840x2160, sent " in first_text
    assert "zoom: region=[x0,y0,x1,y1]" in first_text
    (image,) = [p for p in results[1].parts if isinstance(p, ImagePart)]
    assert isinstance(image.origin, PerceptionOrigin)
    assert image.origin.region == tuple(REGION)

    # Past its window the crop becomes a descriptor naming its digest (the region is in
    # the view's own line, which stays), and that digest brings the same crop back.
    later = seen((await agent.run_turn("s", "and now?")).answer)
    crop = f'call view("sha256:{image.digest[:16]}")'
    (descriptor,) = [d for d in later["descriptors"] if crop in d]
    ref = _DIGEST.search(descriptor)
    assert ref is not None, descriptor
    back = await agent.run_turn("s", view_call(ref.group(1)))
    assert set(WORDS) <= _words(back.answer)
