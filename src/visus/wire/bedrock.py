"""Amazon Bedrock Converse (``POST /model/{modelId}/converse``) request bodies.

Image bytes are base64 text in JSON, as the REST API takes them (boto3 takes raw
bytes in the same place). Tool results are user-role ``toolResult`` blocks; their
images ride inside ``toolResult.content`` where the model allows it
(``spec.images_in_tool_results``), else they follow the run's tool results as
labelled image blocks in the same user turn. PDFs (models with ``spec.pdf``) are
``document`` blocks (format ``pdf``, a ``name`` sanitised to Bedrock's rules and
unique within the request) and go wherever images go. Roles alternate, so
consecutive user-role content merges into one turn.

Example:
    >>> from visus.wire import lower
    >>> from visus.record.blobs import MemoryBlobStore
    >>> from visus.record.messages import ModelRequest, UserMessage, TextPart
    >>> from visus.models.spec import ModelSpec
    >>> spec = ModelSpec(name="anthropic.claude-x", provider="bedrock", vision=True)
    >>> req = ModelRequest(messages=(UserMessage((TextPart("hi"),)),), max_tokens=64)
    >>> body = lower(req, wire="bedrock", model=spec, blobs=MemoryBlobStore())
    >>> body["messages"], body["inferenceConfig"]
    ([{'role': 'user', 'content': [{'text': 'hi'}]}], {'maxTokens': 64})
"""

from __future__ import annotations

import re
from collections.abc import Mapping
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
    WireMedia,
    WirePart,
    WireTool,
    WireUser,
    media_label,
    media_stub,
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

__all__ = [
    "RULES",
    "WIRE",
    "Reply",
    "Request",
    "Stream",
    "build",
    "cap",
    "document_name",
    "parse",
]

WIRE = "bedrock"

_Format: TypeAlias = Literal["png", "jpeg", "gif", "webp"]
_FORMATS: dict[str, _Format] = {
    "image/png": "png",
    "image/jpeg": "jpeg",
    "image/gif": "gif",
    "image/webp": "webp",
}
RULES = WireRules(
    media_types=frozenset(_FORMATS),
    # Converse: 20 images, 3.75 MB and 8000 px each (WIRES.md; the reference enforces it).
    max_images=limits.BEDROCK_MAX_IMAGES,
    max_edge=limits.BEDROCK_MAX_EDGE,
    max_image_bytes=limits.BEDROCK_MAX_IMAGE_BYTES,
    max_documents=limits.BEDROCK_MAX_DOCUMENTS,
    max_document_bytes=limits.BEDROCK_MAX_DOCUMENT_BYTES,
)

_NAME_DROP = re.compile(r"[^A-Za-z0-9\s\-()\[\]]+")
_SPACES = re.compile(r"\s+")


def document_name(filename: str) -> str:
    """A Converse document name: letters, digits, single spaces, hyphens, () and [].

    Example:
        >>> document_name("Q3 report_final.v2.pdf")
        'Q3 reportfinalv2'
    """
    stem = filename[:-4] if filename.lower().endswith(".pdf") else filename
    name = _SPACES.sub(" ", _NAME_DROP.sub("", stem)).strip()
    return name[: limits.BEDROCK_MAX_DOCUMENT_NAME_CHARS].strip() or "document"


class _Names:
    """Gives each document of one request a distinct sanitised name."""

    def __init__(self) -> None:
        self.used: dict[str, int] = {}

    def __call__(self, filename: str) -> str:
        base = document_name(filename)
        n = self.used.get(base, 0) + 1
        self.used[base] = n
        return base if n == 1 else f"{base} ({n})"


# --- requests (API reference: Converse; Message, ContentBlock, ToolConfiguration) --


class TextBlock(TypedDict):
    text: str


class Source(TypedDict):
    #: Base64 text, as REST takes it (the transport hands boto3 the decoded bytes).
    bytes: str


class Image(TypedDict):
    format: _Format
    source: Source


class ImageBlock(TypedDict):
    image: Image


class Document(TypedDict):
    format: Literal["pdf"]
    #: Sanitised by :func:`document_name`, unique within the request.
    name: str
    source: Source


class DocumentBlock(TypedDict):
    document: Document


#: What a ``toolResult`` holds (``ToolResultContentBlock``).
ResultBlock: TypeAlias = TextBlock | ImageBlock | DocumentBlock


class ToolResult(TypedDict):
    toolUseId: str
    content: list[ResultBlock]
    status: NotRequired[Literal["success", "error"]]


class ToolResultBlock(TypedDict):
    toolResult: ToolResult


class ToolUseIn(TypedDict):
    toolUseId: str
    name: str
    input: dict[str, JSONValue]


