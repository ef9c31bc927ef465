"""Gemini ``generateContent`` request bodies (REST, camelCase).

Tool results are ``functionResponse`` parts in a user turn. On models that take
images in tool results (Gemini 3: ``spec.images_in_tool_results``) the images ride
inside ``functionResponse.parts``; on older models (Gemini 2.x) they follow the run's
function responses as labelled parts in a user content of their own, right after the
content holding the function responses. PDFs (models with
``spec.pdf``) are ``inlineData`` parts with mimeType ``application/pdf`` and go
wherever images go. ``functionResponse.response`` is JSON, where a model reads quotes
escaped (``view(\\"sha256:...\\")``): visus's notes in a tool result (an elided
image's descriptor, :attr:`TextPart.note`) follow the run's function responses as
plain text parts, ``Tool call <id>: <note>``, in that same user content after them.
Roles otherwise alternate: a run of tool results and the user message after it merge
into one user turn (the one after the function responses, when there is one). A
tool call's ``signature`` (the ``thoughtSignature`` Gemini returned on it) is sent
back on its ``functionCall`` part, which Gemini 3 requires; a signature Gemini put on
the reply's text is kept as provider state and sent back on that text.

Example:
    >>> from visus.wire import lower
    >>> from visus.record.blobs import MemoryBlobStore
    >>> from visus.record.messages import ModelRequest, UserMessage, TextPart
    >>> from visus.models.spec import ModelSpec
    >>> spec = ModelSpec(name="gemini-x", provider="gemini", vision=True)
    >>> req = ModelRequest(messages=(UserMessage((TextPart("hi"),)),))
    >>> lower(req, wire="gemini", model=spec, blobs=MemoryBlobStore())["contents"]
    [{'role': 'user', 'parts': [{'text': 'hi'}]}]
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import (
    TYPE_CHECKING,
    Final,
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

if TYPE_CHECKING:
    from visus.wire._prepared import Body

__all__ = ["RULES", "WIRE", "Reply", "Request", "Stream", "build", "cap", "parse"]

WIRE = "gemini"

#: Image types Gemini takes inline (no gif).
RULES = WireRules(
    media_types=frozenset({"image/png", "image/jpeg", "image/webp", "image/heic", "image/heif"}),
    max_images=limits.GEMINI_MAX_IMAGES,
    # inline data per request: 20 MB historically (100 MB in 2026); the stricter is safe
    max_request_image_bytes=limits.GEMINI_MAX_INLINE_BYTES,
    max_document_bytes=limits.GEMINI_MAX_INLINE_BYTES,
    max_document_pages=limits.GEMINI_MAX_PDF_PAGES,
    documents_share_budget=True,
)

#: The role tag of what follows a tool run's function responses (its notes; on Gemini
#: 2.x its images): a user content of its own.
_MEDIA: Final = "user:media"


# --- requests (API reference: generateContent; Content, Part, Tool) ---------------


class Text(TypedDict):
    text: str
    #: The signature Gemini put on this text in its reply, sent back on it.
    thoughtSignature: NotRequired[str]


class Blob(TypedDict):
    mimeType: str
    data: str


class MediaResolution(TypedDict):
    level: Literal[
        "MEDIA_RESOLUTION_LOW",
        "MEDIA_RESOLUTION_MEDIUM",
        "MEDIA_RESOLUTION_HIGH",
        "MEDIA_RESOLUTION_ULTRA_HIGH",
    ]


class InlineData(TypedDict):
    inlineData: Blob
    #: Gemini 3: the resolution this image is read at (and billed for), per part.
    mediaResolution: NotRequired[MediaResolution]


_LEVELS: dict[str, MediaResolution] = {
    "low": {"level": "MEDIA_RESOLUTION_LOW"},
    "medium": {"level": "MEDIA_RESOLUTION_MEDIUM"},
    "high": {"level": "MEDIA_RESOLUTION_HIGH"},
    "ultra_high": {"level": "MEDIA_RESOLUTION_ULTRA_HIGH"},
}


class FunctionCallIn(TypedDict):
    id: str
    name: str
    args: dict[str, JSONValue]


class FunctionCallPart(TypedDict):
    functionCall: FunctionCallIn
    thoughtSignature: NotRequired[str]


class ToolOutput(TypedDict, total=False):
    """``FunctionResponse.response``: Gemini reads ``output``, or ``error`` on failure."""

    output: str
    error: str


class FunctionResponse(TypedDict):
    id: str
    name: str
    response: ToolOutput
    #: Images and PDFs of the result (Gemini 3: ``FunctionResponsePart``s).
    parts: NotRequired[list[InlineData]]


class FunctionResponsePart(TypedDict):
    functionResponse: FunctionResponse


Part: TypeAlias = Text | InlineData | FunctionCallPart | FunctionResponsePart


class Content(TypedDict):
    role: Literal["user", "model"]
    parts: list[Part]


class SystemInstruction(TypedDict):
    parts: list[Text]


class FunctionDeclaration(TypedDict):
    name: str
    description: str
    parametersJsonSchema: dict[str, JSONValue]


class Tool(TypedDict):
    functionDeclarations: list[FunctionDeclaration]


class GenerationConfig(TypedDict, total=False):
    maxOutputTokens: int


class Request(TypedDict):
    """A ``generateContent`` body, camelCase as in REST (the model goes in the URL)."""

    contents: list[Content]
    systemInstruction: NotRequired[SystemInstruction]
    tools: NotRequired[list[Tool]]
    generationConfig: NotRequired[GenerationConfig]


#: A turn before roles merge: Gemini's roles, plus ``_MEDIA`` for what follows a tool run.
_Turn: TypeAlias = tuple[Literal["user", "model", "user:media"], list[Part]]


def _merge(turns: list[_Turn]) -> list[_Turn]:
    """Roles alternate, except that a tool run's images stay in their own user content
    after the function responses; a user message after them joins that content."""
    merged = merge_roles(turns)
    out: list[_Turn] = []
    for role, parts in merged:
        if role == "user" and out and out[-1][0] == _MEDIA:
            out[-1][1].extend(parts)
        else:
            out.append((role, parts))
    return out


def _inline(media: WireMedia) -> InlineData:
    part: InlineData = {"inlineData": {"mimeType": media.media_type, "data": media.data}}
    if isinstance(media, WireImage) and media.detail in _LEVELS:
        # Per image (Gemini 3, visus.models.pick_detail): the level its tokens were
        # counted at, whatever the request's own default.
        part["mediaResolution"] = _LEVELS[media.detail]
    return part


def _part(part: WirePart) -> Part | None:
    if isinstance(part, TextPart):
        return {"text": part.text} if part.text else None
    if isinstance(part, WireImage | WireDocument):
        return _inline(part)
    assert_never(part)


def _function_response(message: WireTool, native: bool) -> FunctionResponsePart:
    pieces: list[str] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            # visus's notes (an elided image's descriptor) follow as plain text: in the
            # JSON of ``response`` the model would read their quotes escaped.
            if not part.note:
                pieces.append(part.text)
        elif isinstance(part, WireImage | WireDocument):
            if not native:
                pieces.append(("\n" if pieces else "") + media_stub(part))
        else:
            assert_never(part)
    if any(isinstance(p, TextPart) and p.note for p in message.parts):
        pieces.append(("\n" if pieces else "") + _NOTE_STUB)
    text = "".join(pieces)
    response: FunctionResponse = {
        "id": message.call_id,
        "name": message.tool_name,
        "response": {"error": text} if message.is_error else {"output": text},
    }
    if native and message.media:
        response["parts"] = [_inline(item) for item in message.media]
    return {"functionResponse": response}


#: What stays in a function response whose notes follow the run as plain text.
_NOTE_STUB: Final = "[visus's note on this result follows these tool results]"


def _after_run(message: WireTool, native: bool) -> list[Part]:
    """What follows a run's function responses for ``message``, in its order: its
    notes as text, and on Gemini 2.x its images and documents, each labelled."""
    out: list[Part] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            if part.note:
                out.append({"text": f"Tool call {message.call_id}: {part.text}"})
        elif isinstance(part, WireImage | WireDocument):
            if not native:
                out.append({"text": media_label(message.call_id, part)})
                out.append(_inline(part))
        else:
            assert_never(part)
    return out


def _text_signature(state: ProviderState) -> str | None:
    """The signature Gemini put on the reply's text (the last one it sent)."""
    items = cast("list[JSONObject]", json.loads(state.items))
    signature = items[-1].get("thoughtSignature") if items else None
    return signature if isinstance(signature, str) and signature else None


