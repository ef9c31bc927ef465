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
    WireMedia,
    WirePart,
    WireTool,
    WireUser,
    media_label,
    media_stub,
    merge_roles,
    plain,
)
from visus.wire._thinking import (
    ThinkingConfig,
    is_reasoning_content,
    replay,
    replay_reasoning,
    thinking_config,
)
from visus.wire.bedrock_replies import WIRE, Reply, Stream, parse

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
    blocks: list[Block] = list(replay_reasoning(state, WIRE, reasoning=is_reasoning_content))
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