class ToolUseBlock(TypedDict):
    toolUse: ToolUseIn


class CachePoint(TypedDict):
    type: Literal["default"]


class CachePointBlock(TypedDict):
    """A prompt-cache checkpoint: everything before it is cached (models that take one)."""

    cachePoint: CachePoint


#: A block of an earlier reply sent back as it came: ``reasoningContent`` (Claude's
#: thinking, ``reasoningText`` with its ``signature``, or ``redactedContent``) and the
#: reply's own text and ``toolUse`` around it (:mod:`visus.wire._thinking`).
ReplyBlock: TypeAlias = JSONObject
Block: TypeAlias = (
    TextBlock
    | ImageBlock
    | DocumentBlock
    | ToolResultBlock
    | ToolUseBlock
    | CachePointBlock
    | ReplyBlock
)


class Message(TypedDict):
    role: Literal["user", "assistant"]
    content: list[Block]


class InputSchema(TypedDict):
    json: dict[str, JSONValue]


class ToolSpecification(TypedDict):
    name: str
    #: Left out when empty: botocore refuses an empty description.
    description: NotRequired[str]
    inputSchema: InputSchema


class Tool(TypedDict):
    toolSpec: ToolSpecification


class ToolConfiguration(TypedDict):
    tools: list[Tool | CachePointBlock]


class InferenceConfiguration(TypedDict, total=False):
    maxTokens: int


class ClaudeFields(TypedDict):
    """``additionalModelRequestFields`` for a Claude model: the Messages API's
    ``thinking`` and ``output_config``, and its betas as ``anthropic_beta`` (AWS "Thinking
    block binding": "pass the beta value and thinking.block_binding through
    additionalModelRequestFields")."""

    thinking: NotRequired[ThinkingConfig]
    output_config: NotRequired[dict[str, str]]
    anthropic_beta: NotRequired[list[str]]


class Request(TypedDict):
    """A Converse body (the model id goes in the URL)."""

    messages: list[Message]
    system: NotRequired[list[TextBlock | CachePointBlock]]
    toolConfig: NotRequired[ToolConfiguration]
    inferenceConfig: NotRequired[InferenceConfiguration]
    additionalModelRequestFields: NotRequired[ClaudeFields]


def _media(item: WireMedia, names: _Names) -> ImageBlock | DocumentBlock:
    if isinstance(item, WireImage):
        return {"image": {"format": _FORMATS[item.media_type], "source": {"bytes": item.data}}}
    return {
        "document": {"format": "pdf", "name": names(item.filename), "source": {"bytes": item.data}}
    }


def _block(part: WirePart, names: _Names) -> ResultBlock | None:
    if isinstance(part, TextPart):
        return {"text": part.text} if part.text else None
    if isinstance(part, WireImage | WireDocument):
        return _media(part, names)
    assert_never(part)


def _empty() -> TextBlock:
    # Converse refuses an empty content list.
    return {"text": "(empty)"}


def _tool_result(message: WireTool, native: bool, names: _Names) -> ToolResultBlock:
    content: list[ResultBlock] = []
    for part in message.parts:
        if isinstance(part, WireImage | WireDocument) and not native:
            content.append({"text": media_stub(part)})
            continue
        block = _block(part, names)
        if block is not None:
            content.append(block)
    result: ToolResult = {"toolUseId": message.call_id, "content": content or [_empty()]}
    if message.is_error:
        result["status"] = "error"
    return {"toolResult": result}


def _is_reasoning(block: Mapping[str, object]) -> bool:
    return "reasoningContent" in block


def _tool_use_id(block: Mapping[str, object]) -> str | None:
    use = block.get("toolUse")
    value = use.get("toolUseId") if isinstance(use, Mapping) else None
    return value if isinstance(value, str) else None


def _text_of(block: Mapping[str, object]) -> str | None:
    value = block.get("text")
    return value if isinstance(value, str) else None


def _assistant(message: AssistantMessage) -> list[Block]:
    """The assistant turn: the reply's own blocks as returned when it held reasoning,
    else built from the record (the Anthropic wire's rule, :func:`_thinking.replay`)."""
    state, ids = message.provider_state, [c.id for c in message.tool_calls]
    kept = replay(state, WIRE, message.text, ids, call_id=_tool_use_id, text_of=_text_of)
    if kept is not None:
        return list(kept)
    blocks: list[Block] = list(replay_reasoning(state, WIRE, reasoning=_is_reasoning))
    blocks.extend(TextBlock(text=p.text) for p in message.parts if p.text)
    blocks.extend(
        {"toolUse": {"toolUseId": c.id, "name": c.name, "input": plain(c.arguments)}}
        for c in message.tool_calls
    )
    return blocks


