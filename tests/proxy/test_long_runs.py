"""Long agentic runs through the proxy (issue 24): images bounded by count, in batches
that keep the forwarded prefix stable, never more or bigger than the provider takes,
fitted once per image, and agents whose observations are user messages."""

from __future__ import annotations

import base64
import io
import json
import random
import re
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from PIL import Image, ImageDraw, ImageFont
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from visus.media import font_path
from visus.proxy import ProxyConfig

from .conftest import grid, seen, serve_app, serve_proxy

TOOL_USE_REPLY = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-6",
    "content": [{"type": "tool_use", "id": "t", "name": "screenshot", "input": {}}],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {"input_tokens": 1, "output_tokens": 1},
}


class Recorder:
    """An Anthropic-shaped upstream that keeps every body it gets and asks for a tool."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def app(self) -> Starlette:
        async def messages(request: Request) -> Response:
            self.bodies.append(await request.body())
            return JSONResponse(TOOL_USE_REPLY)

        return Starlette(routes=[Route("/v1/messages", messages, methods=["POST"])])


@pytest.fixture
def recorder() -> Iterator[tuple[Recorder, str]]:
    r = Recorder()
    with serve_app(r.app()) as url:
        yield r, url


def _png(seed: int, size: tuple[int, int] = (96, 60)) -> str:
    im = Image.new("RGB", size, ((seed * 37) % 256, (seed * 91) % 256, (seed * 53) % 256))
    buf = io.BytesIO()
    im.save(buf, "PNG")
    return base64.b64encode(buf.getvalue()).decode()


def _image(b64: str) -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64}}


def _claude_code_history(steps: int) -> list[dict[str, Any]]:
    """One user message, then ``steps`` tool calls each answered by a screenshot;
    ``cache_control`` on the last block, as Claude Code marks its newest message."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "fix the login page"}]
    for n in range(1, steps + 1):
        use = {"type": "tool_use", "id": f"t{n}", "name": "screenshot", "input": {"n": n}}
        messages.append({"role": "assistant", "content": [use]})
        result = {"type": "tool_result", "tool_use_id": f"t{n}", "content": [_image(_png(n))]}
        messages.append({"role": "user", "content": [result]})
    messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    return messages


def _images(message: dict[str, Any]) -> list[str]:
    out = []
    for block in message["content"] if isinstance(message["content"], list) else []:
        for item in block.get("content", []) if block.get("type") == "tool_result" else [block]:
            if isinstance(item, dict) and item.get("type") == "image":
                out.append(item["source"]["data"])
    return out


