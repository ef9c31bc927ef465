"""Anthropic Messages API (``POST /v1/messages``) request bodies.

Images and PDF documents (``document`` blocks, on models with ``spec.pdf``) ride
natively everywhere the API allows them: in user turns and inside ``tool_result``
content. Tool results are user-role content, so a run of tool
results and the user message after it merge into one user turn (the API requires
alternating roles), ``tool_result`` blocks first. Prompt-caching breakpoints
(``cache_control``) mark the system prompt, the history before the live images and the
newest block, so the newest message below carries one.

Example:
    >>> from visus.wire import lower
    >>> from visus.record.blobs import MemoryBlobStore
    >>> from visus.record.messages import ModelRequest, UserMessage, TextPart
    >>> from visus.models.spec import ModelSpec
    >>> spec = ModelSpec(name="claude-x", provider="anthropic", vision=True)
    >>> req = ModelRequest(messages=(UserMessage((TextPart("hi"),)),), max_tokens=64)
    >>> body = lower(req, wire="anthropic", model=spec, blobs=MemoryBlobStore())
    >>> body["messages"][0]["content"]
    [{'type': 'text', 'text': 'hi', 'cache_control': {'type': 'ephemeral'}}]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import (
    TYPE_CHECKING,
    Any,
    Literal,
    NotRequired,
    TypeAlias,
    TypedDict,
    assert_never,
    cast,
)

from visus import limits
from visus.record.messages import (
    AssistantMessage,
    JSONObject,
    StopReason,
    TextPart,
    ToolCall,
    Usage,
)
from visus.wire._cache import ladder_message
from visus.wire._prepare import WireRules
from visus.wire._prepared import (
    JSONValue,
    Prepared,
    WireDocument,
    WireImage,
    WirePart,
    WireTool,
    WireUser,
    merge_roles,
    plain,
)
from visus.wire._reply import ReplyContext, as_int, decode_arguments, new_call_id, usage_for
from visus.wire._thinking import (
    ThinkingConfig,
    dropped_reasoning,
    keep,
    replay,
    replay_reasoning,
    thinking_config,
)

if TYPE_CHECKING:
    from visus.wire._prepared import Body

__all__ = ["RULES", "WIRE", "Reply", "Request", "Stream", "build", "cap", "parse"]

WIRE = "anthropic"

#: Image block media types (anthropic-sdk-python ``base64_image_source_param.py``).
RULES = WireRules(
    media_types=frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"}),
    # The per-image byte cap is on the base64 text (5 MB on Bedrock and Vertex).
    base64_byte_limit=True,
    many_images_rule=True,
    # Provider bounds (WIRES.md), the same values the reference server enforces.
    max_images=limits.ANTHROPIC_MAX_IMAGES,
    max_images_large_context=limits.ANTHROPIC_MAX_IMAGES_LARGE_CONTEXT,
    max_edge=limits.ANTHROPIC_MAX_EDGE,
    max_image_bytes=limits.ANTHROPIC_MAX_IMAGE_B64,
    max_request_image_bytes=limits.ANTHROPIC_MAX_REQUEST_IMAGE_B64,
    # PDFs: 32 MB per request, 100 pages (600 on contexts over 200k tokens).
    max_document_bytes=limits.ANTHROPIC_MAX_PDF_B64,
    max_document_pages=limits.ANTHROPIC_MAX_PDF_PAGES,
    max_document_pages_large_context=limits.ANTHROPIC_MAX_PDF_PAGES_LARGE_CONTEXT,
    documents_share_budget=True,
)

# --- requests (Messages API reference: "Create a Message") ----------------------


class Base64Source(TypedDict):
    """The ``source`` of an image or document block. ``media_type`` is one the wire's
    ``RULES`` allow for images, ``application/pdf`` for documents (``prepare`` sees to
    both), so it stays a ``str`` here."""

    type: Literal["base64"]
    media_type: str
    data: str


class CacheControl(TypedDict):
    """A prompt-cache breakpoint: the prefix up to and including its block is cached."""

    type: Literal["ephemeral"]


class TextBlock(TypedDict):
    type: Literal["text"]
    text: str
    cache_control: NotRequired[CacheControl]


class ImageBlock(TypedDict):
    type: Literal["image"]
    source: Base64Source
    cache_control: NotRequired[CacheControl]


class DocumentBlock(TypedDict):
    type: Literal["document"]
    source: Base64Source
    title: NotRequired[str]
    cache_control: NotRequired[CacheControl]


#: What a ``tool_result`` may hold, and all a user turn holds besides tool results.
MediaBlock: TypeAlias = TextBlock | ImageBlock | DocumentBlock


class ToolUseBlock(TypedDict):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, JSONValue]
    cache_control: NotRequired[CacheControl]


class ToolResultBlock(TypedDict):
    """A tool's result, in a user turn. No ``content`` key when the tool said nothing."""

    type: Literal["tool_result"]
    tool_use_id: str
    content: NotRequired[list[MediaBlock]]
    is_error: NotRequired[bool]
    cache_control: NotRequired[CacheControl]


