"""Only what changed, through the proxy: a client's screenshot that differs from the one
before it only in a small area reaches the model as that area's crop after a note, on
each protocol, and the reference model reads the change from the crop it received."""

from __future__ import annotations

import base64
import copy
import json
import random
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.nearsame import Screen, draw
from visus.proxy import anthropic, openai_chat, openai_responses
from visus.proxy.cache import FitCache

from .conftest import seen


def _word(seed: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice("bdfgkmnprst") + rng.choice("aou") for _ in range(3)).capitalize()


def _screens(seed: int) -> tuple[str, str, str]:
    word = _word(seed)
    before = base64.b64encode(draw(Screen())).decode()
    after = base64.b64encode(draw(Screen(status=word))).decode()
    return before, after, word


def _anthropic(before: str, after: str) -> tuple[str, dict[str, Any]]:
    def shot(n: int, b64: str) -> list[dict[str, Any]]:
        use = {"type": "tool_use", "id": f"t{n}", "name": "screenshot", "input": {}}
        image = {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": b64},
        }
        result = {"type": "tool_result", "tool_use_id": f"t{n}", "content": [image]}
        return [{"role": "assistant", "content": [use]}, {"role": "user", "content": [result]}]

    messages = [{"role": "user", "content": "watch the editor"}, *shot(1, before), *shot(2, after)]
    return "/v1/messages", {"model": "claude-sonnet-4-6", "max_tokens": 400, "messages": messages}


def _chat(before: str, after: str) -> tuple[str, dict[str, Any]]:
    def shot(n: int, b64: str) -> list[dict[str, Any]]:
        call = {
            "id": f"c{n}",
            "type": "function",
            "function": {"name": "screenshot", "arguments": "{}"},
        }
        url = {"url": f"data:image/png;base64,{b64}"}
        return [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {
                "role": "tool",
                "tool_call_id": f"c{n}",
                "content": [{"type": "image_url", "image_url": url}],
            },
        ]

    messages = [{"role": "user", "content": "watch the editor"}, *shot(1, before), *shot(2, after)]
    return "/v1/chat/completions", {"model": "gpt-4.1", "messages": messages}


def _responses(before: str, after: str) -> tuple[str, dict[str, Any]]:
    def shot(n: int, b64: str) -> list[dict[str, Any]]:
        image = {"type": "input_image", "image_url": f"data:image/png;base64,{b64}"}
        return [
            {"type": "function_call", "call_id": f"c{n}", "name": "screenshot", "arguments": "{}"},
            {"type": "function_call_output", "call_id": f"c{n}", "output": [image]},
        ]

    items = [{"role": "user", "content": "watch the editor"}, *shot(1, before), *shot(2, after)]
    return "/v1/responses", {"model": "gpt-4.1", "input": items}


BODIES = {"anthropic": _anthropic, "openai-chat": _chat, "openai-responses": _responses}
REWRITES = {
    "anthropic": anthropic.rewrite,
    "openai-chat": openai_chat.rewrite,
    "openai-responses": openai_responses.rewrite,
}


def _answer(protocol: str, reply: dict[str, Any]) -> str:
    if protocol == "anthropic":
        return str(reply["content"][0]["text"])
    if protocol == "openai-chat":
        return str(reply["choices"][0]["message"]["content"])
    return str(reply["output"][0]["content"][0]["text"])


@pytest.mark.parametrize("protocol", BODIES)
def test_a_small_change_goes_as_its_crop_and_is_read(proxy_url: str, protocol: str) -> None:
    before, after, word = _screens(seed=len(protocol))
    path, body = BODIES[protocol](before, after)
    headers = {"x-api-key": "k", "authorization": "Bearer k"}
    before_stats = httpx.get(f"{proxy_url}/stats").json()
    r = httpx.post(f"{proxy_url}{path}", json=body, headers=headers, timeout=300)
    assert r.status_code == 200, r.text[:400]
    images = seen(_answer(protocol, r.json()))["images"]
    assert len(images) == 2
    whole, crop = images
    assert crop["width"] * crop["height"] * 50 < whole["width"] * whole["height"]
    assert word in [w["text"] for w in crop["words"]]
    # The repeated screen went as a reference to the one before it: deduplicated, in
    # /stats and /metrics alike.
    stats = httpx.get(f"{proxy_url}/stats").json()
    assert stats["images_deduplicated"] == before_stats["images_deduplicated"] + 1
    scraped = httpx.get(f"{proxy_url}/metrics").text
    assert _deduplicated(scraped) == stats["images_deduplicated"]


def _deduplicated(exposition: str) -> float:
    (value,) = [
        s.value
        for f in text_string_to_metric_families(exposition)
        if f.name == "visus_proxy_images"
        for s in f.samples
        if s.name.endswith("_total") and s.labels == {"event": "deduplicated"}
    ]
    return value


@pytest.mark.parametrize("protocol", BODIES)
def test_the_cut_is_the_same_bytes_every_time_and_says_where(protocol: str) -> None:
    before, after, _ = _screens(seed=3)
    _, body = BODIES[protocol](before, after)
    cache = FitCache(max_bytes=64 * 2**20)
    first, again = copy.deepcopy(body), copy.deepcopy(body)
    assert REWRITES[protocol](first, policy=None, cache=cache).cut_images == 1
    REWRITES[protocol](again, policy=None, cache=FitCache(max_bytes=64 * 2**20))
    text = json.dumps(first)
    assert text == json.dumps(again)
    assert "the same as the image sha256:" in text
    assert "except region [" in text
    # Once the screen before it has left the request (one live image), it goes whole.
    one = REWRITES[protocol](copy.deepcopy(body), policy=None, cache=cache, live_images=1)
    assert (one.elided, one.cut_images) == (1, 0)
