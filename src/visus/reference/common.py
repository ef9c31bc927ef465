"""What every wire of the reference server shares: rejections, images, tokens.

A wire module parses its provider's request into a neutral
:class:`~visus.reference.model.Conversation`, raising :class:`Reject` (status, the
provider's error JSON, headers) wherever the real service would refuse; the
server turns a ``Reject`` into that exact response.

Example:
    >>> r = Reject(400, {"error": "bad"})
    >>> r.status, r.body
    (400, {'error': 'bad'})
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import hashlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from visus import limits
from visus.errors import InvalidInputError
from visus.models import get_model, image_tokens
from visus.models.spec import ModelSpec
from visus.reference.cache import Block, PromptCache, estimate
from visus.reference.fingerprint import Memo
from visus.reference.model import (
    Conversation,
    InImage,
    Reply,
    count_tokens,
    requested_wait,
    respond,
)
from visus.reference.vision import decode_size

__all__ = [
    "REPRESENTATIVE",
    "Checked",
    "Reject",
    "Settings",
    "WireName",
    "answer",
    "b64decode",
    "check_image",
    "image_cost",
    "now",
    "pixel_cost",
    "prefix_blocks",
    "read_json",
    "spec_for",
]

WireName: TypeAlias = Literal["openai", "anthropic", "gemini", "ollama", "bedrock"]

#: The catalog model whose image-token formula a wire uses when the request
#: names a model the catalog does not know (or one without vision).
REPRESENTATIVE: dict[WireName, str] = {
    "openai": "gpt-4.1",
    "anthropic": "claude-sonnet-4-6",
    "gemini": "gemini-2.5-flash",
    "ollama": "llama3.2-vision",
    "bedrock": "claude-sonnet-4-6",
}


class Reject(Exception):
    """The request is refused: ``body`` is the provider's own error JSON."""

    def __init__(
        self, status: int, body: Mapping[str, Any], headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(json.dumps(body))
        self.status = status
        self.body = dict(body)
        self.headers = dict(headers or {})


@dataclass(frozen=True, slots=True)
class Settings:
    """Server-wide settings; ``context_tokens`` is the model's context window."""

    context_tokens: int = limits.REFERENCE_CONTEXT_TOKENS
    #: The model's own output limit (tokens). When set, an answer longer than it, or
    #: than the request's own cap, is cut off there and the reply says so with the
    #: wire's truncation signal. None: answers are never cut (request caps ignored).
    max_output_tokens: int | None = None
    #: This server's prompt cache (each wire accounts it as its provider documents).
    cache: PromptCache = field(default_factory=PromptCache)
    #: End every prose answer with the fenced ``json`` block of what was seen (tests and
    #: scripts read it; a chat does not want it).
    json_block: bool = False


@dataclass(frozen=True, slots=True)
class Checked:
    """An image that decoded: size and Pillow's format name (png, jpeg, gif, webp...)."""

    data: bytes
    width: int
    height: int
    format: str


async def read_json(request: Request, bad: Callable[[str], Reject]) -> dict[str, Any]:
    """The request body as a JSON object, or ``bad(message)`` raised."""
    raw = await request.body()
    if len(raw) > limits.REFERENCE_MAX_BODY_BYTES:
        raise bad(f"request body of {len(raw)} bytes is over the limit")
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise bad(f"could not parse the JSON body of your request: {e}") from e
    except RecursionError as e:  # Python's parser gives up on deep nesting: so do we
        raise bad("could not parse the JSON body of your request: nested too deeply") from e
    if not isinstance(body, dict):
        raise bad("the request body must be a JSON object")
    return body


def b64decode(text: object, *, proto: bool = False) -> bytes:
    """Strict base64 (standard alphabet, padding checked); InvalidInputError otherwise.

    ``proto=True`` follows protobuf's JSON mapping of bytes (Google APIs): the
    standard or URL-safe alphabet, with or without padding.
    """
    if not isinstance(text, str) or not text:
        raise InvalidInputError("image data must be a non-empty base64 string")
    if proto:
        text = text.replace("-", "+").replace("_", "/")
        text += "=" * (-len(text) % 4)
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as e:
        raise InvalidInputError(f"invalid base64: {e}") from e


# Sizes of images already checked, by sha256 (not the bytes: a few hundred screenshots).
_SIZES: Memo[str, tuple[int, int, str]] = Memo(4096)


def check_image(data: bytes) -> Checked:
    """Decode the header (and verify the stream) of an image; UndecodableError if not one.

    An image already checked (same bytes) is not decoded again: a long agent loop sends
    its live images with every request.
    """
    width, height, fmt = _SIZES.get(hashlib.sha256(data).hexdigest(), lambda: decode_size(data))
    return Checked(data=data, width=width, height=height, format=fmt)


def spec_for(wire: WireName, model: str) -> ModelSpec:
    """The catalog spec of ``model``, or the wire's representative vision model."""
    try:
        spec = get_model(model) if model else None
    except InvalidInputError:
        spec = None
    if spec is None or not spec.vision:
        spec = get_model(REPRESENTATIVE[wire])
    return spec


def pixel_cost(spec: ModelSpec) -> Callable[[int, int], int]:
    """Tokens of an image of a given size under ``spec``'s formula (cache estimates)."""
    return lambda width, height: image_tokens(spec, width, height)


def prefix_blocks(head: Mapping[str, object], items: object, spec: ModelSpec) -> list[Block]:
    """Cache blocks of a wire that caches by prefix alone (OpenAI, Gemini): ``head`` (tools,
    instructions: what precedes the conversation, its empty values left out) then each
    item of the conversation."""
    pixels = pixel_cost(spec)
    head = {k: v for k, v in head.items() if v}
    blocks = [Block(*estimate(head, pixels))] if head else []
    seq = items if isinstance(items, list) else [items] if items else []
    return blocks + [Block(*estimate(item, pixels)) for item in seq]


def image_cost(spec: ModelSpec) -> Callable[[InImage], int]:
    """Tokens of one received image under ``spec``'s provider formula."""

    def cost(im: InImage) -> int:
        detail = im.detail if im.detail in {"auto", "low", "high", "original"} else "auto"
        return image_tokens(spec, im.width, im.height, detail=detail)

    return cost


async def answer(
    conv: Conversation,
    *,
    wire: WireName,
    model: str,
    settings: Settings,
    too_long: Callable[[int, int], Reject],
    cap: object = None,
) -> Reply:
    """Count the prompt, refuse it with ``too_long(tokens, window)`` if over, else respond.

    ``cap`` is the request's output cap as sent (used when ``settings.max_output_tokens``
    is set). OCR is CPU-bound; it runs in a worker thread so the event loop keeps serving.
    """
    tokens = count_tokens(conv, image_cost(spec_for(wire, model)))
    if tokens > settings.context_tokens:
        raise too_long(tokens, settings.context_tokens)
    wait = requested_wait(conv)
    if wait:
        await asyncio.sleep(wait)
    reply = await run_in_threadpool(
        respond, conv, input_tokens=tokens, json_block=settings.json_block
    )
    return cut(reply, settings.max_output_tokens, cap)


def cut(reply: Reply, limit: int | None, cap: object = None) -> Reply:
    """``reply`` cut off at ``limit`` tokens (or the request's ``cap`` if smaller);
    unchanged when ``limit`` is None or the reply fits. A cut tool call is dropped (its
    arguments would be half a JSON object), as a real model's cut call is unusable.

    Example:
        >>> cut(Reply("abcdefgh", output_tokens=2), 1)
        Reply(text='abcd', tool_calls=(), input_tokens=0, output_tokens=1, truncated=True)
    """
    if limit is None:
        return reply
    if isinstance(cap, int) and not isinstance(cap, bool) and cap > 0:
        limit = min(limit, cap)
    if reply.output_tokens <= limit:
        return reply
    return dataclasses.replace(
        reply, text=reply.text[: limit * 4], tool_calls=(), output_tokens=limit, truncated=True
    )


def now() -> int:
    """Unix seconds, for the ``created`` fields."""
    return int(time.time())