#: A block of an earlier reply sent back exactly as it came (``thinking`` with its
#: ``signature``, ``redacted_thinking``, and the reply's own text and ``tool_use``):
#: visus never reads inside it (:mod:`visus.wire._thinking`).
ReplyBlock: TypeAlias = JSONObject
ContentBlock: TypeAlias = MediaBlock | ToolUseBlock | ToolResultBlock | ReplyBlock
Role: TypeAlias = Literal["user", "assistant"]


class Message(TypedDict):
    role: Role
    content: list[ContentBlock]


class Tool(TypedDict):
    name: str
    description: NotRequired[str]
    input_schema: dict[str, JSONValue]
    cache_control: NotRequired[CacheControl]


class OutputConfig(TypedDict):
    effort: str


class Request(TypedDict):
    """``POST /v1/messages`` body (the fields visus sends). ``betas`` is not part of the
    JSON the API takes: the transport sends it as the ``anthropic-beta`` header (what the
    SDKs' ``betas`` parameter does)."""

    model: str
    max_tokens: int
    system: NotRequired[list[TextBlock]]
    messages: list[Message]
    tools: NotRequired[list[Tool]]
    thinking: NotRequired[ThinkingConfig]
    output_config: NotRequired[OutputConfig]
    betas: NotRequired[list[str]]


def _block(part: WirePart) -> MediaBlock | None:
    if isinstance(part, TextPart):
        # The API refuses text blocks without non-whitespace text; such a part says nothing.
        return {"type": "text", "text": part.text} if part.text.strip() else None
    if isinstance(part, WireImage):
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": part.media_type, "data": part.data},
        }
    if isinstance(part, WireDocument):
        return {
            "type": "document",
            "source": {"type": "base64", "media_type": part.media_type, "data": part.data},
            "title": part.filename,
        }
    assert_never(part)


def _blocks(parts: tuple[WirePart, ...]) -> list[MediaBlock]:
    return [b for b in map(_block, parts) if b is not None]


def _tool_result(message: WireTool) -> ToolResultBlock:
    block: ToolResultBlock = {"type": "tool_result", "tool_use_id": message.call_id}
    content = _blocks(message.parts)
    if content:
        block["content"] = content
    if message.is_error:
        block["is_error"] = True
    return block


def _is_reasoning(block: Mapping[str, object]) -> bool:
    return block.get("type") in ("thinking", "redacted_thinking")


def _tool_use_id(block: Mapping[str, object]) -> str | None:
    value = block.get("id") if block.get("type") == "tool_use" else None
    return value if isinstance(value, str) else None


def _assistant(message: AssistantMessage) -> list[ContentBlock]:
    """The assistant turn: the reply's own blocks as returned when it held reasoning
    (its thinking blocks are bound to them), else built from the record."""
    state, ids = message.provider_state, [c.id for c in message.tool_calls]
    kept = replay(state, WIRE, message.text, ids, call_id=_tool_use_id)
    if kept is not None:
        return list(kept)
    blocks: list[ContentBlock] = list(replay_reasoning(state, WIRE, reasoning=_is_reasoning))
    blocks.extend(TextBlock(type="text", text=p.text) for p in message.parts if p.text.strip())
    blocks.extend(
        ToolUseBlock(type="tool_use", id=c.id, name=c.name, input=plain(c.arguments))
        for c in message.tool_calls
    )
    return blocks


