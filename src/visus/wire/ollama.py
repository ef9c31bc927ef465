"""Ollama ``POST /api/chat`` request bodies (non-streaming).

Each message may carry ``images`` (raw base64, no data URL); we put them only on
user messages, which every vision model reads. A user's own images are marked in
its text where they stood (``[image 1: ...]``). Tool images are hoisted: the tool
message keeps its text plus a stub, and after the run of tool messages one user
message carries the images, its text labelling each with its call id and source.
Ollama takes no documents: a PDF is a text note (``RULES.documents`` is false, so
``prepare`` already turned it into one).

Example:
    >>> from visus.wire import lower
    >>> from visus.record.blobs import MemoryBlobStore
    >>> from visus.record.messages import ModelRequest, UserMessage, TextPart
    >>> from visus.models.spec import ModelSpec
    >>> spec = ModelSpec(name="llava", provider="ollama", vision=True)
    >>> req = ModelRequest(messages=(UserMessage((TextPart("hi"),)),))
    >>> lower(req, wire="ollama", model=spec, blobs=MemoryBlobStore())
    {'model': 'llava', 'messages': [{'role': 'user', 'content': 'hi'}], 'stream': False}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal, NotRequired, TypedDict, assert_never, cast

from visus.record.messages import AssistantMessage, JSONObject, StopReason, TextPart, ToolCall
from visus.wire._prepare import WireRules
from visus.wire._prepared import (
    FunctionTool,
    JSONValue,
    Prepared,
    WireDocument,
    WireImage,
    WireTool,
    WireUser,
    function_tools,
    image_label,
    image_stub,
    plain,
    source_text,
)
from visus.wire._reply import ReplyContext, as_int, decode_arguments, new_call_id, usage_for

if TYPE_CHECKING:
    from visus.wire._prepared import Body

__all__ = [
    "ERROR_PREFIX",
    "HOIST_INTRO",
    "RULES",
    "Reply",
    "Request",
    "Stream",
    "build",
    "cap",
    "parse",
]

#: What Ollama's image decoding reliably takes. No crops (only what changed): its images
#: ride in a list beside the text, where no note can stand next to its crops.
RULES = WireRules(media_types=frozenset({"image/png", "image/jpeg"}), documents=False, crops=False)


def _document_note(part: WireDocument) -> str:
    # Unreachable through ``lower`` (RULES.documents is false); kept so no part is dropped.
    return f"[document not sent: Ollama takes no documents ({part.filename})]"


ERROR_PREFIX = "[tool error] "
HOIST_INTRO = "Images returned by the tool calls above:"


# --- requests (API docs: "Generate a chat completion", request parameters) ---------


class FunctionIn(TypedDict):
    name: str
    arguments: dict[str, JSONValue]


class CallIn(TypedDict):
    function: FunctionIn


class Message(TypedDict):
    """One chat message: which keys it has depends on ``role``."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str
    #: Raw base64 (no data URL); only on user messages here.
    images: NotRequired[list[str]]
    tool_calls: NotRequired[list[CallIn]]
    #: The tool a ``tool`` message answers (Ollama has no call ids).
    tool_name: NotRequired[str]


class Options(TypedDict, total=False):
    num_predict: int


class Request(TypedDict):
    """An ``/api/chat`` body."""

    model: str
    messages: list[Message]
    tools: NotRequired[list[FunctionTool]]
    stream: NotRequired[bool]
    options: NotRequired[Options]


def _user(message: WireUser) -> Message:
    pieces: list[str] = []
    images: list[str] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            pieces.append(part.text)
        elif isinstance(part, WireImage):
            images.append(part.data)
            pieces.append(
                f"[image {len(images)}: {source_text(part.origin)}, {part.width}x{part.height}]"
            )
        elif isinstance(part, WireDocument):
            pieces.append(_document_note(part))
        else:
            assert_never(part)
    out: Message = {"role": "user", "content": "\n".join(pieces)}
    if images:
        out["images"] = images
    return out


def _tool(message: WireTool) -> Message:
    pieces: list[str] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            pieces.append(part.text)
        elif isinstance(part, WireImage):
            pieces.append(("\n" if pieces else "") + image_stub(part))
        elif isinstance(part, WireDocument):
            pieces.append(("\n" if pieces else "") + _document_note(part))
        else:
            assert_never(part)
    text = "".join(pieces)
    return {
        "role": "tool",
        "content": ERROR_PREFIX + text if message.is_error else text,
        "tool_name": message.tool_name,
    }


