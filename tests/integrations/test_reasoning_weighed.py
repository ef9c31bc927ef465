"""The reasoning an eviction would drop reaches the plan from a framework's history: the
Agents SDK's items carry no usage, so a reasoning item counts what its
``encrypted_content`` holds (retention.sealed_reasoning). Past the break-even, replies
that reasoned much keep every screenshot; replies that reasoned little let the oldest
leave (pydantic-ai and LangChain, which count usage, in their real loops:
tests/integrations/test_thinking.py)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from PIL import Image

from visus.agent.options import VisionOptions
from visus.integrations.core import VisionCore
from visus.integrations.items import data_url, request_input
from visus.models import get_model, image_tokens
from visus.retention import RetentionPolicy

MODEL = get_model("gpt-5.6-sol")  # binds its reasoning items to the history


def _png(n: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (1600, 1000), (n * 7 % 256, n * 13 % 256, 90)).save(out, "PNG")
    return out.getvalue()


def _items(steps: int, sealed: int) -> list[Any]:
    """A Responses history: each step a reasoning item (``sealed`` characters of
    encrypted content), a view call and its screenshot."""
    items: list[Any] = [{"role": "user", "content": "go"}]
    for n in range(steps):
        items += [
            {
                "type": "reasoning",
                "id": f"rs_{n}",
                "summary": [],
                "encrypted_content": "A" * sealed,
            },
            {"type": "function_call", "call_id": f"c{n}", "name": "view", "arguments": "{}"},
            {
                "type": "function_call_output",
                "call_id": f"c{n}",
                "output": [{"type": "input_image", "image_url": data_url("image/png", _png(n))}],
            },
        ]
    return items


def _live(tmp_path: Path, sealed: int) -> int:
    core = VisionCore(VisionOptions.of([tmp_path], data=tmp_path / "data"))
    tokens = 3 * image_tokens(MODEL, 1600, 1000)
    core.policy = RetentionPolicy(append_tokens=tokens, weigh_reasoning=True)
    sent, _ = request_input(core, _items(12, sealed), MODEL, hoist=False)
    return sum(
        1
        for i in sent
        if i.get("type") == "function_call_output"
        for part in i["output"]
        if isinstance(part, dict) and part.get("type") == "input_image"
    )


def test_reasoning_items_that_hold_much_keep_the_screens(tmp_path: Path) -> None:
    little = _live(tmp_path, sealed=16)  # ~3 tokens of reasoning a reply
    much = _live(tmp_path, sealed=40_000)  # ~7,500 tokens a reply
    assert little < 12  # past the break-even the oldest left
    assert much == 12  # the reads did not cover what leaving would drop
