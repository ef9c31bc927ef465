"""Anthropic Messages API replies: a reply (plain dict) or its stream events as a record
message (:mod:`visus.wire.anthropic` builds the requests and re-exports these).

A reply that holds reasoning (``thinking``, ``redacted_thinking``) is kept whole, as the
message's provider state, so the turn goes back exactly as returned
(:mod:`visus.wire._thinking`); ``input_transformations`` (what the API dropped) is
counted in its usage.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TypedDict, cast

from visus.record.messages import AssistantMessage, JSONObject, StopReason, ToolCall, Usage
from visus.wire._reply import ReplyContext, as_int, decode_arguments, new_call_id, usage_for
from visus.wire._thinking import dropped_reasoning, is_claude_thinking, keep

__all__ = ["WIRE", "Block", "Reply", "Stream", "parse"]

WIRE = "anthropic"

# --- replies (Messages API reference: "Messages" and "Streaming Messages") ----------


class Block(TypedDict, total=False):
    """A reply content block: ``text``, ``tool_use``, ``thinking`` (its ``thinking`` text,
    empty unless the request asked to see it, and its ``signature``), or
    ``redacted_thinking`` (opaque ``data``)."""

    type: str
    text: str
    id: str
    name: str
    input: JSONObject
    thinking: str
    signature: str
    data: str


class ReplyUsage(TypedDict, total=False):
    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int | None
    cache_read_input_tokens: int | None


class Reply(TypedDict, total=False):
    """``POST /v1/messages`` reply (the fields visus reads)."""

    content: list[Block]
    stop_reason: str | None
    usage: ReplyUsage
    #: With the ``thinking-binding-controls-2026-08-01`` beta: the earlier reasoning
    #: blocks the API left out of this request (or let through unchecked).
    input_transformations: list[JSONObject]


_STOP: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "stop_sequence": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "model_context_window_exceeded": "max_tokens",
    "refusal": "content_filter",
}


def _prompt_tokens(u: Mapping[str, object]) -> int:
    # Cached prompt tokens are still prompt tokens; count them so context use is honest.
    return (
        as_int(u.get("input_tokens"))
        + as_int(u.get("cache_creation_input_tokens"))
        + as_int(u.get("cache_read_input_tokens"))
    )


def _usage(ctx: ReplyContext, u: Mapping[str, object], transformations: object = None) -> Usage:
    """Usage from the reply's fields: ``input_tokens`` there is what followed the last
    cache breakpoint; the cache's writes and reads are counted beside it, and so are
    the reasoning blocks the API dropped (``input_transformations``)."""
    usage = usage_for(
        ctx.model,
        _prompt_tokens(u),
        as_int(u.get("output_tokens")),
        cache_read=as_int(u.get("cache_read_input_tokens")),
        cache_write=as_int(u.get("cache_creation_input_tokens")),
    )
    return replace(usage, reasoning_dropped=dropped_reasoning(transformations))


def parse(reply: JSONObject, ctx: ReplyContext) -> AssistantMessage:
    """A Messages API reply (plain dict) as an assistant message.

    Example:
        >>> from visus.models.spec import ModelSpec
        >>> ctx = ReplyContext(ModelSpec(name="claude-x", provider="anthropic"))
        >>> m = parse({"content": [{"type": "text", "text": "Hi"}],
        ...            "stop_reason": "max_tokens", "usage": {"input_tokens": 3,
        ...            "output_tokens": 1}}, ctx)
        >>> m.text, m.stop_reason, m.usage.input_tokens
        ('Hi', 'max_tokens', 3)
        >>> u = {"input_tokens": 50, "cache_creation_input_tokens": 200,
        ...      "cache_read_input_tokens": 1000, "output_tokens": 5}
        >>> m = parse({"content": [], "usage": u}, ctx).usage
        >>> m.input_tokens, m.cache_read_tokens, m.cache_write_tokens
        (1250, 1000, 200)
    """
    r = cast("Reply", reply)
    return _message(ctx, r.get("content") or [], r, r.get("stop_reason"))


def _message(ctx: ReplyContext, content: list[Block], r: Reply, stop: object) -> AssistantMessage:
    """The reply's content as a record message: its text, its calls, and, when it holds
    reasoning, every block as returned (:mod:`visus.wire._thinking`)."""
    text: list[str] = []
    calls: list[ToolCall] = []
    for block in content:
        if block.get("type") == "text":
            text.append(block.get("text", ""))
        elif block.get("type") == "tool_use":
            calls.append(_call(block, decode_arguments(block.get("input"))))
    state = keep(WIRE, cast("list[JSONObject]", content), reasoning=is_claude_thinking)
    usage = _usage(ctx, r.get("usage") or {}, r.get("input_transformations"))
    return ctx.message("".join(text), calls, usage, _stop(stop), state)


def _call(block: Block, arguments: JSONObject) -> ToolCall:
    return ToolCall(
        id=block.get("id") or new_call_id(), name=block.get("name", ""), arguments=arguments
    )


def _stop(reason: object) -> StopReason:
    return _STOP.get(reason, "other") if isinstance(reason, str) else "other"


class Event(TypedDict, total=False):
    """One streamed event: ``message_start``, ``content_block_start``,
    ``content_block_delta``, ``message_delta``, ``error`` (others are skipped)."""

    type: str
    index: int
    message: Reply
    content_block: Block
    delta: EventDelta
    usage: ReplyUsage
    error: JSONObject


class EventDelta(TypedDict, total=False):
    type: str
    text: str
    partial_json: str
    thinking: str
    signature: str
    stop_reason: str | None


class Stream:
    """Accumulates a streamed Messages reply from its event dicts, block by block (a
    ``thinking`` block's text and ``signature`` arrive in their own deltas and go back
    as one block, even when no thinking text came).

    Example:
        >>> from visus.models.spec import ModelSpec
        >>> s = Stream(ReplyContext(ModelSpec(name="claude-x", provider="anthropic")))
        >>> s.feed({"type": "content_block_delta", "index": 0,
        ...         "delta": {"type": "text_delta", "text": "Hi"}})
        'Hi'
        >>> _ = s.feed({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
        ...             "usage": {"output_tokens": 2}})
        >>> s.result().stop_reason
        'end_turn'
    """

    def __init__(self, ctx: ReplyContext) -> None:
        self.ctx = ctx
        self.blocks: dict[int, tuple[Block, list[str]]] = {}
        self.signatures: dict[int, list[str]] = {}
        self.reply: Reply = {}
        self.usage: dict[str, object] = {}
        self.stop: object = None

    def _slot(self, index: int, kind: str) -> list[str]:
        return self.blocks.setdefault(index, (Block(type=kind), []))[1]

    def feed(self, event: JSONObject) -> str:
        e = cast("Event", event)
        kind = e.get("type")
        if kind == "message_start":
            message = e.get("message") or {}
            self.usage = dict(message.get("usage") or {})
            self._transformations(message)
        elif kind == "content_block_start":
            self.blocks[e.get("index", 0)] = (Block(**(e.get("content_block") or {})), [])
        elif kind == "content_block_delta":
            return self._delta(e.get("index", 0), e.get("delta") or {})
        elif kind == "message_delta":
            self.stop = (e.get("delta") or {}).get("stop_reason") or self.stop
            # message_delta's usage is cumulative; input counts appear here on some gateways.
            given = e.get("usage") or {}
            self.usage.update({k: v for k, v in given.items() if as_int(v)})
            # After a server-side fallback the serving model's entries come again here.
            self._transformations(cast("Reply", event))
        elif kind == "error":
            err = e.get("error") or {}
            raise self.ctx.error(str(err.get("message") or err))
        return ""

    def _transformations(self, holder: Reply) -> None:
        if "input_transformations" in holder:
            self.reply["input_transformations"] = holder["input_transformations"]

    def _delta(self, index: int, delta: EventDelta) -> str:
        """One delta onto its block; the answer text it adds (for the caller to show)."""
        kind = delta.get("type")
        if kind == "text_delta":
            self._slot(index, "text").append(delta.get("text", ""))
            return delta.get("text", "")
        if kind == "input_json_delta":
            self._slot(index, "tool_use").append(delta.get("partial_json", ""))
        elif kind == "thinking_delta":
            self._slot(index, "thinking").append(delta.get("thinking", ""))
        elif kind == "signature_delta":
            self._slot(index, "thinking")
            self.signatures.setdefault(index, []).append(delta.get("signature", ""))
        return ""

    def _content(self) -> list[Block]:
        content: list[Block] = []
        for index, (block, parts) in sorted(self.blocks.items()):
            block = Block(**block)
            kind = block.get("type")
            if kind == "text":
                block["text"] = block.get("text", "") + "".join(parts)
            elif kind == "thinking":
                block["thinking"] = block.get("thinking", "") + "".join(parts)
                block["signature"] = block.get("signature", "") + "".join(
                    self.signatures.get(index, ())
                )
            elif kind == "tool_use" and parts:
                block["input"] = decode_arguments("".join(parts))
            content.append(block)
        return content

    def result(self) -> AssistantMessage:
        self.reply["usage"] = cast("ReplyUsage", self.usage)
        return _message(self.ctx, self._content(), self.reply, self.stop)
