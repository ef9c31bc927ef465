"""Neutral messages and parts: pure, frozen values.

A conversation is a tuple of messages. Each message knows its ``turn``: a turn is
one user message and every assistant step and tool result until the next user
message (turns count from 1). Parts are values with a ``kind`` literal; identity
and storage live elsewhere (an :class:`ImagePart` holds a *reference* to a blob,
never bytes).

Example:
    >>> from visus.record.messages import UserMessage, TextPart
    >>> m = UserMessage(parts=(TextPart("hello"),), turn=1)
    >>> m.kind, m.text
    ('user', 'hello')
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

__all__ = [
    "AssistantMessage",
    "AttachmentOrigin",
    "ChangedFrom",
    "Crop",
    "DocumentPart",
    "ImagePart",
    "JSONObject",
    "Message",
    "ModelRequest",
    "Origin",
    "Part",
    "PerceptionOrigin",
    "ProviderState",
    "StopReason",
    "TextPart",
    "ToolCall",
    "ToolResult",
    "ToolSpec",
    "Usage",
    "UserMessage",
]


@dataclass(frozen=True, slots=True)
class PerceptionOrigin:
    """The image came from ``view`` (or ``view_attachment``) and can be re-viewed.

    ``source`` is what the tool was called with (a path, URL or attachment name);
    ``tool`` names the tool that re-creates it, so a descriptor can say how; ``page``
    and ``region`` (``(x0, y0, x1, y1)`` of a zoomed view) are the rest of that call.
    """

    source: str
    tool: str = "view"
    page: int | None = None
    region: tuple[int, int, int, int] | None = None
    kind: Literal["perception"] = "perception"

    def where(self) -> str:
        """The source with the page and region shown, as descriptors name it (no square
        brackets: a descriptor is itself a bracketed note).

        Example:
            >>> PerceptionOrigin("r.pdf", page=3, region=(0, 0, 300, 200)).where()
            'r.pdf page 3 region 0,0,300,200'
        """
        where = self.source
        if self.page is not None:
            where += f" page {self.page}"
        if self.region is not None:
            where += f" region {','.join(str(v) for v in self.region)}"
        return where


@dataclass(frozen=True, slots=True)
class AttachmentOrigin:
    """A user pasted or uploaded the image: not re-viewable, never auto-elided."""

    filename: str | None = None
    kind: Literal["attachment"] = "attachment"


Origin: TypeAlias = PerceptionOrigin | AttachmentOrigin


@dataclass(frozen=True, slots=True)
class TextPart:
    """Text. ``note`` marks visus's own words standing in for an image or document
    (a retention descriptor, a wire's over-cap note): the same text to every reader, so
    it neither compares nor prints, but a wire that carries tool output as JSON (Gemini)
    can send a note as plain text beside it, where the model reads its quotes as quotes.
    """

    text: str
    kind: Literal["text"] = "text"
    note: bool = field(default=False, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Crop:
    """One changed area of an image, stored as a blob of its own (lossless):
    ``region`` is ``(x0, y0, x1, y1)`` in the image's pixels, right and bottom exclusive.
    """

    digest: str
    media_type: str
    size: int
    region: tuple[int, int, int, int]

    @property
    def width(self) -> int:
        return self.region[2] - self.region[0]

    @property
    def height(self) -> int:
        return self.region[3] - self.region[1]


@dataclass(frozen=True, slots=True)
class ChangedFrom:
    """An image that is the image ``base`` (another image of the record, by digest, of
    the same size) except in ``crops``: pasting them onto it gives every pixel.

    Lowering sends the crops in place of the whole image when ``base`` is itself sent
    earlier in the same request (see :mod:`visus.wire._crops`).

    Example:
        >>> c = ChangedFrom("ab" * 32, (Crop("cd" * 32, "image/png", 900, (10, 20, 110, 60)),))
        >>> c.crops[0].width, c.crops[0].height
        (100, 40)
    """

    base: str
    crops: tuple[Crop, ...]


@dataclass(frozen=True, slots=True)
class ImagePart:
    """A reference to an image blob: ``digest`` is the lowercase hex sha256 of its bytes.

    ``changed_from`` is set when the image differs from an earlier one of the record
    only in a few small areas (a screenshot after a keystroke): metadata that lets a
    request carry only those areas while the earlier image is still live.
    """

    digest: str
    media_type: str
    size: int
    width: int
    height: int
    origin: Origin
    kind: Literal["image"] = "image"
    changed_from: ChangedFrom | None = None


@dataclass(frozen=True, slots=True)
class DocumentPart:
    """A reference to a document blob (a PDF) sent natively to models that take one.

    Like :class:`ImagePart` it holds no bytes: ``digest`` is the lowercase hex
    sha256 of the blob, ``size`` its length and ``page_count`` its pages (wires
    check page caps without opening it). Models without document support get a
    text note instead (see :mod:`visus.wire`).

    Example:
        >>> doc = DocumentPart("ab" * 32, "application/pdf", 1234, 2,
        ...                    AttachmentOrigin("report.pdf"))
        >>> doc.kind, doc.page_count
        ('document', 2)
    """

    digest: str
    media_type: str
    size: int
    page_count: int
    origin: Origin
    kind: Literal["document"] = "document"


Part: TypeAlias = TextPart | ImagePart | DocumentPart


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A call the assistant asked for. ``arguments`` is a decoded JSON object.

    ``signature`` is an opaque token some providers attach to a call and require
    back on the same call in later turns (Gemini's thought signature, base64).
    """

    id: str
    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    signature: str | None = None


#: Why a model stopped, the same on every wire: it finished (``end_turn``), it asked
#: for tools (``tool_use``), it hit the output limit (``max_tokens``: the answer is cut
#: off), a safety filter stopped it (``content_filter``), or anything else (``other``).
StopReason: TypeAlias = Literal["end_turn", "tool_use", "max_tokens", "content_filter", "other"]

#: A JSON object as parsed (a reply, an event, an opaque provider item).
JSONObject: TypeAlias = dict[str, object]


@dataclass(frozen=True, slots=True)
class ProviderState:
    """Opaque items one wire wants back on later steps (OpenAI Responses reasoning
    items, Gemini thought signatures on text), kept verbatim as JSON text so the record
    stays plain; lowering onto another wire drops them.

    A model view's marks, never stored (:mod:`visus.retention.reasoning`):
    ``left_out``, an earlier request's eviction already had the provider drop the
    reasoning among the items (the turn goes as the record's text and calls);
    ``invalidated``, this request's eviction changes the prefix it was made over (each
    wire sends what its provider wants then: Anthropic the blocks as returned, to be
    dropped and listed; Responses neither the reasoning nor the calls' item ids, which
    the API refuses without their reasoning item).

    Example:
        >>> ProviderState("openai-responses", '[{"type": "reasoning", "id": "rs_1"}]').wire
        'openai-responses'
    """

    wire: str
    items: str
    left_out: bool = False
    invalidated: bool = False


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens and cost of one model step (or a sum of steps).

    ``input_tokens`` counts every prompt token; ``cache_read_tokens`` and
    ``cache_write_tokens`` are the part of them the provider read from and wrote to its
    prompt cache (billed at their own prices, which ``cost_usd`` includes).
    ``reasoning_dropped`` counts the model's earlier reasoning blocks the provider left
    out of the request because something before them changed (Anthropic's
    ``input_transformations``): reasoning the model may have to do again.

    Example:
        >>> (Usage(100, 5, 0.1, cache_read_tokens=80) + Usage(120, 5, 0.1)).cache_read_tokens
        80
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_dropped: int = 0

    def as_json(self) -> dict[str, int | float]:
        """The usage as the surfaces print it (``visus usage``, ``run --json``, tether, web);
        ``reasoning_dropped`` only when the provider dropped some.

        Example:
            >>> Usage(100, 5, 0.00123456789, cache_read_tokens=80).as_json()["cost_usd"]
            0.00123457
            >>> Usage(reasoning_dropped=2).as_json()["reasoning_dropped"]
            2
        """
        out: dict[str, int | float] = {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "cost_usd": round(self.cost_usd, 8),
        }
        if self.reasoning_dropped:
            out["reasoning_dropped"] = self.reasoning_dropped
        return out

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cost_usd + other.cost_usd,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            self.reasoning_dropped + other.reasoning_dropped,
        )


