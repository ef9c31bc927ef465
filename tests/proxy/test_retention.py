"""Retention in the proxy: deterministic from the request, chunked for prompt caches."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from visus.models import get_model, image_tokens
from visus.proxy import ProxyConfig
from visus.proxy.openai_chat import rewrite
from visus.retention import RetentionPolicy

from .conftest import Grid, grid, seen, serve_proxy

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "screenshot",
            "description": "Take a screenshot",
            "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}},
        },
    }
]


@pytest.fixture(scope="module")
def shot() -> Grid:
    return grid(2, 2, 51)


@pytest.fixture(scope="module")
def retaining_url(reference_url: str) -> Iterator[str]:
    with serve_proxy(ProxyConfig(upstream=reference_url, live_turns=1)) as url:
        yield url


def _session(url: str, shot: Grid, turns: int) -> list[dict[str, Any]]:
    """An agent loop over Chat Completions: each turn calls a tool that returns an image."""
    messages: list[dict[str, Any]] = []
    out: list[dict[str, Any]] = []
    with httpx.Client(base_url=url, headers={"authorization": "Bearer k"}, timeout=300) as c:
        for t in range(1, turns + 1):
            messages.append({"role": "user", "content": f"call screenshot {json.dumps({'n': t})}"})
            r = c.post(
                "/v1/chat/completions",
                json={"model": "gpt-4.1", "messages": messages, "tools": TOOLS},
            )
            assert r.status_code == 200, r.text
            call = r.json()["choices"][0]["message"]
            messages.append(
                {"role": "assistant", "content": None, "tool_calls": call["tool_calls"]}
            )
            for tc in call["tool_calls"]:
                content = [
                    {"type": "text", "text": f"screenshot {t}"},
                    {"type": "image_url", "image_url": {"url": shot.data_url}},
                ]
                messages.append({"role": "tool", "tool_call_id": tc["id"], "content": content})
            r = c.post(
                "/v1/chat/completions",
                json={"model": "gpt-4.1", "messages": messages, "tools": TOOLS},
            )
            assert r.status_code == 200, r.text
            reply = r.json()
            text = reply["choices"][0]["message"]["content"]
            messages.append({"role": "assistant", "content": text})
            out.append({"usage": reply["usage"], **seen(text)})
    return out


@pytest.mark.slow
def test_50_turns_with_live_turns_1_keep_prompt_image_tokens_flat(
    retaining_url: str, proxy_url: str, shot: Grid
) -> None:
    turns = _session(retaining_url, shot, 50)
    for n, turn in enumerate(turns, start=1):
        assert len(turn["images"]) == 1, n  # only the current turn's screenshot is pixels
        assert len(turn["descriptors"]) == n - 1, n  # the older ones are named, not sent
    # One stable line: the image's size and its own digest, nothing that grows.
    assert re.fullmatch(
        r"\[image elided: 600x260 sha256:[0-9a-f]{12}, left out by visus proxy; .*\]",
        turns[-1]["descriptors"][0],
    ), turns[-1]["descriptors"][0]
    # Prompt image tokens, by the model's own formula over the images it received:
    # the same every turn (one screenshot), where without retention they grow by one
    # screenshot a turn.
    tokens = [_image_tokens(t) for t in turns]
    assert tokens == [tokens[0]] * 50
    assert tokens[0] > 0
    stats = httpx.get(f"{retaining_url}/stats").json()
    assert stats["images_elided"] == 2 * sum(range(50))  # turn t: t-1 in each of its requests
    assert stats["image_tokens_saved"] > 0

    # Without retention the same session keeps every screenshot.
    kept = _session(proxy_url, shot, 4)
    assert [_image_tokens(t) for t in kept] == [tokens[0] * n for n in (1, 2, 3, 4)]


def _image_tokens(turn: dict[str, Any]) -> int:
    spec = get_model("gpt-4.1")
    return sum(image_tokens(spec, im["width"], im["height"]) for im in turn["images"])


def _conversation(turns: int, shot: Grid) -> list[Any]:
    messages: list[Any] = []
    for t in range(1, turns + 1):
        call = {
            "id": f"c{t}",
            "type": "function",
            "function": {"name": "screenshot", "arguments": "{}"},
        }
        messages += [
            {"role": "user", "content": f"turn {t}"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {
                "role": "tool",
                "tool_call_id": f"c{t}",
                "content": [{"type": "image_url", "image_url": {"url": shot.data_url}}],
            },
            {"role": "assistant", "content": f"answer {t}"},
        ]
    return messages


def test_chunked_retention_keeps_the_prefix_stable_between_moves(shot: Grid) -> None:
    policy = RetentionPolicy(live_turns=1, chunk=4)

    def lowered(turns: int) -> list[str]:
        body = {"model": "gpt-4.1", "messages": _conversation(turns, shot)}
        rewrite(body, policy=policy)
        return [json.dumps(m, sort_keys=True) for m in body["messages"]]

    views = {t: lowered(t) for t in (5, 6, 7, 8, 9)}
    # Turns 5..8 share one boundary (turn 5): each request starts with the one before.
    for t in (6, 7, 8):
        assert views[t][: len(views[t - 1]) - 1] == views[t - 1][:-1], t
    # At turn 9 the boundary moves: turns 5..8 lose their pixels in one step.
    assert views[9][: len(views[8]) - 1] != views[8][:-1]
    text = "".join(views[8])
    assert text.count("image elided") == 4  # turns 1-4
    assert text.count('"type": "image_url"') == 4  # turns 5-8 live, hoisted
