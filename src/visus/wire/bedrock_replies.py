"""Bedrock Converse replies: a reply (boto3's dict, redacted reasoning as base64) or its
stream events as a record message (:mod:`visus.wire.bedrock` builds the requests and
re-exports these).

A reply that holds reasoning (``reasoningContent``: Claude's thinking) is kept whole, as
the message's provider state, so the turn goes back exactly as returned
(:mod:`visus.wire._thinking`); the reasoning Claude dropped (``input_transformations``,
in ``additionalModelResponseFields``) is counted in its usage.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TypedDict, cast

from visus.record.messages import AssistantMessage, JSONObject, StopReason, ToolCall, Usage
from visus.wire._reply import ReplyContext, as_int, decode_arguments, new_call_id, usage_for
from visus.wire._thinking import dropped_reasoning, is_reasoning_content, keep

__all__ = ["WIRE", "Reply", "Stream", "parse"]

WIRE = "bedrock"

# --- replies (API reference: Converse response; ConverseStream events) -----------


class ToolUse(TypedDict, total=False):
    toolUseId: str
    name: str
    input: JSONObject | str


class ReasoningText(TypedDict, total=False):
    text: str
    signature: str


class ReasoningOut(TypedDict, total=False):
    """``reasoningContent``: Claude's thinking (``reasoningText``) or its encrypted form
    (``redactedContent``, base64 here: the transport encodes boto3's bytes). In a stream
    delta the pieces come one at a time: ``text``, ``signature``, ``redactedContent``."""

    reasoningText: ReasoningText
    redactedContent: str
    text: str
    signature: str


class BlockOut(TypedDict, total=False):
    text: str
    toolUse: ToolUse
    reasoningContent: ReasoningOut


class MessageOut(TypedDict, total=False):
    role: str
    content: list[BlockOut]


class Output(TypedDict, total=False):
    message: MessageOut


class ReplyUsage(TypedDict, total=False):
    #: What followed the last cache checkpoint: cache reads and writes come beside it.
    inputTokens: int
    outputTokens: int
    cacheReadInputTokens: int
    cacheWriteInputTokens: int


class Reply(TypedDict, total=False):
    """A ``Converse`` reply (the fields visus reads)."""

    output: Output
    stopReason: str
    usage: ReplyUsage
    additionalModelResponseFields: JSONObject


class BlockStart(TypedDict, total=False):
    contentBlockIndex: int
    start: BlockOut


class BlockDelta(TypedDict, total=False):
    contentBlockIndex: int
    delta: BlockOut


class MessageStop(TypedDict, total=False):
    stopReason: str
    additionalModelResponseFields: JSONObject


class Metadata(TypedDict, total=False):
    usage: ReplyUsage


class Event(TypedDict, total=False):
    """One ``ConverseStream`` event (exactly one key set)."""

    contentBlockStart: BlockStart
    contentBlockDelta: BlockDelta
    messageStop: MessageStop
    metadata: Metadata


_STOP: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "stop_sequence": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "model_context_window_exceeded": "max_tokens",
    "guardrail_intervened": "content_filter",
    "content_filtered": "content_filter",
}


def _stop(reason: object) -> StopReason:
    return _STOP.get(reason, "other") if isinstance(reason, str) else "other"


def _usage(ctx: ReplyContext, u: ReplyUsage) -> Usage:
    read, write = as_int(u.get("cacheReadInputTokens")), as_int(u.get("cacheWriteInputTokens"))
    prompt = as_int(u.get("inputTokens")) + read + write
    output = as_int(u.get("outputTokens"))
    return usage_for(ctx.model, prompt, output, cache_read=read, cache_write=write)


def parse(reply: JSONObject, ctx: ReplyContext) -> AssistantMessage:
    """A Converse reply (plain dict, as boto3 returns it) as an assistant message.

    Example:
        >>> from visus.models.spec import ModelSpec
        >>> ctx = ReplyContext(ModelSpec(name="m", provider="bedrock"))
        >>> m = parse({"output": {"message": {"content": [{"text": "Hi"}]}},
        ...            "stopReason": "max_tokens"}, ctx)
        >>> m.text, m.stop_reason
        ('Hi', 'max_tokens')
    """
    r = cast("Reply", reply)
    content = ((r.get("output") or {}).get("message") or {}).get("content") or []
    extra = r.get("additionalModelResponseFields") or {}
    return _message(ctx, content, r.get("usage") or {}, r.get("stopReason"), extra)


def _message(
    ctx: ReplyContext, content: list[BlockOut], u: ReplyUsage, stop: object, extra: JSONObject
) -> AssistantMessage:
    """The reply's blocks as a record message; with its blocks kept as returned when it
    holds reasoning, and the reasoning Claude dropped (``input_transformations``, passed
    back in ``additionalModelResponseFields``) counted in its usage."""
    text: list[str] = []
    calls: list[ToolCall] = []
    for block in content:
        if "text" in block:
            text.append(block.get("text", ""))
        elif "toolUse" in block:
            use = block.get("toolUse") or {}
            calls.append(
                ToolCall(
                    id=use.get("toolUseId") or new_call_id(),
                    name=use.get("name", ""),
                    arguments=decode_arguments(use.get("input")),
                )
            )
    state = keep(WIRE, cast("list[JSONObject]", content), reasoning=is_reasoning_content)
    usage = replace(
        _usage(ctx, u), reasoning_dropped=dropped_reasoning(extra.get("input_transformations"))
    )
    return ctx.message("".join(text), calls, usage, _stop(stop), state)


class Stream:
    """Accumulates ``ConverseStream`` events (dicts, as boto3 yields them), block by
    block: a reasoning block's text, signature or redacted content arrive in deltas of
    their own and go back as one block.

    Example:
        >>> from visus.models.spec import ModelSpec
        >>> s = Stream(ReplyContext(ModelSpec(name="m", provider="bedrock")))
        >>> s.feed({"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"text": "Hi"}}})
        'Hi'
        >>> _ = s.feed({"messageStop": {"stopReason": "end_turn"}})
        >>> s.result().stop_reason
        'end_turn'
    """

    def __init__(self, ctx: ReplyContext) -> None:
        self.ctx = ctx
        self.slots: dict[int, _Slot] = {}
        self.usage: ReplyUsage = {}
        self.stop: object = None
        self.extra: JSONObject = {}

    def _slot(self, index: int) -> _Slot:
        return self.slots.setdefault(index, _Slot())

    def feed(self, event: JSONObject) -> str:
        e = cast("Event", event)
        if "contentBlockStart" in e:
            start = e.get("contentBlockStart") or {}
            use = (start.get("start") or {}).get("toolUse")
            if use:
                self._slot(start.get("contentBlockIndex", 0)).use = dict(use)  # type: ignore[assignment]
        elif "contentBlockDelta" in e:
            delta = e.get("contentBlockDelta") or {}
            return self._slot(delta.get("contentBlockIndex", 0)).feed(delta.get("delta") or {})
        elif "messageStop" in e:
            stop = e.get("messageStop") or {}
            self.stop = stop.get("stopReason")
            self.extra = dict(stop.get("additionalModelResponseFields") or {})
        elif "metadata" in e:
            self.usage = (e.get("metadata") or {}).get("usage") or self.usage
        return ""

    def result(self) -> AssistantMessage:
        content = [b for _, slot in sorted(self.slots.items()) if (b := slot.block()) is not None]
        return _message(self.ctx, content, self.usage, self.stop, self.extra)


class _Slot:
    """One content block of a streamed reply, put together from its deltas."""

    def __init__(self) -> None:
        self.use: ToolUse | None = None
        self.parts: list[str] = []
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.signature: list[str] = []
        self.redacted: list[str] = []

    def feed(self, body: BlockOut) -> str:
        """One delta; the answer text it adds."""
        if body.get("text"):
            self.text.append(body.get("text", ""))
            return body.get("text", "")
        if "toolUse" in body:
            raw = (body.get("toolUse") or {}).get("input", "")
            self.parts.append(raw if isinstance(raw, str) else "")
            self.use = self.use if self.use is not None else {}
        reasoning = body.get("reasoningContent") or {}
        self.reasoning.append(reasoning.get("text", ""))
        self.signature.append(reasoning.get("signature", ""))
        self.redacted.append(reasoning.get("redactedContent", ""))
        return ""

    def block(self) -> BlockOut | None:
        if self.use is not None:
            use: ToolUse = {**self.use, "input": decode_arguments("".join(self.parts))}
            return {"toolUse": use}
        if any(self.redacted):
            return {"reasoningContent": {"redactedContent": "".join(self.redacted)}}
        if any(self.signature) or any(self.reasoning):
            text, signature = "".join(self.reasoning), "".join(self.signature)
            return {"reasoningContent": {"reasoningText": {"text": text, "signature": signature}}}
        return {"text": "".join(self.text)} if self.text else None
