"""The neutral, wire-independent form every wire module builds from.

``prepare`` (in :mod:`visus.wire._prepare`) turns a :class:`ModelRequest` into a
:class:`Prepared` request: every :class:`ImagePart` is resolved either to a
:class:`WireImage` (base64 bytes inside the target model's limits) or to a
:class:`TextPart` note (missing blob, over the image cap, no vision), and every
:class:`DocumentPart` to a :class:`WireDocument` or a note (model or wire without
native documents, over a page or byte cap). Wire modules then only arrange these
values into their provider's JSON; they never read blobs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, NotRequired, TypeAlias, TypedDict, TypeVar, overload

from visus.models.spec import ModelSpec
from visus.record.messages import (
    AssistantMessage,
    AttachmentOrigin,
    Origin,
    PerceptionOrigin,
    TextPart,
    ToolSpec,
)

__all__ = [
    "Body",
    "FunctionTool",
    "FunctionToolSpec",
    "JSONValue",
    "Prepared",
    "WireDocument",
    "WireImage",
    "WireMedia",
    "WireMessage",
    "WirePart",
    "WireTool",
    "WireUser",
    "arguments_json",
    "function_tools",
    "image_label",
    "image_stub",
    "media_label",
    "media_stub",
    "merge_roles",
    "plain",
    "source_text",
]

#: A request body as a wire's codec built it: JSON-ready, one of the codecs' own
#: ``Request`` TypedDicts (``anthropic.Request``, ``gemini.Request``, ...) read as a
#: plain JSON object by code that serves every wire (the client, ``visus lower``).
Body: TypeAlias = Mapping[str, object]


@dataclass(frozen=True, slots=True)
class WireImage:
    """An image ready for a wire: ``data`` is standard base64 of the ``size`` bytes sent.

    ``detail`` is the detail the model reads it at (``visus.models.pick_detail``): wires
    that take one send it (OpenAI's ``detail``, Gemini 3's per-part media resolution).
    """

    data: str
    size: int
    media_type: str
    width: int
    height: int
    digest: str
    origin: Origin
    detail: str = "auto"
    kind: Literal["wire-image"] = "wire-image"

    @property
    def data_url(self) -> str:
        return f"data:{self.media_type};base64,{self.data}"


@dataclass(frozen=True, slots=True)
class WireDocument:
    """A PDF ready for a wire: ``data`` is standard base64 of the ``size`` bytes sent.

    ``filename`` is what the document is called on wires that want a name (always
    ends in ``.pdf``; wires with stricter name rules sanitise it).
    """

    data: str
    size: int
    media_type: str
    page_count: int
    filename: str
    digest: str
    origin: Origin
    kind: Literal["wire-document"] = "wire-document"

    @property
    def data_url(self) -> str:
        return f"data:{self.media_type};base64,{self.data}"


WireMedia: TypeAlias = WireImage | WireDocument
WirePart: TypeAlias = TextPart | WireImage | WireDocument


@dataclass(frozen=True, slots=True)
class WireUser:
    parts: tuple[WirePart, ...]
    kind: Literal["user"] = "user"


@dataclass(frozen=True, slots=True)
class WireTool:
    call_id: str
    tool_name: str
    parts: tuple[WirePart, ...]
    is_error: bool = False
    kind: Literal["tool"] = "tool"

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.parts if isinstance(p, TextPart))

    @property
    def images(self) -> tuple[WireImage, ...]:
        return tuple(p for p in self.parts if isinstance(p, WireImage))

    @property
    def media(self) -> tuple[WireMedia, ...]:
        """Images and documents, in order: what a wire hoists out of a tool result."""
        return tuple(p for p in self.parts if isinstance(p, WireImage | WireDocument))


WireMessage: TypeAlias = WireUser | AssistantMessage | WireTool


@dataclass(frozen=True, slots=True)
class Prepared:
    """A request whose images are resolved for one model on one wire."""

    messages: tuple[WireMessage, ...]
    system: str | None
    tools: tuple[ToolSpec, ...]
    max_tokens: int
    model: ModelSpec
    cache_key: str | None = None
    #: The request's effort, when the model takes it (:attr:`ModelSpec.efforts`).
    effort: str | None = None

    @property
    def openai_cache_key(self) -> str | None:
        """``prompt_cache_key`` for OpenAI's own API (an OpenAI-compatible server may
        refuse a field it does not know, so only OpenAI and the reference server get it)."""
        return self.cache_key if self.model.provider in ("openai", "reference") else None


def source_text(origin: Origin) -> str:
    """How an image is named to the model: the call that re-creates it, or the file."""
    if isinstance(origin, PerceptionOrigin):
        page = f", page {origin.page}" if origin.page is not None else ""
        return f'{origin.tool}("{origin.source}"){page}'
    if isinstance(origin, AttachmentOrigin):
        return f'attachment "{origin.filename}"' if origin.filename else "attachment"
    raise TypeError(f"unknown origin {origin!r}")


def image_label(call_id: str, image: WireImage) -> str:
    """The text that precedes a hoisted tool image: which call produced it, from what."""
    return (
        f"[image from tool call {call_id}: {source_text(image.origin)}, "
        f"{image.width}x{image.height}]"
    )


def image_stub(image: WireImage) -> str:
    """What stays in a tool message whose image the wire carries in a later user turn."""
    return (
        f"[image: {source_text(image.origin)}, {image.width}x{image.height}; "
        "shown in the user message after these tool results]"
    )


def media_label(call_id: str, part: WireMedia) -> str:
    """:func:`image_label` for images; for a document, its name and page count."""
    if isinstance(part, WireImage):
        return image_label(call_id, part)
    return (
        f"[document from tool call {call_id}: {source_text(part.origin)}, "
        f"{part.filename}, {part.page_count} pages]"
    )


def media_stub(part: WireMedia) -> str:
    """:func:`image_stub` for images; the same kind of stub for a document."""
    if isinstance(part, WireImage):
        return image_stub(part)
    return (
        f"[document: {source_text(part.origin)}, {part.filename}, {part.page_count} pages; "
        "shown in the user message after these tool results]"
    )


#: A JSON value as :func:`plain` makes it: what a wire passes through untouched (a tool's
#: JSON Schema, a call's arguments), typed as JSON so a body's TypedDict can hold it.
JSONValue: TypeAlias = "str | int | float | bool | list[JSONValue] | dict[str, JSONValue] | None"

_Role = TypeVar("_Role", bound=str)
_Item = TypeVar("_Item")


def arguments_json(arguments: Mapping[str, object]) -> str:
    """Tool-call arguments as the JSON string the OpenAI wires take (stable, unescaped)."""
    return json.dumps(dict(arguments), ensure_ascii=False, separators=(",", ":"))


@overload
def plain(value: Mapping[str, object]) -> dict[str, JSONValue]: ...


@overload
def plain(value: object) -> JSONValue: ...


def plain(value: object) -> JSONValue:
    """A JSON-ready copy: mappings to dicts, tuples and lists to lists, recursively.

    A mapping gives a dict, so a wire can put a schema or arguments where its API wants
    an object. The record holds only decoded JSON, so any other leaf is a bug upstream:
    it is refused here rather than failing later inside a provider's SDK.
    """
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if value is None or isinstance(value, str | int | float):
        return value
    raise TypeError(f"not a JSON value: {value!r}")


class FunctionToolSpec(TypedDict):
    """The ``function`` of a :class:`FunctionTool` (Chat Completions ``FunctionDefinition``;
    only ``name`` is required there)."""

    name: str
    description: NotRequired[str]
    parameters: NotRequired[dict[str, JSONValue]]


class FunctionTool(TypedDict):
    """A tool in the OpenAI ``{"type": "function", "function": {...}}`` shape."""

    type: Literal["function"]
    function: FunctionToolSpec


def function_tools(tools: Sequence[ToolSpec]) -> list[FunctionTool]:
    """Tools in the OpenAI function shape, which the Chat Completions wire and Ollama's
    ``/api/chat`` share."""
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": plain(t.parameters),
            },
        }
        for t in tools
    ]


def merge_roles(
    turns: Sequence[tuple[_Role, Sequence[_Item]]],
) -> list[tuple[_Role, list[_Item]]]:
    """Merge consecutive turns of the same role (wires that require alternation)."""
    merged: list[tuple[_Role, list[_Item]]] = []
    for role, items in turns:
        if merged and merged[-1][0] == role:
            merged[-1][1].extend(items)
        else:
            merged.append((role, list(items)))
    return merged
