"""The reference server holds Claude's thinking to the providers' documented rules.

Anthropic "Preserved thinking" and "What's new in Claude Opus 5.5": on an Opus-5.5-like
model every reply starts with a signed thinking block; sent back unchanged after an
append it is valid and billed as input; after a change to anything before it (system,
tools, an earlier message; ``cache_control`` aside) it is a 400 by default, or with
``drop_block`` and the beta header it and every later block made before the change are
dropped and listed in ``input_transformations`` (blocks made after it stay valid:
test_thinking_after_an_edit); a block left out between others breaks the run; a
tampered block is always a 400; disabled thinking, budgets and forced tool use are
refused where the model refuses them.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import anthropic
import httpx
import pytest

from .test_bedrock import TOOLS as BEDROCK_TOOLS
from .test_bedrock import _client as _bedrock_client

OPUS = "claude-opus-5-5"
BETA = "thinking-binding-controls-2026-08-01"
DISPLAY_BETA = "thinking-display-updates-2026-08-18"
TOOLS: list[dict[str, Any]] = [
    {"name": "view", "description": "look", "input_schema": {"type": "object"}},
]
LOOP = 'each view [{"path": "a.png"}, {"path": "b.png"}, {"path": "c.png"}, {"path": "d.png"}]'
DROP = {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "drop_block"}}


def _post(url: str, body: dict[str, Any], betas: tuple[str, ...] = ()) -> httpx.Response:
    headers = {"x-api-key": "k", "anthropic-version": "2023-06-01"}
    if betas:
        headers["anthropic-beta"] = ",".join(betas)
    return httpx.post(f"{url}/v1/messages", headers=headers, json=body, timeout=60)


def _body(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "model": OPUS,
        "max_tokens": 2000,
        "system": [{"type": "text", "text": "You look at screens."}],
        "tools": TOOLS,
        "messages": messages,
        **extra,
    }


def _loop(url: str, steps: int, **extra: Any) -> list[dict[str, Any]]:
    """``steps`` steps of a screen loop, each assistant turn appended exactly as returned
    and answered with a tool result: the history an append-only integration sends."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": LOOP}]
    for _ in range(steps):
        r = _post(url, _body(messages, **extra), betas=(BETA,) if "thinking" in extra else ())
        assert r.status_code == 200, r.text
        reply = r.json()
        messages.append({"role": "assistant", "content": reply["content"]})
        call = next(b for b in reply["content"] if b["type"] == "tool_use")
        result = {"type": "tool_result", "tool_use_id": call["id"], "content": "seen"}
        messages.append({"role": "user", "content": [result]})
    return messages


def test_every_reply_starts_with_a_signed_empty_thinking_block(base_url: str) -> None:
    r = _post(base_url, _body([{"role": "user", "content": LOOP}]))
    assert r.status_code == 200, r.text
    content = r.json()["content"]
    assert content[0]["type"] == "thinking"
    assert content[0]["thinking"] == ""  # display "omitted" is the default
    assert content[0]["signature"]
    assert content[-1]["type"] == "tool_use"
    assert "input_transformations" not in r.json()  # only with the beta header


def test_an_append_only_loop_keeps_its_reasoning_and_bills_it(base_url: str) -> None:
    messages = _loop(base_url, 3)
    r = _post(base_url, _body(messages), betas=(BETA,))
    assert r.status_code == 200, r.text
    assert r.json()["input_transformations"] == []
    stripped = [
        {**m, "content": [b for b in m["content"] if b["type"] != "thinking"]}
        if m["role"] == "assistant"
        else m
        for m in messages
    ]
    r2 = _post(base_url, _body(stripped), betas=(BETA,))  # removing all of them is valid
    assert r2.status_code == 200, r2.text

    def prompt(u: dict[str, int]) -> int:
        return u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"]

    # Three kept blocks of 48 reasoning tokens each (effort medium) are billed as input.
    assert prompt(r.json()["usage"]) - prompt(r2.json()["usage"]) == 3 * 48


def test_moving_cache_control_is_not_an_edit(base_url: str) -> None:
    """Preserved thinking, "What counts as an edit": adding, moving or removing
    ``cache_control`` markers leaves later thinking valid."""
    messages = _loop(base_url, 2)
    marked = copy.deepcopy(messages)
    marked[0]["content"] = [{"type": "text", "text": LOOP, "cache_control": {"type": "ephemeral"}}]
    marked[2]["content"][0]["cache_control"] = {"type": "ephemeral"}
    r = _post(base_url, _body(marked))
    assert r.status_code == 200, r.text