def _model(message: AssistantMessage) -> list[Part]:
    texts: list[Text] = [{"text": p.text} for p in message.parts if p.text]
    state = message.provider_state
    if state is not None and state.wire == WIRE and not state.left_out:
        # The signature Gemini put on the reply's text goes back on that text (on an
        # empty text part when the reply had none: where Gemini sent it).
        signature = _text_signature(state)
        if signature is not None:
            if not texts:
                texts.append({"text": ""})
            texts[-1]["thoughtSignature"] = signature
    parts: list[Part] = [*texts]
    for c in message.tool_calls:
        part: FunctionCallPart = {
            "functionCall": {"id": c.id, "name": c.name, "args": plain(c.arguments)}
        }
        if c.signature is not None:
            part["thoughtSignature"] = c.signature
        parts.append(part)
    return parts


def build(prepared: Prepared) -> Request:
    """The ``generateContent`` body for ``prepared`` (the model goes in the URL)."""
    native = prepared.model.images_in_tool_results
    turns: list[_Turn] = []
    run: list[WireTool] = []

    def close_run() -> None:
        if not run:
            return
        parts: list[Part] = [_function_response(m, native) for m in run]
        after = [part for m in run for part in _after_run(m, native)]
        run.clear()
        turns.append(("user", parts))
        if after:
            # In their own user content right after the one holding the function
            # responses (the shape real accepted requests use).
            turns.append((_MEDIA, after))

    for message in prepared.messages:
        if isinstance(message, WireTool):
            run.append(message)
            continue
        close_run()
        if isinstance(message, WireUser):
            turns.append(("user", [p for p in map(_part, message.parts) if p is not None]))
        elif isinstance(message, AssistantMessage):
            turns.append(("model", _model(message)))
        else:
            assert_never(message)
    close_run()
    body: Request = {
        "contents": [
            {
                "role": "model" if role == "model" else "user",
                "parts": parts or [{"text": "(empty)"}],
            }
            for role, parts in _merge(turns)
        ]
    }
    if prepared.system:
        body["systemInstruction"] = {"parts": [{"text": prepared.system}]}
    if prepared.tools:
        body["tools"] = [
            {
                "functionDeclarations": [
                    {
                        "name": t.name,
                        "description": t.description,
                        "parametersJsonSchema": plain(t.parameters),
                    }
                    for t in prepared.tools
                ]
            }
        ]
    return body


