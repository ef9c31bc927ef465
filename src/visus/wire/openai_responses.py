"""OpenAI Responses API (``POST /v1/responses``) request bodies.

Tool images and PDFs ride natively: ``function_call_output.output`` is a list of
``input_text`` / ``input_image`` / ``input_file`` items when the result holds an
image or a document, a plain string otherwise. PDFs (models with ``spec.pdf``) are
``input_file`` items with ``file_data`` as a data URL and a ``filename``. Assistant
text is an input message with role ``assistant``; each tool call is a
``function_call`` item.

Example:
    >>> from visus.wire import lower
    >>> from visus.record.blobs import MemoryBlobStore
    >>> from visus.record.messages import ModelRequest, UserMessage, TextPart
    >>> from visus.models.spec import ModelSpec
    >>> spec = ModelSpec(name="gpt-x", provider="openai", vision=True)
    >>> req = ModelRequest(messages=(UserMessage((TextPart("hi"),)),), system="Be brief.")
    >>> body = lower(req, wire="openai-responses", model=spec, blobs=MemoryBlobStore())
    >>> body["instructions"], body["input"]
    ('Be brief.', [{'role': 'user', 'content': 'hi'}])
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Literal, NotRequired, TypeAlias, TypedDict, assert_never, cast

from visus import limits
from visus.record.messages import (
    AssistantMessage,
    JSONObject,
    ProviderState,
    StopReason,
    TextPart,
    ToolCall,
)
from visus.wire._prepare import WireRules
from visus.wire._prepared import (
    JSONValue,
    Prepared,
    WireDocument,
    WireImage,
    WirePart,
    WireTool,
    WireUser,
    arguments_json,
    plain,
)
from visus.wire._reply import ReplyContext, as_int, decode_arguments, new_call_id, usage_for

if TYPE_CHECKING:
    from visus.wire._prepared import Body

__all__ = ["ERROR_PREFIX", "RULES", "WIRE", "Reply", "Request", "Stream", "build", "cap", "parse"]

WIRE = "openai-responses"

RULES = WireRules(
    media_types=frozenset({"image/png", "image/jpeg", "image/webp", "image/gif"}),
    max_images=limits.OPENAI_MAX_IMAGES,
    max_image_bytes=limits.OPENAI_MAX_IMAGE_BYTES,
    max_request_image_bytes=limits.OPENAI_MAX_REQUEST_IMAGE_BYTES,
    max_document_bytes=limits.OPENAI_MAX_PDF_BYTES,
    max_document_pages=limits.OPENAI_MAX_PDF_PAGES,
)

#: ``function_call_output`` has no error flag; the text says it.
ERROR_PREFIX = "[tool error] "


# --- requests (API reference: "Create a model response") ------------------------


class InputText(TypedDict):
    type: Literal["input_text"]
    text: str


Detail: TypeAlias = Literal["auto", "low", "high", "original"]


class InputImage(TypedDict):
    type: Literal["input_image"]
    image_url: str
    detail: Detail


class InputFile(TypedDict):
    type: Literal["input_file"]
    filename: str
    file_data: str


InputContent: TypeAlias = InputText | InputImage | InputFile


class InputMessage(TypedDict):
    """A user or assistant message: a lone text part rides as a plain string."""

    role: Literal["user", "assistant"]
    content: str | list[InputContent]


class FunctionCall(TypedDict):
    """A call the assistant made; ``id`` is the provider's own item id, sent back when
    the reply's items are replayed."""

    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str
    id: NotRequired[str]


class FunctionCallOutput(TypedDict):
    """A tool's result: a string, or input items when it holds an image or a document."""

    type: Literal["function_call_output"]
    call_id: str
    output: str | list[InputContent]


#: A reasoning item from an earlier reply, sent back verbatim (visus never reads inside).
Reasoning: TypeAlias = JSONObject
InputItem: TypeAlias = InputMessage | FunctionCall | FunctionCallOutput | Reasoning


class Tool(TypedDict):
    type: Literal["function"]
    name: str
    description: NotRequired[str]
    parameters: dict[str, JSONValue]
    strict: bool


class ReasoningConfig(TypedDict):
    """``reasoning``: how hard a reasoning model thinks (one of the catalog's ``efforts``)."""

    effort: str


class Request(TypedDict):
    """``POST /v1/responses`` body (the fields visus sends)."""

    model: str
    input: list[InputItem]
    include: NotRequired[list[Literal["reasoning.encrypted_content"]]]
    store: NotRequired[bool]
    reasoning: NotRequired[ReasoningConfig]
    instructions: NotRequired[str]
    tools: NotRequired[list[Tool]]
    prompt_cache_key: NotRequired[str]