def _edited(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The loop with its second tool result shortened: an edit before later blocks."""
    edited = copy.deepcopy(messages)
    edited[4]["content"][0]["content"] = "seen (shortened)"
    return edited


def test_a_changed_prefix_is_a_400_by_default(base_url: str) -> None:
    messages = _loop(base_url, 3)
    r = _post(base_url, _body(_edited(messages)))
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error"
    # The first block after the edit is named; the header the fix needs is named too.
    assert error["message"].startswith(
        "messages.5.content.0: Invalid `signature` in `thinking` block. The block is bound "
        "to a different conversation."
    )
    assert BETA in error["message"]
    # The system prompt or the tools changed: every block fails.
    other = _body(messages)
    other["tools"] = [*TOOLS, {"name": "read", "input_schema": {"type": "object"}}]
    assert _post(base_url, other).json()["error"]["message"].startswith("messages.1.content.0")


def test_drop_block_drops_that_block_and_every_later_one(base_url: str) -> None:
    messages = _loop(base_url, 3, thinking=DROP)
    plain = _post(base_url, _body(messages, thinking=DROP), betas=(BETA,))
    r = _post(base_url, _body(_edited(messages), thinking=DROP), betas=(BETA,))
    assert r.status_code == 200, r.text
    assert r.json()["input_transformations"] == [
        {
            "type": "thinking_dropped",
            "path": "messages.5.content.0",
            "reason": "prefix_binding_mismatch",
        },
    ]
    # The dropped block is not billed, and its reasoning is done again (output).
    assert r.json()["usage"]["output_tokens"] - plain.json()["usage"]["output_tokens"] == 48
    # Without the beta header the setting is refused.
    refused = _post(base_url, _body(messages, thinking=DROP))
    assert refused.status_code == 400
    assert refused.json()["error"]["message"].endswith(
        "block_binding: Extra inputs are not permitted"
    )


def test_a_block_left_out_between_others_fails_the_later_ones(base_url: str) -> None:
    messages = _loop(base_url, 4)
    gap = copy.deepcopy(messages)
    gap[3]["content"] = [b for b in gap[3]["content"] if b["type"] != "thinking"]
    r = _post(base_url, _body(gap))
    assert r.status_code == 400
    assert r.json()["error"]["message"].startswith("messages.5.content.0: Invalid `signature`")
    dropped = _post(base_url, _body(gap, thinking=DROP), betas=(BETA,))
    assert [t["path"] for t in dropped.json()["input_transformations"]] == [
        "messages.5.content.0",
        "messages.7.content.0",
    ]
    # From the start (oldest first) is allowed.
    start = copy.deepcopy(messages)
    start[1]["content"] = [b for b in start[1]["content"] if b["type"] != "thinking"]
    assert _post(base_url, _body(start)).status_code == 200


def test_a_tampered_block_is_always_a_400(base_url: str) -> None:
    messages = _loop(base_url, 2, thinking=DROP)
    tampered = copy.deepcopy(messages)
    tampered[3]["content"][0]["thinking"] = "I will say something else."
    r = _post(base_url, _body(tampered, thinking=DROP), betas=(BETA,))
    assert r.status_code == 400
    assert r.json()["error"]["message"] == (
        "messages.3.content.0: Invalid `signature` in `thinking` block"
    )
    forged = copy.deepcopy(messages)
    forged[1]["content"][0]["signature"] = "c2lnbmVk"
    assert _post(base_url, _body(forged, thinking=DROP), betas=(BETA,)).status_code == 400


def test_another_models_blocks_are_dropped_without_an_error(base_url: str) -> None:
    messages = _loop(base_url, 2)
    r = _post(base_url, {**_body(messages), "model": "claude-sonnet-5-5"}, betas=(BETA,))
    assert r.status_code == 200, r.text
    assert {t["reason"] for t in r.json()["input_transformations"]} == {"model_binding_mismatch"}


@pytest.mark.parametrize(
    ("thinking", "message"),
    [
        ({"type": "disabled"}, '"thinking.type.disabled" is not supported for this model.'),
        (
            {"type": "enabled", "budget_tokens": 2048},
            '"thinking.type.enabled" is not supported for this model.',
        ),
    ],
)
def test_opus_5_5_refuses_to_stop_thinking(
    base_url: str, thinking: dict[str, Any], message: str
) -> None:
    r = _post(base_url, _body([{"role": "user", "content": "hi"}], thinking=thinking))
    assert r.status_code == 400
    assert r.json()["error"]["message"].startswith(message)


def test_forced_tool_use_is_refused_where_the_model_refuses_it(base_url: str) -> None:
    for choice in ({"type": "any"}, {"type": "tool", "name": "view"}):
        r = _post(base_url, _body([{"role": "user", "content": "hi"}], tool_choice=choice))
        assert r.status_code == 400
        assert r.json()["error"]["message"] == (
            'tool_choice: type "tool" and "any" are not supported for this model.'
        )
    auto = _body([{"role": "user", "content": "hi"}], tool_choice={"type": "auto"})
    assert _post(base_url, auto).status_code == 200
    older = {**auto, "model": "claude-sonnet-4-6", "tool_choice": {"type": "any"}}
    assert _post(base_url, older).status_code == 200


def test_notes_between_tool_calls_come_back_in_thinking_blocks(base_url: str) -> None:
    ask = [{"role": "user", "content": 'say Opening the screen.\ncall view {"path": "a.png"}'}]
    quiet = _post(base_url, _body(ask)).json()["content"]
    assert [b["type"] for b in quiet] == ["thinking", "thinking", "tool_use"]
    assert quiet[1]["thinking"] == ""  # "goes quiet between tool calls" at the default
    updates = {"type": "adaptive", "display": "updates"}
    refused = _post(base_url, _body(ask, thinking=updates))
    assert refused.status_code == 400  # the display value needs its beta
    shown = _post(base_url, _body(ask, thinking=updates), betas=(DISPLAY_BETA,)).json()
    assert [b["thinking"] for b in shown["content"][:2]] == ["", "Opening the screen."]


def test_a_stream_carries_the_signature_and_the_transformations(base_url: str) -> None:
    messages = _loop(base_url, 2, thinking=DROP)
    edited = copy.deepcopy(messages)
    edited[2]["content"][0]["content"] = "seen (shortened)"
    r = _post(base_url, {**_body(edited, thinking=DROP), "stream": True}, betas=(BETA,))
    events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
    start = next(e for e in events if e["type"] == "message_start")
    assert start["message"]["input_transformations"][0]["path"] == "messages.3.content.0"
    # The official SDK puts the block together from its signature_delta.
    client = anthropic.Anthropic(base_url=base_url, api_key="k", max_retries=0)
    with client.messages.stream(**_body(messages)) as stream:
        final = stream.get_final_message()
    block = final.content[0]
    assert block.type == "thinking"
    assert block.signature
    replay = [*messages, {"role": "assistant", "content": [b.model_dump() for b in final.content]}]
    call = final.content[-1]
    assert call.type == "tool_use"
    result = {"type": "tool_result", "tool_use_id": call.id, "content": "seen"}
    assert _post(base_url, _body([*replay, {"role": "user", "content": [result]}])).is_success


# --- Bedrock Converse: the same rules through boto3 ----------------------------------

BEDROCK_OPUS = "global.anthropic.claude-opus-5-5"


def _converse_loop(client: Any, steps: int, extra: dict[str, Any]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"text": LOOP}]}]
    for _ in range(steps):
        r = client.converse(
            modelId=BEDROCK_OPUS,
            messages=messages,
            toolConfig=BEDROCK_TOOLS,
            additionalModelRequestFields=extra,
        )
        content = r["output"]["message"]["content"]
        messages.append({"role": "assistant", "content": content})
        call = next(b["toolUse"] for b in content if "toolUse" in b)
        result = {"toolResult": {"toolUseId": call["toolUseId"], "content": [{"text": "seen"}]}}
        messages.append({"role": "user", "content": [result]})
    return messages


def test_bedrock_claude_reasoning_is_bound_to_its_prefix(base_url: str) -> None:
    from botocore.exceptions import ClientError

    client = _bedrock_client(base_url)
    drop = {"thinking": DROP, "anthropic_beta": [BETA]}
    messages = _converse_loop(client, 3, drop)
    first = messages[1]["content"][0]["reasoningContent"]["reasoningText"]
    assert first["signature"]
    assert first["text"] == ""
    # Appended exactly as returned: kept, nothing dropped.
    r = client.converse(
        modelId=BEDROCK_OPUS,
        messages=messages,
        toolConfig=BEDROCK_TOOLS,
        additionalModelRequestFields=drop,
    )
    assert r["additionalModelResponseFields"]["input_transformations"] == []
    edited = copy.deepcopy(messages)
    edited[4]["content"][0]["toolResult"]["content"] = [{"text": "seen (shortened)"}]
    r = client.converse(
        modelId=BEDROCK_OPUS,
        messages=edited,
        toolConfig=BEDROCK_TOOLS,
        additionalModelRequestFields=drop,
    )
    assert [t["path"] for t in r["additionalModelResponseFields"]["input_transformations"]] == [
        "messages.5.content.0"
    ]
    with pytest.raises(ClientError, match="bound to a different conversation"):
        client.converse(modelId=BEDROCK_OPUS, messages=edited, toolConfig=BEDROCK_TOOLS)
    with pytest.raises(ClientError, match="not supported for this model"):
        client.converse(
            modelId=BEDROCK_OPUS,
            messages=messages[:1],
            toolConfig={**BEDROCK_TOOLS, "toolChoice": {"any": {}}},
        )


def test_bedrock_stream_carries_reasoning(base_url: str) -> None:
    client = _bedrock_client(base_url)
    r = client.converse_stream(
        modelId=BEDROCK_OPUS,
        messages=[{"role": "user", "content": [{"text": LOOP}]}],
        toolConfig=BEDROCK_TOOLS,
    )
    deltas = [
        e["contentBlockDelta"]["delta"]["reasoningContent"]
        for e in r["stream"]
        if "contentBlockDelta" in e and "reasoningContent" in e["contentBlockDelta"]["delta"]
    ]
    assert [list(d) for d in deltas] == [["signature"]]


# --- OpenAI Responses: reasoning items after a changed prefix are dropped -------------

GPT = "gpt-5.6-sol"
RESPONSES_TOOLS = [
    {"type": "function", "name": "view", "parameters": {"type": "object"}, "strict": False}
]


def _responses(url: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/responses", headers={"authorization": "Bearer k"}, json=body, timeout=60
    )


def _responses_loop(url: str, steps: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [{"role": "user", "content": LOOP}]
    for _ in range(steps):
        r = _responses(
            url,
            {
                "model": GPT,
                "input": items,
                "tools": RESPONSES_TOOLS,
                "store": False,
                "include": ["reasoning.encrypted_content"],
            },
        )
        assert r.status_code == 200, r.text
        output = r.json()["output"]
        items.extend(output)
        call = next(o for o in output if o["type"] == "function_call")
        items.append({"type": "function_call_output", "call_id": call["call_id"], "output": "seen"})
    return items


def test_responses_reasoning_after_a_changed_prefix_is_dropped(base_url: str) -> None:
    items = _responses_loop(base_url, 3)
    assert items[1]["type"] == "reasoning"
    assert items[1]["encrypted_content"]
    body = {
        "model": GPT,
        "input": items,
        "tools": RESPONSES_TOOLS,
        "store": False,
        "include": ["reasoning.encrypted_content"],
    }
    kept = _responses(base_url, body).json()["usage"]
    edited = copy.deepcopy(items)
    first_output = next(
        i for i, it in enumerate(edited) if it.get("type") == "function_call_output"
    )
    edited[first_output]["output"] = "seen (shortened)"
    dropped = _responses(base_url, {**body, "input": edited})
    assert dropped.status_code == 200, dropped.text  # no error: the items are discarded
    usage = dropped.json()["usage"]
    # Two later items dropped: not billed, and their reasoning is done again.
    redo = usage["output_tokens_details"]["reasoning_tokens"]
    assert redo - kept["output_tokens_details"]["reasoning_tokens"] == 2 * 48
    assert kept["input_tokens"] - usage["input_tokens"] > 0
    # An item sent back without its content or a stored id is refused.
    bare = copy.deepcopy(items)
    bare[1].pop("encrypted_content")
    refused = _responses(base_url, {**body, "input": bare})
    assert refused.status_code == 400
    assert "Items are not persisted when `store` is set to false" in refused.text


def test_a_call_sent_back_with_its_item_id_needs_its_reasoning_item(base_url: str) -> None:
    """The API refuses a function_call item id whose reasoning item is missing (cline
    issue #12242 on gpt-5.5); a call sent with its call_id only needs none."""
    items = _responses_loop(base_url, 2)
    body = {
        "model": GPT,
        "tools": RESPONSES_TOOLS,
        "store": False,
        "include": ["reasoning.encrypted_content"],
    }
    assert _responses(base_url, {**body, "input": items}).status_code == 200
    reasoning = next(i for i in items if i.get("type") == "reasoning")
    call = next(i for i in items if i.get("type") == "function_call")
    without = [i for i in items if i is not reasoning]
    refused = _responses(base_url, {**body, "input": without})
    assert refused.status_code == 400
    expected = (
        f"Item '{call['id']}' of type 'function_call' was provided without its required "
        f"'reasoning' item: '{reasoning['id']}'."
    )
    assert refused.json()["error"]["message"] == expected
    bare = [{k: v for k, v in i.items() if k != "id"} if i is call else i for i in without]
    assert _responses(base_url, {**body, "input": bare}).status_code == 200
