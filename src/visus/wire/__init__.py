"""Lowering: a model view -> one provider's request body (plain JSON).

``lower`` is pure in what it returns (the same view gives the same JSON), keyed on
the shape of parts (an :class:`~visus.record.messages.ImagePart` versus a
:class:`~visus.record.messages.TextPart`), never on tool names. Images are read from
the blob store and sent as base64, re-fitted first when they break the target
model's limits (see :mod:`visus.wire._prepare` for the rules); a missing blob
becomes a text note. Each wire lives in its own module, chosen from an explicit
table; where each wire puts a tool's images is DESIGN.md's table.

Example:
    >>> from visus.wire import lower
    >>> from visus.record.blobs import MemoryBlobStore
    >>> from visus.record.messages import ModelRequest, UserMessage, TextPart
    >>> req = ModelRequest(messages=(UserMessage((TextPart("hello"),)),), max_tokens=100)
    >>> body = lower(req, wire="anthropic", model="claude-sonnet-4-6", blobs=MemoryBlobStore())
    >>> body["model"], body["messages"][0]["content"][0]["text"]
    ('claude-sonnet-4-6', 'hello')
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal, Protocol, TypeAlias, get_args

from visus.errors import WireError
from visus.models.spec import ModelSpec
from visus.record.messages import AssistantMessage, JSONObject, ModelRequest
from visus.retention import Ceiling
from visus.wire import anthropic, bedrock, gemini, ollama, openai_chat, openai_responses
from visus.wire._cache import window_marks
from visus.wire._display import abbreviate
from visus.wire._prepare import (
    WireRules,
    accepted_for,
    max_document_pages,
    max_images,
    prepare,
    profile_for,
)
from visus.wire._prepared import Body, Prepared
from visus.wire._refit import BlobReader, BlobWriter, RefitCache, RefitEntry
from visus.wire._reply import Accumulator, ReplyContext
from visus.wire._thinking import progress_notes

__all__ = [
    "WIRES",
    "Accumulator",
    "BlobReader",
    "BlobWriter",
    "Body",
    "RefitCache",
    "RefitEntry",
    "ReplyContext",
    "Wire",
    "WireRules",
    "WireSpec",
    "abbreviate",
    "accepted_for",
    "image_ceiling",
    "lower",
    "max_document_pages",
    "profile_for",
    "progress_notes",
    "window_marks",
]

Wire: TypeAlias = Literal[
    "anthropic", "openai-chat", "openai-responses", "gemini", "ollama", "bedrock"
]


@dataclass(frozen=True, slots=True)
class WireSpec:
    """One wire's two-way codec: its image rules, the function that builds its body,
    the one that sets its output cap, the reply parser and the stream accumulator."""

    name: Wire
    rules: WireRules
    build: Callable[[Prepared], Body]
    cap: Callable[[Body, int], Body]
    parse: Callable[[JSONObject, ReplyContext], AssistantMessage]
    stream: Callable[[ReplyContext], Accumulator]


class _Codec(Protocol):
    """What a wire module provides (each module in ``WIRES`` is checked against it)."""

    @property
    def RULES(self) -> WireRules: ...  # a module constant, read-only here

    def build(self, prepared: Prepared, /) -> Body: ...

    def cap(self, body: Body, max_tokens: int, /) -> Body: ...

    def parse(self, reply: JSONObject, ctx: ReplyContext, /) -> AssistantMessage: ...

    def Stream(self, ctx: ReplyContext, /) -> Accumulator: ...  # the accumulator class


def _spec(name: Wire, codec: _Codec) -> WireSpec:
    return WireSpec(name, codec.RULES, codec.build, codec.cap, codec.parse, codec.Stream)


#: The explicit table from wire name to the module that lowers onto it.
WIRES: Mapping[Wire, WireSpec] = MappingProxyType(
    {
        "anthropic": _spec("anthropic", anthropic),
        "openai-chat": _spec("openai-chat", openai_chat),
        "openai-responses": _spec("openai-responses", openai_responses),
        "gemini": _spec("gemini", gemini),
        "ollama": _spec("ollama", ollama),
        "bedrock": _spec("bedrock", bedrock),
    }
)
assert set(WIRES) == set(get_args(Wire))


def image_ceiling(spec: ModelSpec, wire: Wire) -> Ceiling:
    """What one request on ``wire`` may carry of images for ``spec``, as retention plans
    with it (:func:`visus.retention.model_view`'s ``ceiling``): the image cap. Not the
    request's byte budget: lowering meets that itself, re-encoding images smaller
    before it leaves any out (bytes before pixels, ``media.compact``), which a
    retention that evicted by stored bytes would pre-empt.

    Example:
        >>> from visus.models import get_model
        >>> image_ceiling(get_model("claude-haiku-4-5"), "anthropic").images
        100
    """
    return Ceiling(images=max_images(spec, WIRES[wire].rules))


def lower(
    request: ModelRequest,
    *,
    wire: Wire,
    model: ModelSpec | str,
    blobs: BlobReader,
    refit_cache: RefitCache | None = None,
) -> Body:
    """Lower ``request`` (a model view) onto ``wire`` for ``model``.

    Returns the JSON body the provider's HTTP API takes. ``blobs`` supplies image
    bytes; if it can also ``put``, re-fitted images are stored there and remembered
    in ``refit_cache`` so the next lowering reuses them.

    Example:
        >>> from visus.record.blobs import MemoryBlobStore
        >>> from visus.record.messages import ModelRequest, UserMessage, TextPart
        >>> req = ModelRequest(messages=(UserMessage((TextPart("hi"),)),))
        >>> lower(req, wire="openai-chat", model="gpt-4.1", blobs=MemoryBlobStore())
        {'model': 'gpt-4.1', 'messages': [{'role': 'user', 'content': 'hi'}]}
    """
    try:
        entry = WIRES[wire]
    except KeyError:
        known = ", ".join(WIRES)
        raise WireError(f"unknown wire {wire!r}; known wires: {known}") from None
    if isinstance(model, str):
        from visus.models import get_model

        spec = get_model(model)
    elif isinstance(model, ModelSpec):
        spec = model
    else:
        raise TypeError(f"model must be a ModelSpec or a model name, not {type(model).__name__}")
    prepared = prepare(request, spec=spec, rules=entry.rules, blobs=blobs, refit_cache=refit_cache)
    return entry.build(prepared)