#: ``WireImage.detail`` (``visus.models.pick_detail``) as OpenAI spells it; anything
#: else (another provider's level) is ``auto``.
_DETAILS: dict[str, Detail] = {"low": "low", "high": "high", "original": "original"}


def _item(part: WirePart) -> InputContent:
    if isinstance(part, TextPart):
        return {"type": "input_text", "text": part.text}
    if isinstance(part, WireImage):
        detail = _DETAILS.get(part.detail, "auto")
        return {"type": "input_image", "image_url": part.data_url, "detail": detail}
    if isinstance(part, WireDocument):
        return {"type": "input_file", "filename": part.filename, "file_data": part.data_url}
    assert_never(part)


def _user(message: WireUser) -> InputMessage:
    parts = message.parts
    if not parts:
        return {"role": "user", "content": ""}
    if len(parts) == 1 and isinstance(parts[0], TextPart):
        return {"role": "user", "content": parts[0].text}
    return {"role": "user", "content": [_item(p) for p in parts]}


def _output(message: WireTool) -> FunctionCallOutput:
    prefix = ERROR_PREFIX if message.is_error else ""
    output: str | list[InputContent]
    if message.media:
        output = [_item(p) for p in message.parts]
        if prefix:
            output.insert(0, {"type": "input_text", "text": prefix.strip()})
    else:
        output = prefix + message.text
    return {"type": "function_call_output", "call_id": message.call_id, "output": output}


def _call(call: ToolCall) -> FunctionCall:
    return {
        "type": "function_call",
        "call_id": call.id,
        "name": call.name,
        "arguments": arguments_json(call.arguments),
    }


def _assistant(message: AssistantMessage) -> list[InputItem]:
    calls = {c.id: _call(c) for c in message.tool_calls}
    text: list[InputItem] = [{"role": "assistant", "content": message.text}] if message.text else []
    state = message.provider_state
    if state is None or state.wire != WIRE or state.left_out or state.invalidated:
        # Reasoning an eviction invalidates goes neither now nor later, and its calls
        # without their item ids (the API refuses an item id without its reasoning item:
        # "function_call was provided without its required 'reasoning' item"), from the
        # evicting request on: what the replies after it are made over stays the same.
        return [*text, *calls.values()]
    # Replay the reply's own items in their order: reasoning items verbatim (their
    # encrypted content carries the model's reasoning to the next step), the text where
    # the message was, and each function_call with the id the provider gave it.
    items: list[InputItem] = []
    for kept in cast("list[JSONObject]", json.loads(state.items)):  # a reply's own items
        kind, call_id, item_id = kept.get("type"), kept.get("call_id"), kept.get("id")
        if kind == "reasoning":
            items.append(kept)
        elif kind == "message":
            items.extend(text)
            text = []
        elif kind == "function_call" and isinstance(call_id, str) and call_id in calls:
            call = calls.pop(call_id)
            if isinstance(item_id, str) and item_id:
                call["id"] = item_id
            items.append(call)
    return [*items, *text, *calls.values()]


def build(prepared: Prepared) -> Request:
    """The Responses API body for ``prepared``."""
    items: list[InputItem] = []
    for message in prepared.messages:
        if isinstance(message, WireUser):
            items.append(_user(message))
        elif isinstance(message, WireTool):
            items.append(_output(message))
        elif isinstance(message, AssistantMessage):
            items.extend(_assistant(message))
        else:
            assert_never(message)
    body: Request = {"model": prepared.model.name, "input": items}
    if prepared.model.reasoning:
        # Stateless reasoning: the items come back encrypted and are sent back in input.
        body["include"] = ["reasoning.encrypted_content"]
        body["store"] = False
        if prepared.effort is not None:
            body["reasoning"] = {"effort": prepared.effort}
    if prepared.system:
        body["instructions"] = prepared.system
    if prepared.tools:
        body["tools"] = [
            {
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": plain(t.parameters),
                "strict": False,
            }
            for t in prepared.tools
        ]
    if prepared.openai_cache_key:
        body["prompt_cache_key"] = prepared.openai_cache_key
    return body


def cap(body: Body, max_tokens: int) -> Body:
    """``body`` with its output cap (``max_output_tokens``) set if absent."""
    return {"max_output_tokens": max_tokens, **body}


# --- replies (API reference: "The response object", "Streaming events") ----------


class Content(TypedDict, total=False):
    type: str
    text: str
    refusal: str


class Item(TypedDict, total=False):
    """An output item: ``message``, ``function_call`` or ``reasoning`` (kept opaque)."""

    type: str
    id: str
    call_id: str
    name: str
    arguments: str
    content: list[Content]


class InputDetails(TypedDict, total=False):
    cached_tokens: int | None


