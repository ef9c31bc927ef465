"""Context behaviour over many turns, and negative controls proving the harness bites.

- Eight large images viewed over eight turns complete inside a small context window,
  and the prompt's size stays flat, because retention elides old pixels.
- The same run keeping every image overflows that window: the reference server really
  counts image tokens and really answers with the provider's context-length error.
- An image inside a Chat Completions tool message is refused exactly as OpenAI does.
- A stringified image (base64 as text) is not perceived, and a big one overflows.
"""

from __future__ import annotations

import base64
import io
import itertools
import json
import random
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from PIL import Image, ImageDraw, ImageFont

from tests.e2e.conftest import make_agent, seen, view_call
from visus.agent import Agent
from visus.errors import ContextLengthError
from visus.models import get_model, image_tokens
from visus.reference.grid import make_grid
from visus.reference.server import serve_in_background

# tokens: a large image costs ~2.8k here, so two fit and eight do not (7.5k: answers also
# name region colours since the reference model describes images without text)
WINDOW = 8_000  # descriptors name a digest: a few tokens more than a path


@pytest.fixture(scope="module")
def small_window_url() -> Iterator[str]:
    with serve_in_background(context_tokens=WINDOW) as url:
        yield url


def large_photo(seed: int) -> bytes:
    """A 1800x1200 photo-like JPEG (smooth gradients, a few shapes) with one big word."""
    rng = random.Random(seed)
    w, h = 1800, 1200
    img = Image.linear_gradient("L").resize((w, h)).convert("RGB")
    tint = Image.new("RGB", (w, h), (rng.randrange(256), rng.randrange(256), rng.randrange(256)))
    img = Image.blend(img, tint, 0.5)
    draw = ImageDraw.Draw(img)
    for _ in range(6):
        x, y = rng.randrange(w), rng.randrange(700, h)
        draw.ellipse((x, y, x + 200, y + 150), fill=(rng.randrange(256), 90, 60))
    draw.rectangle((100, 100, 1700, 600), fill=(255, 255, 255))
    from visus.media import font_path

    font = ImageFont.truetype(font_path("DejaVuSans.ttf"), 220)
    word = "".join(rng.choice("bdfgkmnprstvz") + rng.choice("aou") for _ in range(3))
    draw.text((180, 220), word, fill=(20, 60, 160), font=font)
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=90)
    return buf.getvalue()


async def _eight_turns(agent: Agent, work: Path) -> list[int]:
    prompts: list[int] = []
    for turn in range(8):
        name = f"photo{turn}.jpg"
        (work / name).write_bytes(large_photo(turn))
        result = await agent.run_turn("s", view_call(name))
        data = seen(result.answer)
        assert len(data["images"]) >= 1
        prompts.append(result.usage.input_tokens)
    return prompts


async def test_eight_large_images_over_eight_turns_stay_flat(
    small_window_url: str, tmp_path: Path, agents: list[Agent]
) -> None:
    agent = make_agent(small_window_url, "openai-chat", tmp_path, live_turns=1)
    agents.append(agent)
    usage = await _eight_turns(agent, tmp_path / "work")
    # Flat in images: each turn carries exactly one live image, so a turn costs the
    # previous one plus only the text the conversation gained (the answers); keeping
    # the older images would add a whole image (~2.8k tokens here) every turn.
    per_image = image_tokens(get_model("reference"), 1800, 1200)
    growth = [b - a for a, b in itertools.pairwise(usage)]
    assert all(g < per_image / 2 for g in growth), (usage, per_image)
    assert max(usage) < WINDOW


async def test_keeping_every_image_overflows_the_same_window(
    small_window_url: str, tmp_path: Path, agents: list[Agent]
) -> None:
    agent = make_agent(small_window_url, "openai-chat", tmp_path, live_turns=100)
    agents.append(agent)
    with pytest.raises(ContextLengthError):
        await _eight_turns(agent, tmp_path / "work")


def _tool_call_messages(tool_content: object) -> list[dict[str, object]]:
    return [
        {"role": "user", "content": "look"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "view", "arguments": '{"path": "grid.png"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": tool_content},
    ]


TOOLS = [
    {
        "type": "function",
        "function": {"name": "view", "parameters": {"type": "object", "properties": {}}},
    }
]


async def test_image_in_a_chat_completions_tool_message_is_rejected(reference_url: str) -> None:
    png, _ = make_grid(2, 2, seed=3)
    url = "data:image/png;base64," + base64.b64encode(png).decode()
    content = [{"type": "image_url", "image_url": {"url": url}}]
    async with openai.AsyncOpenAI(base_url=f"{reference_url}/v1", api_key="x") as client:
        with pytest.raises(openai.BadRequestError) as info:
            await client.chat.completions.create(
                model="gpt-4.1",
                messages=_tool_call_messages(content),  # type: ignore[arg-type]
                tools=TOOLS,  # type: ignore[arg-type]
            )
    assert "Image URLs are only allowed for messages with role 'user'" in str(info.value)


async def test_stringified_image_is_not_perceived(reference_url: str) -> None:
    png, expected = make_grid(2, 2, seed=4)
    text = json.dumps({"type": "image", "data": base64.b64encode(png).decode()})
    async with openai.AsyncOpenAI(base_url=f"{reference_url}/v1", api_key="x") as client:
        reply = await client.chat.completions.create(
            model="gpt-4.1",
            messages=_tool_call_messages(text),  # type: ignore[arg-type]
            tools=TOOLS,  # type: ignore[arg-type]
        )
    answer = reply.choices[0].message.content or ""
    assert seen(answer)["images"] == []
    assert not any(word in answer for word, *_ in expected)
    # ...and it is billed as text: base64 length / 4 tokens, far more than the image.
    assert reply.usage is not None
    assert reply.usage.prompt_tokens >= len(text) // 4


async def test_big_stringified_image_overflows_the_context(small_window_url: str) -> None:
    photo = large_photo(1)
    text = base64.b64encode(photo).decode()
    async with openai.AsyncOpenAI(base_url=f"{small_window_url}/v1", api_key="x") as client:
        with pytest.raises(openai.BadRequestError) as info:
            await client.chat.completions.create(
                model="gpt-4.1",
                messages=_tool_call_messages(text),  # type: ignore[arg-type]
                tools=TOOLS,  # type: ignore[arg-type]
            )
    assert info.value.code == "context_length_exceeded"