def cap(body: Body, max_tokens: int) -> Body:
    """``body`` with ``generationConfig.maxOutputTokens`` set if absent."""
    given = body.get("generationConfig")
    generation: dict[str, object] = dict(given) if isinstance(given, Mapping) else {}
    generation.setdefault("maxOutputTokens", max_tokens)
    return {**body, "generationConfig": generation}


# --- replies (API reference: GenerateContentResponse; streamGenerateContent) ------


class FunctionCall(TypedDict, total=False):
    id: str
    name: str
    args: JSONObject


class PartOut(TypedDict, total=False):
    text: str
    thought: bool
    thoughtSignature: str
    functionCall: FunctionCall


class ContentOut(TypedDict, total=False):
    role: str
    parts: list[PartOut]


class Candidate(TypedDict, total=False):
    content: ContentOut
    finishReason: str


class UsageMetadata(TypedDict, total=False):
    promptTokenCount: int
    candidatesTokenCount: int
    thoughtsTokenCount: int
    #: The part of ``promptTokenCount`` read from a cache (implicit or explicit).
    cachedContentTokenCount: int


class PromptFeedback(TypedDict, total=False):
    blockReason: str


class Reply(TypedDict, total=False):
    """A ``GenerateContentResponse`` (or one streamed chunk), camelCase as in REST."""

    candidates: list[Candidate]
    usageMetadata: UsageMetadata
    promptFeedback: PromptFeedback