@dataclass(frozen=True, slots=True)
class UserMessage:
    parts: tuple[Part, ...]
    turn: int = 1
    kind: Literal["user"] = "user"
    #: The request this message is (tether: ``<seq>:<msg_id>``), so that a turn whose
    #: process died is found again and finished from its recorded steps; None: unnamed.
    request_id: str | None = None

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.parts if isinstance(p, TextPart))


@dataclass(frozen=True, slots=True)
class AssistantMessage:
    parts: tuple[TextPart, ...] = ()
    tool_calls: tuple[ToolCall, ...] = ()
    turn: int = 1
    model: str = ""
    usage: Usage | None = None
    #: Why the model stopped (None in records written before visus kept it).
    stop_reason: StopReason | None = None
    #: Opaque items its wire wants back on later steps of the same wire.
    provider_state: ProviderState | None = None
    kind: Literal["assistant"] = "assistant"

    @property
    def truncated(self) -> bool:
        """True when the reply was cut off at the output limit."""
        return self.stop_reason == "max_tokens"

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.parts)


@dataclass(frozen=True, slots=True)
class ToolResult:
    call_id: str
    tool_name: str
    parts: tuple[Part, ...]
    is_error: bool = False
    turn: int = 1
    #: What the tool itself spent on models (e.g. vision_analyze), if anything.
    usage: Usage | None = None
    kind: Literal["tool"] = "tool"

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.parts if isinstance(p, TextPart))


Message: TypeAlias = UserMessage | AssistantMessage | ToolResult


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool offered to the model: ``parameters`` is a JSON Schema object."""

    name: str
    description: str
    parameters: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """Everything a wire needs besides the model: system prompt, messages, tools."""

    messages: tuple[Message, ...]
    system: str | None = None
    tools: tuple[ToolSpec, ...] = ()
    max_tokens: int = 4096
    #: Names the conversation to a provider's prompt cache (OpenAI ``prompt_cache_key``),
    #: so its requests reach the same cache; None sends none.
    cache_key: str | None = None
    #: How hard the model thinks (Anthropic ``output_config.effort``, OpenAI
    #: ``reasoning.effort``): one of the model's catalog ``efforts``; None: its default.
    effort: str | None = None
