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
    TextPart,
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
from visus.wire._thinking import (
    ThinkingConfig,
    is_claude_thinking,
    replay,
    replay_reasoning,
    thinking_config,
)
from visus.wire.anthropic_replies import WIRE, Reply, Stream, parse

if TYPE_CHECKING:
    from visus.wire._prepared import Body

__all__ = ["RULES", "WIRE", "Reply", "Request", "Stream", "build", "cap", "parse"]


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
    blocks: list[ContentBlock] = list(replay_reasoning(state, WIRE, reasoning=is_claude_thinking))
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
        if not is_claude_thinking(block):
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