def build(prepared: Prepared) -> Request:
    """The Messages API body for ``prepared``."""
    turns: list[tuple[Role, Sequence[ContentBlock]]] = []
    for message in prepared.messages:
        if isinstance(message, WireUser):
            turns.append(("user", _blocks(message.parts)))
        elif isinstance(message, WireTool):
            turns.append(("user", [_tool_result(message)]))
        elif isinstance(message, AssistantMessage):
            turns.append(("assistant", _assistant(message)))
        else:
            assert_never(message)
    # The API refuses a turn with no content; one that lost every block says so.
    messages: list[Message] = [
        {"role": role, "content": blocks or [{"type": "text", "text": "(empty)"}]}
        for role, blocks in merge_roles(turns)
    ]
    model, max_tokens = prepared.model.name, prepared.max_tokens
    body: Request
    if prepared.system:  # ahead of messages: the snapshots pin the key order
        system: list[TextBlock] = [{"type": "text", "text": prepared.system}]
        body = {"model": model, "max_tokens": max_tokens, "system": system, "messages": messages}
    else:
        body = {"model": model, "max_tokens": max_tokens, "messages": messages}
    if prepared.tools:
        body["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": plain(t.parameters)}
            for t in prepared.tools
        ]
    _mark_breakpoints(body)
    thinking, betas = thinking_config(prepared.model)
    if thinking is not None:
        body["thinking"] = thinking
    if prepared.effort is not None:
        body["output_config"] = {"effort": prepared.effort}
    if betas:
        body["betas"] = betas
    return body


def _ephemeral() -> CacheControl:
    return {"type": "ephemeral"}


def _mark_breakpoints(body: Request) -> None:
    """Prompt-cache breakpoints (the 4 the API allows), placed so that the retention
    window's batch evictions rewrite as little as possible:

    1. the end of the stable head: the system prompt, else the last tool;
    2. the end of the history before the first live tool image (else any live image or
       document): an eviction changes the request only from there on, so the next
       eviction still reads this prefix from the cache and writes only what follows. It
       is marked even when that image is the newest message (right after an eviction):
       a prefix is written only at a breakpoint past the longest hit, and later steps
       hit further on, so this is the one request that caches it;
    2b. a ladder 16 blocks before it (:mod:`visus.wire._cache`), so an eviction still
       reaches the last window's breakpoint when that window spanned more blocks than the
       API's 20-block lookback (an unchanged screen for many steps);
    3. the newest block: each step reads what the last one wrote (its breakpoint is a
       few blocks back, inside the API's 20-block lookback) and writes only the step.

    A breakpoint on a prefix shorter than the model's minimum is ignored by the API.
    """
    if "system" in body:
        body["system"][-1]["cache_control"] = _ephemeral()
    elif "tools" in body:
        body["tools"][-1]["cache_control"] = _ephemeral()
    messages = body["messages"]
    media = [i for i, m in enumerate(messages) if _holds_media(m, in_results=True)]
    media = media or [i for i, m in enumerate(messages) if _holds_media(m, in_results=False)]
    if media and media[0] > 0:
        window = media[0] - 1
        _mark_last(messages[window])
        ladder = ladder_message([len(m["content"]) for m in messages], window)
        if ladder is not None:
            _mark_last(messages[ladder])
    if messages:
        _mark_last(messages[-1])


def _mark_last(message: Message) -> None:
    """A breakpoint on the message's last block that takes one: a thinking block
    cannot carry ``cache_control`` (it is cached as part of the turn around it)."""
    for block in reversed(message["content"]):
        if not _is_reasoning(block):
            block["cache_control"] = _ephemeral()
            return


def _holds_media(message: Message, *, in_results: bool) -> bool:
    """Whether ``message`` holds an image or document (only inside tool results, or
    anywhere)."""
    for block in message["content"]:
        fields = cast("Mapping[str, Any]", block)  # a union of TypedDicts and kept blocks
        if fields["type"] in ("image", "document") and not in_results:
            return True
        if fields["type"] == "tool_result" and any(
            c["type"] != "text" for c in fields.get("content", ())
        ):
            return True
    return False


def cap(body: Body, max_tokens: int) -> Body:
    """``body`` with its output cap (``max_tokens``, required on this wire) set if absent."""
    return {"max_tokens": max_tokens, **body}


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
    state = keep(WIRE, cast("list[JSONObject]", content), reasoning=_is_reasoning)
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
