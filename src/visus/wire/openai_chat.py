"""OpenAI Chat Completions (``POST /v1/chat/completions``) request bodies.

Only ``user`` messages may carry images on this wire (and on every
openai-compatible server). A tool message therefore keeps its text plus a stub
naming each image, the tool messages of a run stay adjacent to the assistant message
holding their ``tool_calls``, and right after the last tool message of the run ONE
user message carries the images, each labelled with its call id and source.
PDFs (models with ``spec.pdf``) are ``file`` parts (``file_data`` as a data URL
and a ``filename``), allowed in user messages only, so they are hoisted the same way.

Example:
    >>> from visus.wire import lower
    >>> from visus.record.blobs import MemoryBlobStore
    >>> from visus.record.messages import ModelRequest, UserMessage, TextPart
    >>> from visus.models.spec import ModelSpec
    >>> spec = ModelSpec(name="gpt-x", provider="openai", vision=True)
    >>> req = ModelRequest(messages=(UserMessage((TextPart("hi"),)),), system="Be brief.")
    >>> lower(req, wire="openai-chat", model=spec, blobs=MemoryBlobStore())["messages"]
    [{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': 'hi'}]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, NotRequired, TypeAlias, TypedDict, assert_never, cast

from visus import limits
from visus.record.messages import (
    AssistantMessage,
    JSONObject,
    StopReason,
    TextPart,
    ToolCall,
    Usage,
)
from visus.wire._prepare import WireRules
from visus.wire._prepared import (
    FunctionTool,
    Prepared,
    WireDocument,
    WireImage,
    WireMedia,
    WirePart,
    WireTool,
    WireUser,
    arguments_json,
    function_tools,
    media_label,
    media_stub,
)
from visus.wire._reply import ReplyContext, as_int, decode_arguments, new_call_id, usage_for

if TYPE_CHECKING:
    from visus.wire._prepared import Body

__all__ = [
    "ERROR_PREFIX",
    "HOIST_INTRO",
    "HOIST_INTRO_FILES",
    "RULES",
    "Reply",
    "Request",
    "Stream",
    "build",
    "cap",
    "parse",
]

#: png, jpeg, webp and non-animated gif (OpenAI images-vision guide).
RULES = WireRules(
    media_types=frozenset({"image/png", "image/jpeg", "image/webp", "image/gif"}),
    # Provider bounds (WIRES.md), the same values the reference server enforces.
    max_images=limits.OPENAI_MAX_IMAGES,
    max_image_bytes=limits.OPENAI_MAX_IMAGE_BYTES,
    max_request_image_bytes=limits.OPENAI_MAX_REQUEST_IMAGE_BYTES,
    max_document_bytes=limits.OPENAI_MAX_PDF_BYTES,
    max_document_pages=limits.OPENAI_MAX_PDF_PAGES,
)

#: Chat Completions has no error flag on tool messages; the text says it.
ERROR_PREFIX = "[tool error] "
#: First line of the user message that carries a run's tool images.
HOIST_INTRO = "Images returned by the tool calls above:"
#: The same line when the hoisted parts include documents.
HOIST_INTRO_FILES = "Images and documents returned by the tool calls above:"


# --- requests (API reference: "Create chat completion") --------------------------


class TextContent(TypedDict):
    type: Literal["text"]
    text: str


Detail: TypeAlias = Literal["auto", "low", "high", "original"]
#: ``WireImage.detail`` (``visus.models.pick_detail``) as OpenAI spells it; ``auto`` (the
#: default, left out as every client leaves it out) for anything else.
_DETAILS: dict[str, Detail] = {"low": "low", "high": "high", "original": "original"}


class ImageURL(TypedDict):
    url: str
    detail: NotRequired[Detail]


class ImageContent(TypedDict):
    type: Literal["image_url"]
    image_url: ImageURL


class FileData(TypedDict):
    filename: str
    file_data: str


class FileContent(TypedDict):
    type: Literal["file"]
    file: FileData


ContentPart: TypeAlias = TextContent | ImageContent | FileContent


class SystemMessageIn(TypedDict):
    role: Literal["system"]
    content: str


class UserMessageIn(TypedDict):
    """A user message: a lone text part rides as a plain string, as the API allows."""

    role: Literal["user"]
    content: str | list[ContentPart]


class FunctionIn(TypedDict):
    name: str
    arguments: str


class CallIn(TypedDict):
    id: str
    type: Literal["function"]
    function: FunctionIn


class AssistantMessageIn(TypedDict):
    """``content`` is ``None`` only beside ``tool_calls``."""

    role: Literal["assistant"]
    content: str | None
    tool_calls: NotRequired[list[CallIn]]


class ToolMessageIn(TypedDict):
    """A tool result: text only on this wire (its images travel in a user message)."""

    role: Literal["tool"]
    tool_call_id: str
    content: str


MessageIn: TypeAlias = SystemMessageIn | UserMessageIn | AssistantMessageIn | ToolMessageIn


class Request(TypedDict):
    """``POST /v1/chat/completions`` body (the fields visus sends)."""

    model: str
    messages: list[MessageIn]
    tools: NotRequired[list[FunctionTool]]
    prompt_cache_key: NotRequired[str]
    #: A reasoning model's effort (one of the catalog's ``efforts``).
    reasoning_effort: NotRequired[str]


def _content_part(part: WirePart) -> ContentPart:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, WireImage):
        url: ImageURL = {"url": part.data_url}
        if part.detail in _DETAILS:
            url["detail"] = _DETAILS[part.detail]
        return {"type": "image_url", "image_url": url}
    if isinstance(part, WireDocument):
        return {"type": "file", "file": {"filename": part.filename, "file_data": part.data_url}}
    assert_never(part)


def _user(message: WireUser) -> UserMessageIn:
    parts = message.parts
    if not parts:
        return {"role": "user", "content": ""}
    if len(parts) == 1 and isinstance(parts[0], TextPart):
        return {"role": "user", "content": parts[0].text}
    return {"role": "user", "content": [_content_part(p) for p in parts]}


def _tool_text(message: WireTool) -> str:
    pieces: list[str] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            pieces.append(part.text)
        elif isinstance(part, WireImage | WireDocument):
            pieces.append(("\n" if pieces else "") + media_stub(part))
        else:
            assert_never(part)
    text = "".join(pieces)
    return ERROR_PREFIX + text if message.is_error else text


def _assistant(message: AssistantMessage) -> AssistantMessageIn:
    # null content is only valid beside tool_calls
    content = message.text or (None if message.tool_calls else "")
    out: AssistantMessageIn = {"role": "assistant", "content": content}
    if message.tool_calls:
        out["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": arguments_json(c.arguments)},
            }
            for c in message.tool_calls
        ]
    return out


def hoisted_images(run: list[WireTool]) -> list[tuple[str, WireMedia]]:
    """Each image (or document) of a run of tool messages with the call id that produced it."""
    return [(m.call_id, item) for m in run for item in m.media]


def build(prepared: Prepared) -> Request:
    """The Chat Completions body for ``prepared``."""
    messages: list[MessageIn] = []
    if prepared.system:
        messages.append({"role": "system", "content": prepared.system})
    run: list[WireTool] = []

    def close_run() -> None:
        images = hoisted_images(run)
        run.clear()
        if not images:
            return
        files = any(isinstance(item, WireDocument) for _, item in images)
        intro = HOIST_INTRO_FILES if files else HOIST_INTRO
        content: list[ContentPart] = [{"type": "text", "text": intro}]
        for call_id, item in images:
            content.append({"type": "text", "text": media_label(call_id, item)})
            content.append(_content_part(item))
        messages.append({"role": "user", "content": content})

    for message in prepared.messages:
        if isinstance(message, WireTool):
            run.append(message)
            messages.append(
                {"role": "tool", "tool_call_id": message.call_id, "content": _tool_text(message)}
            )
            continue
        close_run()
        if isinstance(message, WireUser):
            messages.append(_user(message))
        elif isinstance(message, AssistantMessage):
            messages.append(_assistant(message))
        else:
            assert_never(message)
    close_run()
    body: Request = {"model": prepared.model.name, "messages": messages}
    if prepared.tools:
        body["tools"] = function_tools(prepared.tools)
    if prepared.openai_cache_key:
        body["prompt_cache_key"] = prepared.openai_cache_key
    if prepared.effort is not None and prepared.model.reasoning:
        body["reasoning_effort"] = prepared.effort
    return body


def cap(body: Body, max_tokens: int) -> Body:
    """``body`` with its output cap set if absent. ``max_tokens`` is the field every
    compatible server knows; OpenAI's own transport renames it to
    ``max_completion_tokens``, the only one its newer models take."""
    if "max_tokens" in body or "max_completion_tokens" in body:
        return body
    return {**body, "max_tokens": max_tokens}


# --- replies (API reference: "The chat completion object", "chunk object") ------


class Function(TypedDict, total=False):
    name: str | None
    arguments: str | None


class CallOut(TypedDict, total=False):
    index: int
    id: str | None
    type: str | None
    function: Function | None


class MessageOut(TypedDict, total=False):
    content: str | None
    refusal: str | None
    tool_calls: list[CallOut] | None


class Choice(TypedDict, total=False):
    message: MessageOut
    delta: MessageOut
    finish_reason: str | None


class TokenDetails(TypedDict, total=False):
    cached_tokens: int | None


class ReplyUsage(TypedDict, total=False):
    prompt_tokens: int
    completion_tokens: int
    #: ``cached_tokens``: the part of ``prompt_tokens`` read from the prompt cache.
    prompt_tokens_details: TokenDetails | None


class Reply(TypedDict, total=False):
    """A chat completion (or one streamed chunk of one)."""

    choices: list[Choice]
    usage: ReplyUsage | None


_STOP: dict[str, StopReason] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "content_filter",
}


def _stop(reason: object) -> StopReason:
    return _STOP.get(reason, "other") if isinstance(reason, str) else "other"


def _usage(ctx: ReplyContext, u: ReplyUsage | None) -> Usage:
    u = u or {}
    cached = as_int((u.get("prompt_tokens_details") or {}).get("cached_tokens"))
    prompt, output = as_int(u.get("prompt_tokens")), as_int(u.get("completion_tokens"))
    return usage_for(ctx.model, prompt, output, cache_read=cached)


def parse(reply: JSONObject, ctx: ReplyContext) -> AssistantMessage:
    """A chat completion (plain dict) as an assistant message.

    Example:
        >>> from visus.models.spec import ModelSpec
        >>> ctx = ReplyContext(ModelSpec(name="gpt-x", provider="openai"))
        >>> m = parse({"choices": [{"message": {"content": "Hi"},
        ...            "finish_reason": "length"}]}, ctx)
        >>> m.text, m.stop_reason
        ('Hi', 'max_tokens')
    """
    r = cast("Reply", reply)
    choices = r.get("choices") or []
    if not choices:
        raise ctx.error("reply without choices")
    message = choices[0].get("message") or {}
    calls = [
        ToolCall(
            id=tc.get("id") or new_call_id(),
            name=(tc.get("function") or {}).get("name") or "",
            arguments=decode_arguments((tc.get("function") or {}).get("arguments")),
        )
        for tc in message.get("tool_calls") or ()
        if tc.get("type", "function") == "function"
    ]
    # A refusal arrives in its own field with no content; the model's words still count.
    text = message.get("content") or message.get("refusal") or ""
    stop = _stop(choices[0].get("finish_reason"))
    return ctx.message(text, calls, _usage(ctx, r.get("usage")), stop)


class Stream:
    """Accumulates streamed chat completion chunks (dicts).

    Example:
        >>> from visus.models.spec import ModelSpec
        >>> s = Stream(ReplyContext(ModelSpec(name="gpt-x", provider="openai")))
        >>> s.feed({"choices": [{"index": 0, "delta": {"content": "Hi"}}]})
        'Hi'
        >>> _ = s.feed({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        >>> s.result().stop_reason
        'end_turn'
    """

    def __init__(self, ctx: ReplyContext) -> None:
        self.ctx = ctx
        self.text: list[str] = []
        self.slots: dict[int, tuple[list[str], list[str], list[str]]] = {}
        self.usage: ReplyUsage | None = None
        self.stop: object = None

    def feed(self, event: JSONObject) -> str:
        chunk = cast("Reply", event)
        if chunk.get("usage"):
            self.usage = chunk.get("usage")
        new: list[str] = []
        for choice in chunk.get("choices") or ():
            self.stop = choice.get("finish_reason") or self.stop
            delta = choice.get("delta") or {}
            if delta.get("content"):
                new.append(delta.get("content") or "")
            for tc in delta.get("tool_calls") or ():
                ids, names, args = self.slots.setdefault(tc.get("index", 0), ([], [], []))
                if tc.get("id"):
                    ids[:] = [tc.get("id") or ""]
                fn = tc.get("function") or {}
                if fn.get("name") and not names:
                    names.append(fn.get("name") or "")
                if fn.get("arguments"):
                    args.append(fn.get("arguments") or "")
        self.text.extend(new)
        return "".join(new)

    def result(self) -> AssistantMessage:
        calls = [
            ToolCall(
                id="".join(ids) or new_call_id(),
                name="".join(names),
                arguments=decode_arguments("".join(args)),
            )
            for _, (ids, names, args) in sorted(self.slots.items())
        ]
        usage = _usage(self.ctx, self.usage)
        return self.ctx.message("".join(self.text), calls, usage, _stop(self.stop))
