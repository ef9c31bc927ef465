"""The model's reasoning is part of the record and goes back byte-for-byte on its own wire.

Anthropic ``thinking`` / ``redacted_thinking`` blocks and Bedrock ``reasoningContent`` are
kept from replies and streams, survive the session log, and are lowered back exactly as
returned on the same wire (Anthropic's "Preserved thinking": "Send each assistant turn
back exactly as the API returned it"); another wire's model never sees them, not even as
text. Gemini's thought signature that arrives on an empty final part is kept too.
"""

from __future__ import annotations

import base64
import json
from dataclasses import replace

from visus.models.spec import ModelSpec
from visus.record.codec import message_from_dict, message_to_dict
from visus.record.messages import AssistantMessage, ModelRequest, TextPart, ToolResult
from visus.wire import WIRES, ReplyContext, lower

from .corpus import VARIANTS, one_view, store
from .sdk_check import CHECKS, check_bedrock

SIGNATURE = base64.b64encode(b"\x00signed over the prefix\xff" * 4).decode()
REDACTED = base64.b64encode(b"\x01opaque reasoning\x02" * 3).decode()

#: A reply as the Messages API returns it: reasoning interleaved with text and a call.
ANTHROPIC_CONTENT = [
    {"type": "thinking", "thinking": "", "signature": SIGNATURE},
    {"type": "text", "text": "Let me look."},
    {"type": "redacted_thinking", "data": REDACTED},
    {"type": "text", "text": " At red.png."},
    {"type": "tool_use", "id": "call_1", "name": "view", "input": {"path": "red.png"}},
]
BEDROCK_CONTENT = [
    {"reasoningContent": {"reasoningText": {"text": "Plan: view it.", "signature": SIGNATURE}}},
    {"text": "Let me look."},
    {"reasoningContent": {"redactedContent": REDACTED}},
    {"toolUse": {"toolUseId": "call_1", "name": "view", "input": {"path": "red.png"}}},
]


def _spec(wire: str) -> ModelSpec:
    return next(v.spec for v in VARIANTS if v.wire == wire)


def _with(message: AssistantMessage) -> ModelRequest:
    """``one_view`` with its assistant step replaced by ``message``."""
    req = one_view()
    return replace(req, messages=(req.messages[0], message, req.messages[2]))


def _anthropic_reply() -> AssistantMessage:
    ctx = ReplyContext(_spec("anthropic"), provider="anthropic")
    reply = {"content": ANTHROPIC_CONTENT, "stop_reason": "tool_use", "usage": {}}
    return WIRES["anthropic"].parse(reply, ctx)


def _strip_cache(value: object) -> object:
    if isinstance(value, dict):
        return {k: _strip_cache(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip_cache(v) for v in value]
    return value


def test_anthropic_reply_goes_back_exactly_as_returned() -> None:
    message = _anthropic_reply()
    assert message.text == "Let me look. At red.png."
    assert [c.id for c in message.tool_calls] == ["call_1"]
    body = lower(_with(message), wire="anthropic", model=_spec("anthropic"), blobs=store())
    assert _strip_cache(body["messages"][1]["content"]) == ANTHROPIC_CONTENT
    CHECKS["anthropic"](body)


def test_anthropic_stream_keeps_the_blocks_and_their_signature() -> None:
    ctx = ReplyContext(_spec("anthropic"), provider="anthropic")
    stream = WIRES["anthropic"].stream(ctx)
    events: list[dict[str, object]] = [{"type": "message_start", "message": {"usage": {}}}]
    thinking = {"type": "thinking", "thinking": "", "signature": ""}
    events += [
        {"type": "content_block_start", "index": 0, "content_block": thinking},
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "signature_delta", "signature": SIGNATURE[:10]},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "signature_delta", "signature": SIGNATURE[10:]},
        },
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "text_delta", "text": "Let me look."},
        },
        {"type": "content_block_start", "index": 2, "content_block": ANTHROPIC_CONTENT[2]},
        {"type": "content_block_start", "index": 3, "content_block": {"type": "text", "text": ""}},
        {
            "type": "content_block_delta",
            "index": 3,
            "delta": {"type": "text_delta", "text": " At red.png."},
        },
        {
            "type": "content_block_start",
            "index": 4,
            "content_block": {**ANTHROPIC_CONTENT[4], "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 4,
            "delta": {"type": "input_json_delta", "partial_json": '{"path": "red.png"}'},
        },
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {}},
    ]
    shown = "".join(stream.feed(e) for e in events)
    assert shown == "Let me look. At red.png."  # reasoning is never shown as the answer
    message = stream.result()
    assert message == _anthropic_reply()
    assert message.provider_state is not None
    assert SIGNATURE in message.provider_state.items