def test_a_claude_code_loop_keeps_live_images_bounded_and_the_prefix_stable(
    recorder: tuple[Recorder, str],
) -> None:
    rec, upstream = recorder
    steps, live, chunk = 60, 10, 5
    config = ProxyConfig(upstream=upstream, live_images=live, chunk=chunk, live_turns=2)
    with serve_proxy(config) as url:
        client = anthropic.Anthropic(base_url=url, api_key="sk-test", max_retries=0)
        for step in range(1, steps + 1):
            client.messages.create(
                model="claude-sonnet-4-6", max_tokens=100, messages=_claude_code_history(step)
            )
    sent = [json.loads(b)["messages"] for b in rec.bodies]
    changes = 0
    for step, messages in enumerate(sent, start=1):
        images = [im for m in messages for im in _images(m)]
        assert live - chunk < len(images) <= live or step <= live, step
        assert images[-1] == _png(step)  # the newest screenshot is always live
        # The client's breakpoint survives on its block.
        assert messages[-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
        if step > 1:
            before = [json.dumps(m, sort_keys=True) for m in sent[step - 2]]
            now = [json.dumps(m, sort_keys=True) for m in messages[: len(before)]]
            # Clean the old breakpoint the client itself moved, then compare prefixes.
            before[-1] = json.dumps(_without_cache_control(sent[step - 2][-1]), sort_keys=True)
            now[-1] = json.dumps(_without_cache_control(messages[len(before) - 1]), sort_keys=True)
            changes += before != now
    # The forwarded prefix changed once per batch of 5 evictions, never in between.
    assert changes == (steps - live) // chunk
    descriptor = sent[-1][2]["content"][0]["content"][0]["text"]
    # Its size and one digest, and the call the client can make.
    assert re.fullmatch(
        r"\[image elided: 96x60 sha256:[0-9a-f]{12}, left out by visus proxy; "
        r"call the tool again for a fresh one\]",
        descriptor,
    ), descriptor


def _prefix_changes(sent: list[list[dict[str, Any]]]) -> list[int]:
    """The steps whose forwarded messages differ from the step before's within its length
    (the client's own moving breakpoint aside): where a prompt cache stops hitting."""
    changed = []
    for step in range(2, len(sent) + 1):
        before, now = sent[step - 2], sent[step - 1]
        old = [json.dumps(_without_cache_control(m), sort_keys=True) for m in before]
        new = [json.dumps(_without_cache_control(m), sort_keys=True) for m in now[: len(old)]]
        if old != new:
            changed.append(step)
    return changed


@pytest.mark.parametrize("live", [4, 8])
def test_live_images_alone_evicts_a_whole_batch_and_the_prefix_moves_only_then(
    recorder: tuple[Recorder, str], live: int
) -> None:
    # A Claude-Code-like client (its breakpoint on the newest block) through
    # `visus proxy --live-images N` and nothing else: the window leaves whole, so the
    # forwarded prefix changes once per N screenshots, never in between (with --chunk
    # defaulting to 1 it changed at every step past N: 116 of 119 requests missed).
    rec, upstream = recorder
    steps = 3 * live + 3
    with serve_proxy(ProxyConfig(upstream=upstream, live_images=live)) as url:
        client = anthropic.Anthropic(base_url=url, api_key="sk-test", max_retries=0)
        for step in range(1, steps + 1):
            client.messages.create(
                model="claude-sonnet-4-6", max_tokens=100, messages=_claude_code_history(step)
            )
    sent = [json.loads(b)["messages"] for b in rec.bodies]
    for step, messages in enumerate(sent, start=1):
        images = [im for m in messages for im in _images(m)]
        assert 1 <= len(images) <= live
        assert images[-1] == _png(step)
    # Evictions at steps live+1, 2*live+1, ...: exactly there the prefix changes.
    assert _prefix_changes(sent) == list(range(live + 1, steps + 1, live))


def test_without_options_the_providers_cap_is_met_by_a_batch_not_an_image_a_step(
    recorder: tuple[Recorder, str],
) -> None:
    # claude-haiku-4-5 takes 100 images a request. Past it, a client's growing history
    # loses the oldest quarter of the cap at once, then grows again untouched.
    rec, upstream = recorder
    history: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    with serve_proxy(ProxyConfig(upstream=upstream)) as url:
        client = anthropic.Anthropic(base_url=url, api_key="sk-test", max_retries=0)
        for n in range(1, 131):
            use = {"type": "tool_use", "id": f"t{n}", "name": "shot", "input": {"n": n}}
            image = _image(_png(n, (16, 12)))
            result = {"type": "tool_result", "tool_use_id": f"t{n}", "content": [image]}
            history += [
                {"role": "assistant", "content": [use]},
                {"role": "user", "content": [result]},
            ]
            if n > 95:
                client.messages.create(model="claude-haiku-4-5", max_tokens=10, messages=history)
    sent = [json.loads(b)["messages"] for b in rec.bodies]
    counts = [sum(len(_images(m)) for m in messages) for messages in sent]
    assert max(counts) == 100
    assert counts[:5] == [96, 97, 98, 99, 100]
    assert counts[5:9] == [76, 77, 78, 79]  # 101 images: the oldest 25 leave together
    # The prefix moved at the two batches (101 and 126 images), not at every step.
    assert [96 + i - 1 for i in _prefix_changes(sent)] == [101, 126]


def _without_cache_control(message: dict[str, Any]) -> dict[str, Any]:
    text = json.dumps(message).replace(', "cache_control": {"type": "ephemeral"}', "")
    out: dict[str, Any] = json.loads(text)
    return out


def test_120_images_are_forwarded_within_the_providers_100(
    reference_url: str, proxy_url: str
) -> None:
    content = [_image(_png(n, (40, 30))) for n in range(120)] + [{"type": "text", "text": "?"}]
    messages = [{"role": "user", "content": content}]
    # 100 images a request on a 200k-context model (600 on 1M ones such as sonnet-4-6).
    direct = anthropic.Anthropic(base_url=reference_url, api_key="sk-test", max_retries=0)
    with pytest.raises(anthropic.BadRequestError, match="Too many images"):
        direct.messages.create(model="claude-haiku-4-5", max_tokens=100, messages=messages)
    client = anthropic.Anthropic(base_url=proxy_url, api_key="sk-test", max_retries=0)
    reply = client.messages.create(model="claude-haiku-4-5", max_tokens=100, messages=messages)
    result = seen("".join(b.text for b in reply.content if b.type == "text"))
    # Past the cap the oldest leave in one batch of a quarter of it (a growing history
    # then keeps its prefix for 25 more images): the newest 95, the 25 oldest described.
    assert len(result["images"]) == 95
    assert len(result["descriptors"]) == 25


def _noise_screen(seed: int) -> tuple[str, str]:
    """A 1200x900 screen of random pixels (~3.2 MB as PNG: no lossless encoding shrinks
    it) with one nonsense word on a card; base64 PNG and the word."""
    rng = random.Random(seed)
    im = Image.frombytes("RGB", (1200, 900), rng.randbytes(1200 * 900 * 3))
    word = "".join(rng.choice("bdfgkmnprst") + rng.choice("aou") for _ in range(3))
    ImageDraw.Draw(im).rectangle((400, 400, 800, 480), fill=(245, 245, 240))
    font = ImageFont.truetype(str(font_path("DejaVuSans.ttf")), 40)
    ImageDraw.Draw(im).text((600, 440), word, font=font, fill=(20, 20, 30), anchor="mm")
    buf = io.BytesIO()
    im.save(buf, "PNG", compress_level=1)
    return base64.b64encode(buf.getvalue()).decode(), word


def test_a_43_mb_request_is_forwarded_within_the_32_mb_limit_every_screen_still_read(
    reference_url: str, proxy_url: str
) -> None:
    # Twelve noise screenshots, each inside every per-image limit (1200x900, ~3.2 MB):
    # together over Anthropic's 32 MB request. Bytes before pixels: re-encoded, all twelve
    # fit (they went out as 8 images and 4 descriptors), and each word is still read.
    shots = [_noise_screen(n) for n in range(12)]
    content = [*(_image(b64) for b64, _ in shots), {"type": "text", "text": "?"}]
    body = {
        "model": "claude-sonnet-4-6",
        "max_tokens": 50,
        "messages": [{"role": "user", "content": content}],
    }
    size = len(json.dumps(body))
    assert size > 40 * 2**20
    headers = {"x-api-key": "sk-test"}
    direct = httpx.post(f"{reference_url}/v1/messages", json=body, headers=headers, timeout=60)
    assert direct.status_code == 413
    r = httpx.post(f"{proxy_url}/v1/messages", json=body, headers=headers, timeout=300)
    assert r.status_code == 200, r.text[:500]
    result = seen(r.json()["content"][0]["text"])
    assert result["descriptors"] == []
    assert len(result["images"]) == 12
    for image, (_, word) in zip(result["images"], shots, strict=True):
        assert word in [w["text"] for w in image["words"]]


def test_a_repeated_history_is_not_fitted_again_and_goes_out_as_the_same_bytes(
    recorder: tuple[Recorder, str],
) -> None:
    rec, upstream = recorder
    big = [grid(1, 2, 80 + n, edge=2400).b64 for n in range(3)]  # over 1568 px: fitted
    messages = [{"role": "user", "content": [*map(_image, big), {"type": "text", "text": "?"}]}]
    with serve_proxy(ProxyConfig(upstream=upstream)) as url:
        client = anthropic.Anthropic(base_url=url, api_key="sk-test", max_retries=0)
        for _ in range(2):
            client.messages.create(model="claude-sonnet-4-6", max_tokens=10, messages=messages)
        stats = httpx.get(f"{url}/stats").json()
    assert rec.bodies[0] == rec.bodies[1]
    assert (stats["images_fitted"], stats["images_cached"]) == (6, 3)


def test_smolagents_observations_are_steps_of_the_turn_not_new_turns(
    reference_url: str,
) -> None:
    # smolagents sends each step's screenshot and output as a *user* message
    # ("Observation: ..."); --live-turns 1 must keep the screenshot it just took.
    shots = [grid(2, 2, 90 + n) for n in range(2)]
    messages: list[Any] = [
        {"role": "system", "content": [{"type": "text", "text": "You are a web agent."}]},
        {"role": "user", "content": [{"type": "text", "text": "New task:\nlog in"}]},
    ]
    for n, shot in enumerate(shots, start=1):
        messages.append({"role": "assistant", "content": [{"type": "text", "text": f"step {n}"}]})
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": shot.data_url}},
                    {"type": "text", "text": f"Observation:\nclicked {n}"},
                ],
            }
        )
    with serve_proxy(ProxyConfig(upstream=reference_url, live_turns=1)) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0)
        reply = client.chat.completions.create(model="gpt-4.1", messages=messages)
    result = seen(reply.choices[0].message.content or "")
    assert len(result["images"]) == 2  # both steps' screenshots: one turn
    assert result["descriptors"] == []