class ReplyUsage(TypedDict, total=False):
    input_tokens: int
    output_tokens: int
    #: ``cached_tokens``: the part of ``input_tokens`` read from the prompt cache.
    input_tokens_details: InputDetails | None


class Incomplete(TypedDict, total=False):
    reason: str | None


class Reply(TypedDict, total=False):
    """A response object (the fields visus reads)."""

    status: str | None
    incomplete_details: Incomplete | None
    output: list[Item]
    usage: ReplyUsage | None
    error: JSONObject | None


def _stop(r: Reply, calls: list[ToolCall]) -> StopReason:
    status = r.get("status")
    if status in (None, "completed"):
        return "tool_use" if calls else "end_turn"
    if status == "incomplete":
        reason = (r.get("incomplete_details") or {}).get("reason")
        if reason == "max_output_tokens":
            return "max_tokens"
        if reason == "content_filter":
            return "content_filter"
    return "other"


def parse(reply: JSONObject, ctx: ReplyContext) -> AssistantMessage:
    """A response object (plain dict) as an assistant message. Reasoning items and the
    ids of function calls are kept as opaque provider state for the next step.

    Example:
        >>> from visus.models.spec import ModelSpec
        >>> ctx = ReplyContext(ModelSpec(name="gpt-x", provider="openai"))
        >>> m = parse({"status": "incomplete", "incomplete_details":
        ...            {"reason": "max_output_tokens"}, "output": [{"type": "message",
        ...            "content": [{"type": "output_text", "text": "Hi"}]}]}, ctx)
        >>> m.text, m.stop_reason
        ('Hi', 'max_tokens')
    """
    r = cast("Reply", reply)
    if r.get("status") == "failed":
        raise ctx.error(f"response failed: {r.get('error')}")
    text: list[str] = []
    calls: list[ToolCall] = []
    kept: list[JSONObject] = []
    for item in r.get("output") or ():
        kind = item.get("type")
        if kind == "message":
            text.extend(
                c.get("text", "")
                for c in item.get("content") or ()
                if c.get("type") == "output_text"
            )
            text.extend(
                c.get("refusal", "")
                for c in item.get("content") or ()
                if c.get("type") == "refusal"
            )
            kept.append({"type": "message"})
        elif kind == "function_call":
            call_id = item.get("call_id") or new_call_id()
            calls.append(
                ToolCall(
                    id=call_id,
                    name=item.get("name", ""),
                    arguments=decode_arguments(item.get("arguments")),
                )
            )
            kept.append({"type": "function_call", "id": item.get("id", ""), "call_id": call_id})
        elif kind == "reasoning":
            kept.append(dict(cast("JSONObject", item)))
    state = None
    if any(k.get("type") == "reasoning" or k.get("id") for k in kept):
        state = ProviderState(WIRE, json.dumps(kept, separators=(",", ":")))
    u = r.get("usage") or {}
    cached = as_int((u.get("input_tokens_details") or {}).get("cached_tokens"))
    prompt, output = as_int(u.get("input_tokens")), as_int(u.get("output_tokens"))
    usage = usage_for(ctx.model, prompt, output, cache_read=cached)
    return ctx.message("".join(text), calls, usage, _stop(r, calls), state)


class Event(TypedDict, total=False):
    type: str
    delta: str
    response: Reply
    message: str


class Stream:
    """Accumulates Responses stream events: text deltas as they come, the reply from
    the final ``response.completed`` (or ``response.incomplete``) event.

    Example:
        >>> from visus.models.spec import ModelSpec
        >>> s = Stream(ReplyContext(ModelSpec(name="gpt-x", provider="openai")))
        >>> s.feed({"type": "response.output_text.delta", "delta": "Hi"})
        'Hi'
        >>> _ = s.feed({"type": "response.completed", "response": {"status": "completed",
        ...     "output": [{"type": "message", "content": [{"type": "output_text",
        ...     "text": "Hi"}]}]}})
        >>> s.result().text
        'Hi'
    """

    def __init__(self, ctx: ReplyContext) -> None:
        self.ctx = ctx
        self.final: Reply | None = None

    def feed(self, event: JSONObject) -> str:
        e = cast("Event", event)
        kind = e.get("type")
        if kind == "response.output_text.delta":
            return e.get("delta", "")
        if kind in ("response.completed", "response.incomplete"):
            self.final = e.get("response")
        elif kind in ("response.failed", "error"):
            raise self.ctx.error(f"{kind}: {e.get('message') or e.get('response')}")
        return ""

    def result(self) -> AssistantMessage:
        if self.final is None:
            raise self.ctx.error("stream ended without response.completed")
        return parse(cast("JSONObject", self.final), self.ctx)