def test_reasoning_survives_the_session_log() -> None:
    message = _anthropic_reply()
    again = message_from_dict(json.loads(json.dumps(message_to_dict(message))))
    assert again == message
    body = lower(_with(again), wire="anthropic", model=_spec("anthropic"), blobs=store())
    assert _strip_cache(body["messages"][1]["content"]) == ANTHROPIC_CONTENT


def test_another_wire_never_sees_the_reasoning() -> None:
    message = _anthropic_reply()
    for v in VARIANTS:
        if v.wire == "anthropic":
            continue
        body = lower(_with(message), wire=v.wire, model=v.spec, blobs=store())
        text = json.dumps(body)
        assert SIGNATURE not in text, v.wire
        assert REDACTED not in text, v.wire
        assert "Let me look. At red.png." in text, v.wire  # the answer itself still goes


def test_an_edited_turn_keeps_its_reasoning_blocks_but_says_what_the_record_says() -> None:
    """When the record's text no longer matches the reply (someone edited it), the
    reasoning still goes back (the provider then judges it) and the text is the record's."""
    edited = replace(_anthropic_reply(), parts=(TextPart("Edited."),))
    body = lower(_with(edited), wire="anthropic", model=_spec("anthropic"), blobs=store())
    blocks = _strip_cache(body["messages"][1]["content"])
    assert blocks == [
        ANTHROPIC_CONTENT[0],
        ANTHROPIC_CONTENT[2],
        {"type": "text", "text": "Edited."},
        ANTHROPIC_CONTENT[4],
    ]


def test_no_cache_breakpoint_lands_on_a_thinking_block() -> None:
    """A thinking block cannot carry ``cache_control``: a reply that ends in one (cut off
    at the output limit) gets its breakpoint on the block before it."""
    content = [{"type": "text", "text": "Hm."}, ANTHROPIC_CONTENT[0]]
    ctx = ReplyContext(_spec("anthropic"), provider="anthropic")
    message = WIRES["anthropic"].parse({"content": content, "stop_reason": "max_tokens"}, ctx)
    req = ModelRequest(messages=(*one_view().messages[:1], message))
    body = lower(req, wire="anthropic", model=_spec("anthropic"), blobs=store())
    last = body["messages"][-1]["content"]
    assert "cache_control" in last[0]
    assert "cache_control" not in last[1]


def test_dropped_reasoning_is_counted_in_usage() -> None:
    ctx = ReplyContext(_spec("anthropic"), provider="anthropic")
    dropped = [
        {
            "type": "thinking_dropped",
            "path": "messages.1.content.0",
            "reason": "prefix_binding_mismatch",
        },
        {
            "type": "thinking_dropped",
            "path": "messages.3.content.0",
            "reason": "prefix_binding_mismatch",
        },
        {"type": "a_later_kind", "path": "messages.5.content.0"},
    ]
    reply = {
        "content": [{"type": "text", "text": "ok"}],
        "usage": {},
        "input_transformations": dropped,
    }
    assert WIRES["anthropic"].parse(reply, ctx).usage.reasoning_dropped == 2  # type: ignore[union-attr]
    stream = WIRES["anthropic"].stream(ctx)
    stream.feed(
        {"type": "message_start", "message": {"usage": {}, "input_transformations": dropped}}
    )
    assert stream.result().usage.reasoning_dropped == 2  # type: ignore[union-attr]