def _tool_spec(name: str, description: str, schema: dict[str, JSONValue]) -> ToolSpecification:
    """One Converse toolSpec. botocore requires a description of at least one
    character when the key is present, so an empty one is left out, not sent."""
    if description:
        return {"name": name, "description": description, "inputSchema": {"json": schema}}
    return {"name": name, "inputSchema": {"json": schema}}


def build(prepared: Prepared) -> Request:
    """The Converse body for ``prepared`` (the model id goes in the URL)."""
    native = prepared.model.images_in_tool_results
    names = _Names()
    turns: list[tuple[Literal["user", "assistant"], list[Block]]] = []
    run: list[WireTool] = []

    def close_run() -> None:
        if not run:
            return
        blocks: list[Block] = [_tool_result(m, native, names) for m in run]
        if not native:
            for m in run:
                for item in m.media:
                    blocks.append({"text": media_label(m.call_id, item)})
                    blocks.append(_media(item, names))
        run.clear()
        turns.append(("user", blocks))

    for message in prepared.messages:
        if isinstance(message, WireTool):
            run.append(message)
            continue
        close_run()
        if isinstance(message, WireUser):
            user = [_block(p, names) for p in message.parts]
            turns.append(("user", [b for b in user if b is not None]))
        elif isinstance(message, AssistantMessage):
            turns.append(("assistant", _assistant(message)))
        else:
            assert_never(message)
    close_run()
    body: Request = {
        "messages": [
            {"role": role, "content": blocks or [_empty()]} for role, blocks in merge_roles(turns)
        ]
    }
    if prepared.system:
        body["system"] = [{"text": prepared.system}]
    if prepared.tools:
        body["toolConfig"] = {
            "tools": [
                {"toolSpec": _tool_spec(t.name, t.description, plain(t.parameters))}
                for t in prepared.tools
            ]
        }
    body["inferenceConfig"] = {"maxTokens": prepared.max_tokens}
    if prepared.model.cache_points:
        _cache_points(body)
    fields = _claude_fields(prepared)
    if fields:
        body["additionalModelRequestFields"] = fields
    return body


def _claude_fields(prepared: Prepared) -> ClaudeFields:
    """What a thinking Claude model is asked on Bedrock: the Anthropic wire's thinking
    settings (:func:`visus.wire._thinking.thinking_config`), effort, and their betas."""
    thinking, betas = thinking_config(prepared.model)
    fields: ClaudeFields = {}
    if thinking is not None:
        fields["thinking"] = thinking
    if prepared.effort is not None and prepared.model.thinking != "none":
        fields["output_config"] = {"effort": prepared.effort}
    if betas:
        fields["anthropic_beta"] = betas
    return fields


def _cache_point() -> CachePointBlock:
    return {"cachePoint": {"type": "default"}}


def _cache_points(body: Request) -> None:
    """Cache checkpoints where the Anthropic wire puts its breakpoints (see
    :func:`visus.wire.anthropic._mark_breakpoints`): after the system prompt (else the
    tools), after the history before the first live tool image and 16 blocks before that
    (the ladder, :mod:`visus.wire._cache`), after the newest message: the four a Claude
    request may carry."""
    if "system" in body:
        body["system"].append(_cache_point())
    elif "toolConfig" in body:
        body["toolConfig"]["tools"].append(_cache_point())
    messages = body["messages"]
    media = [i for i, m in enumerate(messages) if any(_result_media(b) for b in m["content"])]
    if media and media[0] > 0:
        window = media[0] - 1
        ladder = ladder_message([len(m["content"]) for m in messages], window)
        messages[window]["content"].append(_cache_point())
        if ladder is not None:
            messages[ladder]["content"].append(_cache_point())
    if messages:
        messages[-1]["content"].append(_cache_point())


def _result_media(block: Block) -> bool:
    """Whether ``block`` carries an image or document (in a tool result, or hoisted)."""
    fields = cast("Mapping[str, Any]", block)  # a union of one-key TypedDicts
    result = fields.get("toolResult")
    if result is not None:
        return any("text" not in c for c in result["content"])
    return "image" in fields or "document" in fields


def cap(body: Body, max_tokens: int) -> Body:
    """``body`` with ``inferenceConfig.maxTokens`` set if absent."""
    given = body.get("inferenceConfig")
    inference: dict[str, object] = dict(given) if isinstance(given, Mapping) else {}
    inference.setdefault("maxTokens", max_tokens)
    return {**body, "inferenceConfig": inference}


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
    state = keep(WIRE, cast("list[JSONObject]", content), reasoning=_is_reasoning)
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
