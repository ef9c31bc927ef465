"""A dropped thinking block costs its own reasoning again, once per request, never more.

The reference server's model of lost reasoning (``visus.reference.binding``): a block
left out by the prefix check is reasoning the model does again, billed as output of the
reply, in every request it is dropped from. The reply that redoes it carries that redo
in its own block; if that block is dropped later, only its own reasoning is billed again
(the blocks it redid are billed themselves). Counting the carried redo too made a client
that resends dropped blocks pay exponentially (keep-last on a thinking model: $515,396 a
step at step 30 in benchmarks/RESULTS.md "economics").
"""

from __future__ import annotations

import copy
from typing import Any

import httpx

OPUS = "claude-opus-5-5"
BETA = "thinking-binding-controls-2026-08-01"
DROP = {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "drop_block"}}
TOOLS: list[dict[str, Any]] = [
    {"name": "view", "description": "look", "input_schema": {"type": "object"}},
]
LOOP = 'each view [{"path": "a.png"}, {"path": "b.png"}, {"path": "c.png"}, {"path": "d.png"}]'
#: Effort medium (the default): each reply's own reasoning (binding._EFFORT_TOKENS).
OWN = 48


def _post(url: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    body = {
        "model": OPUS,
        "max_tokens": 2000,
        "system": [{"type": "text", "text": "You look at screens."}],
        "tools": TOOLS,
        "messages": messages,
        "thinking": DROP,
    }
    headers = {"x-api-key": "k", "anthropic-version": "2023-06-01", "anthropic-beta": BETA}
    r = httpx.post(f"{url}/v1/messages", headers=headers, json=body, timeout=60)
    assert r.status_code == 200, r.text
    reply: dict[str, Any] = r.json()
    return reply


def _answer(messages: list[dict[str, Any]], reply: dict[str, Any]) -> None:
    messages.append({"role": "assistant", "content": reply["content"]})
    call = next(b for b in reply["content"] if b["type"] == "tool_use")
    result = {"type": "tool_result", "tool_use_id": call["id"], "content": "seen"}
    messages.append({"role": "user", "content": [result]})


def _redone(url: str, messages: list[dict[str, Any]]) -> tuple[int, list[str]]:
    """The output tokens a request spends beyond the same request without its thinking
    blocks (valid: all of them left out; the same answer), and the paths it dropped."""
    reply = _post(url, messages)
    bare = [
        {**m, "content": [b for b in m["content"] if b["type"] != "thinking"]}
        if m["role"] == "assistant"
        else m
        for m in messages
    ]
    plain = _post(url, bare)
    dropped = [t["path"] for t in reply["input_transformations"]]
    return reply["usage"]["output_tokens"] - plain["usage"]["output_tokens"], dropped


def test_a_block_dropped_at_two_requests_is_billed_its_own_reasoning_each_time(
    base_url: str,
) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": LOOP}]
    for _ in range(3):
        _answer(messages, _post(base_url, messages))
    # An edit to the first tool result: the blocks of replies 2 and 3 (messages 3 and
    # 5) fail; the first (messages.1) came before it and stays.
    messages[2]["content"][0]["content"] = "seen (shortened)"
    extra, dropped = _redone(base_url, messages)
    assert dropped == ["messages.3.content.0", "messages.5.content.0"]
    assert extra == 2 * OWN
    # This reply redid those two blocks: its block holds 3 * OWN tokens, OWN its own.
    _answer(messages, _post(base_url, messages))
    # A second edit at the same place, the dropped blocks still resent (as a client
    # replaying its record does): the two old blocks and the new one are dropped.
    messages[2]["content"][0]["content"] = "seen (shortened again)"
    extra, dropped = _redone(base_url, messages)
    assert dropped == ["messages.3.content.0", "messages.5.content.0", "messages.7.content.0"]
    # Each block its own reasoning once: 3 * OWN. Billing the new block's carried redo
    # too (2 * OWN more) is what compounded.
    assert extra == 3 * OWN


def test_a_kept_block_that_redid_reasoning_is_billed_all_it_holds(base_url: str) -> None:
    """The redo a block carries is reasoning in the model's context: kept, the block is
    billed as input for all it holds (its own and the redo), as before."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": LOOP}]
    for _ in range(3):
        _answer(messages, _post(base_url, messages))
    messages[2]["content"][0]["content"] = "seen (shortened)"
    _answer(messages, _post(base_url, messages))  # drops 3 and 5, redoes 2 * OWN
    # The failing blocks left out now (as visus does after the request that dropped them).
    for i in (3, 5):
        messages[i]["content"] = [b for b in messages[i]["content"] if b["type"] != "thinking"]
    after = _post(base_url, messages)
    bare = copy.deepcopy(messages)
    bare[7]["content"] = [b for b in bare[7]["content"] if b["type"] != "thinking"]
    without = _post(base_url, bare)  # the newest block left out: valid (from the end)

    def prompt(u: dict[str, int]) -> int:
        return u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"]

    assert after["input_transformations"] == []
    assert without["input_transformations"] == []
    assert prompt(after["usage"]) - prompt(without["usage"]) == 3 * OWN