def _assistant(message: AssistantMessage) -> Message:
    out: Message = {"role": "assistant", "content": message.text}
    if message.tool_calls:
        out["tool_calls"] = [
            {"function": {"name": c.name, "arguments": plain(c.arguments)}}
            for c in message.tool_calls
        ]
    return out


def build(prepared: Prepared) -> Request:
    """The ``/api/chat`` body for ``prepared``."""
    messages: list[Message] = []
    if prepared.system:
        messages.append({"role": "system", "content": prepared.system})
    run: list[WireTool] = []

    def close_run() -> None:
        labels = [HOIST_INTRO]
        images: list[str] = []
        for m in run:
            for image in m.images:
                images.append(image.data)
                labels.append(f"image {len(images)}: {image_label(m.call_id, image)}")
        run.clear()
        if images:
            messages.append({"role": "user", "content": "\n".join(labels), "images": images})

    for message in prepared.messages:
        if isinstance(message, WireTool):
            run.append(message)
            messages.append(_tool(message))
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
    body["stream"] = False
    return body


def cap(body: Body, max_tokens: int) -> Body:
    """``body`` with ``options.num_predict`` (the output cap) set if absent."""
    given = body.get("options")
    options: dict[str, object] = dict(given) if isinstance(given, Mapping) else {}
    options.setdefault("num_predict", max_tokens)
    return {**body, "options": options}


# --- replies (API docs: "Generate a chat completion", streamed as NDJSON) ----------


class Function(TypedDict, total=False):
    name: str
    arguments: JSONObject | str


class CallOut(TypedDict, total=False):
    function: Function


class MessageOut(TypedDict, total=False):
    content: str
    thinking: str
    tool_calls: list[CallOut] | None


class Reply(TypedDict, total=False):
    """An ``/api/chat`` reply, or one streamed line of one."""

    message: MessageOut
    done: bool
    done_reason: str | None
    prompt_eval_count: int | None
    eval_count: int | None


_STOP: dict[str, StopReason] = {"stop": "end_turn", "length": "max_tokens"}


class Stream:
    """Accumulates ``/api/chat`` lines; each is a reply, the last one ``done``.

    Example:
        >>> from visus.models.spec import ModelSpec
        >>> s = Stream(ReplyContext(ModelSpec(name="llava", provider="ollama")))
        >>> s.feed({"message": {"content": "Hi"}, "done": False})
        'Hi'
        >>> _ = s.feed({"message": {"content": ""}, "done": True, "done_reason": "length"})
        >>> s.result().stop_reason
        'max_tokens'
    """

    def __init__(self, ctx: ReplyContext) -> None:
        self.ctx = ctx
        self.text: list[str] = []
        self.calls: list[ToolCall] = []
        self.prompt = self.output = 0
        self.stop: object = None

    def feed(self, event: JSONObject) -> str:
        line = cast("Reply", event)
        message = line.get("message") or {}
        for tc in message.get("tool_calls") or ():
            fn = tc.get("function") or {}
            # Ollama names no call; one is made up so the result can answer it.
            self.calls.append(
                ToolCall(new_call_id(), fn.get("name", ""), decode_arguments(fn.get("arguments")))
            )
        self.prompt = as_int(line.get("prompt_eval_count")) or self.prompt
        self.output = as_int(line.get("eval_count")) or self.output
        if line.get("done"):
            self.stop = line.get("done_reason") or "stop"
        text = message.get("content") or ""
        self.text.append(text)
        return text

    def result(self) -> AssistantMessage:
        stop = _STOP.get(self.stop, "other") if isinstance(self.stop, str) else "other"
        usage = usage_for(self.ctx.model, self.prompt, self.output)
        return self.ctx.message("".join(self.text), self.calls, usage, stop)


def parse(reply: JSONObject, ctx: ReplyContext) -> AssistantMessage:
    """An ``/api/chat`` reply (``stream: false``) as an assistant message.

    Example:
        >>> from visus.models.spec import ModelSpec
        >>> ctx = ReplyContext(ModelSpec(name="llava", provider="ollama"))
        >>> parse({"message": {"content": "A dot."}, "done": True,
        ...        "done_reason": "stop"}, ctx).stop_reason
        'end_turn'
    """
    stream = Stream(ctx)
    stream.feed(reply)
    return stream.result()