def _bedrock_reply() -> AssistantMessage:
    ctx = ReplyContext(_spec("bedrock"), provider="bedrock")
    reply = {
        "output": {"message": {"role": "assistant", "content": BEDROCK_CONTENT}},
        "stopReason": "tool_use",
        "usage": {},
    }
    return WIRES["bedrock"].parse(reply, ctx)


def test_bedrock_reasoning_goes_back_exactly_as_returned() -> None:
    message = _bedrock_reply()
    assert message.text == "Let me look."
    spec = _spec("bedrock")
    body = lower(_with(message), wire="bedrock", model=spec, blobs=store())
    content = [b for b in body["messages"][1]["content"] if "cachePoint" not in b]
    assert content == BEDROCK_CONTENT
    check_bedrock(body, model_id=spec.name)
    anthropic = lower(_with(message), wire="anthropic", model=_spec("anthropic"), blobs=store())
    assert SIGNATURE not in json.dumps(anthropic)


def test_bedrock_stream_puts_each_reasoning_block_together() -> None:
    ctx = ReplyContext(_spec("bedrock"), provider="bedrock")
    stream = WIRES["bedrock"].stream(ctx)
    events = [
        {
            "contentBlockDelta": {
                "contentBlockIndex": 0,
                "delta": {"reasoningContent": {"text": "Plan: "}},
            }
        },
        {
            "contentBlockDelta": {
                "contentBlockIndex": 0,
                "delta": {"reasoningContent": {"text": "view it."}},
            }
        },
        {
            "contentBlockDelta": {
                "contentBlockIndex": 0,
                "delta": {"reasoningContent": {"signature": SIGNATURE}},
            }
        },
        {"contentBlockDelta": {"contentBlockIndex": 1, "delta": {"text": "Let me look."}}},
        {
            "contentBlockDelta": {
                "contentBlockIndex": 2,
                "delta": {"reasoningContent": {"redactedContent": REDACTED}},
            }
        },
        {
            "contentBlockStart": {
                "contentBlockIndex": 3,
                "start": {"toolUse": {"toolUseId": "call_1", "name": "view"}},
            }
        },
        {
            "contentBlockDelta": {
                "contentBlockIndex": 3,
                "delta": {"toolUse": {"input": '{"path": "red.png"}'}},
            }
        },
        {"messageStop": {"stopReason": "tool_use"}},
    ]
    assert "".join(stream.feed(e) for e in events) == "Let me look."
    message = stream.result()
    assert message == _bedrock_reply()
    assert message.provider_state is not None
    assert REDACTED in message.provider_state.items


def test_gemini_keeps_a_signature_on_an_empty_final_part() -> None:
    """Gemini can send the signature on a last part with no text (a stream's final chunk):
    it goes back on the model's content all the same."""
    ctx = ReplyContext(_spec("gemini"), provider="gemini")
    stream = WIRES["gemini"].stream(ctx)
    stream.feed({"candidates": [{"content": {"parts": [{"text": "The square is red."}]}}]})
    stream.feed(
        {
            "candidates": [
                {
                    "content": {"parts": [{"text": "", "thoughtSignature": SIGNATURE}]},
                    "finishReason": "STOP",
                }
            ]
        }
    )
    message = stream.result()
    assert message.text == "The square is red."
    req = replace(one_view(), messages=(*one_view().messages, message))
    body = lower(req, wire="gemini", model=_spec("gemini"), blobs=store())
    assert SIGNATURE in json.dumps(body["contents"][-1])
    CHECKS["gemini"](body)


def test_a_tool_result_after_reasoning_is_unchanged() -> None:
    """Keeping reasoning changes only the assistant turn: the rest lowers as before."""
    plain = lower(one_view(), wire="anthropic", model=_spec("anthropic"), blobs=store())
    kept = lower(
        _with(_anthropic_reply()), wire="anthropic", model=_spec("anthropic"), blobs=store()
    )
    assert plain["messages"][2] == kept["messages"][2]
    assert isinstance(one_view().messages[2], ToolResult)