_FILTERED = frozenset(
    {"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY"}
)


def _stop(reason: object) -> StopReason:
    if reason in ("STOP", None):
        return "end_turn"
    if reason == "MAX_TOKENS":
        return "max_tokens"
    return "content_filter" if reason in _FILTERED else "other"


class Stream:
    """Accumulates Gemini replies: each streamed chunk is a whole (partial) reply, so
    :func:`parse` is one chunk fed to this.

    Example:
        >>> from visus.models.spec import ModelSpec
        >>> s = Stream(ReplyContext(ModelSpec(name="gemini-x", provider="gemini")))
        >>> s.feed({"candidates": [{"content": {"parts": [{"text": "Hi"}]}}]})
        'Hi'
        >>> _ = s.feed({"candidates": [{"finishReason": "MAX_TOKENS"}]})
        >>> s.result().stop_reason
        'max_tokens'
    """

    def __init__(self, ctx: ReplyContext) -> None:
        self.ctx = ctx
        self.text: list[str] = []
        self.calls: list[ToolCall] = []
        self.signatures: list[JSONObject] = []
        self.usage: UsageMetadata = {}
        self.finish: object = None
        self.blocked: object = None

    def feed(self, event: JSONObject) -> str:
        reply = cast("Reply", event)
        self.usage = reply.get("usageMetadata") or self.usage
        self.blocked = (reply.get("promptFeedback") or {}).get("blockReason") or self.blocked
        candidates = reply.get("candidates") or []
        if not candidates:
            return ""
        self.finish = candidates[0].get("finishReason") or self.finish
        new: list[str] = []
        for part in (candidates[0].get("content") or {}).get("parts") or ():
            call = part.get("functionCall")
            if part.get("thought"):
                continue  # a thought summary is not the answer
            if part.get("text"):
                new.append(part.get("text", ""))
            if call is None and part.get("thoughtSignature"):
                # On the text, or on a last part with no text (a stream's final chunk).
                self.signatures.append({"thoughtSignature": part.get("thoughtSignature")})
            if call is not None:
                if not call.get("name"):
                    raise self.ctx.error("function call without a name")
                self.calls.append(
                    ToolCall(
                        id=call.get("id") or new_call_id(),
                        name=call.get("name", ""),
                        arguments=decode_arguments(call.get("args")),
                        signature=part.get("thoughtSignature") or None,
                    )
                )
        self.text.extend(new)
        return "".join(new)

    def result(self) -> AssistantMessage:
        u = self.usage
        output = as_int(u.get("candidatesTokenCount")) + as_int(u.get("thoughtsTokenCount"))
        cached = as_int(u.get("cachedContentTokenCount"))
        usage = usage_for(
            self.ctx.model, as_int(u.get("promptTokenCount")), output, cache_read=cached
        )
        stop = "content_filter" if self.blocked and self.finish is None else _stop(self.finish)
        state = None
        if self.signatures:
            state = ProviderState(WIRE, json.dumps(self.signatures, separators=(",", ":")))
        return self.ctx.message("".join(self.text), self.calls, usage, stop, state)


def parse(reply: JSONObject, ctx: ReplyContext) -> AssistantMessage:
    """A ``generateContent`` reply (plain dict, camelCase) as an assistant message.

    Example:
        >>> from visus.models.spec import ModelSpec
        >>> ctx = ReplyContext(ModelSpec(name="gemini-x", provider="gemini"))
        >>> m = parse({"candidates": [{"content": {"parts": [{"functionCall":
        ...     {"name": "view", "args": {"path": "a.png"}}, "thoughtSignature": "c2ln"}]},
        ...     "finishReason": "STOP"}]}, ctx)
        >>> m.tool_calls[0].signature, m.stop_reason
        ('c2ln', 'tool_use')
    """
    stream = Stream(ctx)
    stream.feed(reply)
    return stream.result()
