"""Thinking made after an edit stays valid on the reference server, as Anthropic documents.

"Prefix checks on thinking blocks" (platform.claude.com/docs/en/build-with-claude/
preserved-thinking/prefix-checks): a prefix check fails if ``system``, ``tools`` or an
earlier message changed after Claude produced a block, or if a block between others was
left out or moved; a change invalidates only the thinking already after it, and thinking
Claude produces after it stays valid. So each block is checked against the prefix it was
made with: when an early screenshot is replaced by a descriptor (what a retention
eviction does), the blocks made before the change are stale, and the blocks the model
made after it, under ``drop_block``, are kept on every later request.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from .conftest import Grid
from .test_preserved_thinking import BETA, DROP, _body, _post

#: A screen loop long enough for every test here (eight views, one a step).
LOOP = "each view " + json.dumps([{"path": f"{n}.png"} for n in range(8)])


def _image(grid: Grid) -> dict[str, Any]:
    source = {"type": "base64", "media_type": "image/png", "data": grid.b64}
    return {"type": "image", "source": source}


def _step(
    url: str, messages: list[dict[str, Any]], seen: object = "seen", **extra: Any
) -> dict[str, Any]:
    """One request of a screen loop (with ``drop_block`` and its beta when given): the
    reply is appended as returned and answered with a tool result holding ``seen``."""
    betas = (BETA,) if "thinking" in extra else ()
    r = _post(url, _body(messages, **extra), betas=betas)
    assert r.status_code == 200, r.text
    reply: dict[str, Any] = r.json()
    messages.append({"role": "assistant", "content": reply["content"]})
    call = next(b for b in reply["content"] if b["type"] == "tool_use")
    result = {"type": "tool_result", "tool_use_id": call["id"], "content": seen}
    messages.append({"role": "user", "content": [result]})
    return reply


def _evicted_then_two_more_steps(url: str, grid: Grid) -> list[dict[str, Any]]:
    """A loop whose first tool result carries a screenshot: two steps, then the image is
    replaced by a descriptor (an eviction) and two more steps run with ``drop_block``.

    Thinking at messages 1 (before the image) is valid throughout, 3 (after the image,
    made before the change) is stale, 5 and 7 were made after the change."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": LOOP}]
    _step(url, messages, seen=[_image(grid)], thinking=DROP)
    _step(url, messages, thinking=DROP)
    messages[2]["content"][0]["content"] = [{"type": "text", "text": "[screenshot a.png]"}]
    first = _step(url, messages, thinking=DROP)
    # The eviction's own request drops the one stale block.
    assert [t["path"] for t in first["input_transformations"]] == ["messages.3.content.0"]
    _step(url, messages, thinking=DROP)
    return messages


def test_drop_block_drops_only_the_blocks_made_before_the_edit(base_url: str, grid3: Grid) -> None:
    messages = _evicted_then_two_more_steps(base_url, grid3)
    r = _post(base_url, _body(messages, thinking=DROP), betas=(BETA,))
    assert r.status_code == 200, r.text
    # Only the stale block is listed; 5 and 7, made after the change, are kept.
    assert r.json()["input_transformations"] == [
        {
            "type": "thinking_dropped",
            "path": "messages.3.content.0",
            "reason": "prefix_binding_mismatch",
        },
    ]
    # The kept blocks are billed as input: without the fresh ones the prompt is smaller.
    fresh_out = copy.deepcopy(messages)
    for i in (5, 7):
        fresh_out[i]["content"] = [b for b in fresh_out[i]["content"] if b["type"] != "thinking"]
    r2 = _post(base_url, _body(fresh_out, thinking=DROP), betas=(BETA,))
    assert r2.status_code == 200, r2.text

    def prompt(u: dict[str, int]) -> int:
        return u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"]

    assert prompt(r.json()["usage"]) > prompt(r2.json()["usage"])


def test_without_drop_block_the_400_names_the_first_stale_block(base_url: str, grid3: Grid) -> None:
    messages = _evicted_then_two_more_steps(base_url, grid3)
    r = _post(base_url, _body(messages))
    assert r.status_code == 400
    assert r.json()["error"]["message"].startswith(
        "messages.3.content.0: Invalid `signature` in `thinking` block. The block is bound "
        "to a different conversation."
    )
    # The stale block taken out by hand (the docs' manual fix), the blocks made before and
    # after the change are accepted without drop_block.
    fixed = copy.deepcopy(messages)
    fixed[3]["content"] = [b for b in fixed[3]["content"] if b["type"] != "thinking"]
    ok = _post(base_url, _body(fixed), betas=(BETA,))
    assert ok.status_code == 200, ok.text
    assert ok.json()["input_transformations"] == []


def test_a_fresh_block_made_after_the_edit_is_accepted_at_every_later_step(
    base_url: str, grid3: Grid
) -> None:
    """The conversation goes on with drop_block: each later request drops the same one
    stale block, never a block made after the change (the old check dropped 5, 7, ...)."""
    messages = _evicted_then_two_more_steps(base_url, grid3)
    for _ in range(2):
        reply = _step(base_url, messages, thinking=DROP)
        assert [t["path"] for t in reply["input_transformations"]] == ["messages.3.content.0"]
    # A block left out between the fresh ones still breaks the run after it.
    gap = copy.deepcopy(messages)
    gap[7]["content"] = [b for b in gap[7]["content"] if b["type"] != "thinking"]
    r = _post(base_url, _body(gap, thinking=DROP), betas=(BETA,))
    assert [t["path"] for t in r.json()["input_transformations"]] == [
        "messages.3.content.0",
        "messages.9.content.0",
        "messages.11.content.0",
    ]
