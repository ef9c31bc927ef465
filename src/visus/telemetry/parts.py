"""Record values as trace attributes: images by reference, never their bytes.

An image is named by its digest (``sha256:<hex>``, the reference ``view`` takes back),
in the conventions' ``uri`` part when messages are captured; text is captured only
when the operator turns content on (:func:`visus.telemetry.traces.configure`).

Example:
    >>> from visus.record.messages import ImagePart, PerceptionOrigin, UserMessage, TextPart
    >>> shot = ImagePart("ab" * 32, "image/png", 10, 4, 3, PerceptionOrigin("a.png"))
    >>> message_json(UserMessage((TextPart("look"), shot)), content=False)["parts"][1]["uri"]
    'sha256:abababababababababababababababababababababababababababababababab'
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from visus.record.messages import (
    AssistantMessage,
    DocumentPart,
    ImagePart,
    Message,
    Part,
    PerceptionOrigin,
    ToolResult,
)
from visus.telemetry import names

__all__ = [
    "image_ref",
    "message_json",
    "messages_attribute",
    "output_attribute",
    "retention",
    "stop_name",
    "view_attributes",
]

AttrValue = str | int | bool | float | list[str] | list[int]
Attributes = dict[str, AttrValue]
#: Tokens an image of (width, height) costs the model it is sent to.
TokenCount = Callable[[int, int], int]


def image_ref(digest: str) -> str:
    """The reference an image is named by in traces (the one ``view`` takes back)."""
    return f"sha256:{digest}"


def _part(part: Part, content: bool) -> dict[str, Any]:
    if isinstance(part, ImagePart | DocumentPart):
        modality = "image" if isinstance(part, ImagePart) else "document"
        ref = image_ref(part.digest)
        return {"type": "uri", "modality": modality, "mime_type": part.media_type, "uri": ref}
    return {"type": "text", "content": part.text if content else ""}


def message_json(message: Message, *, content: bool) -> dict[str, Any]:
    """One message in the conventions' shape (``gen-ai-input-messages.json``): text only
    with ``content``, images and documents always as ``uri`` parts by digest."""
    if isinstance(message, AssistantMessage):
        parts: list[dict[str, Any]] = [_part(p, content) for p in message.parts]
        parts += [
            {
                "type": "tool_call",
                "id": c.id,
                "name": c.name,
                "arguments": dict(c.arguments) if content else None,
            }
            for c in message.tool_calls
        ]
        return {"role": "assistant", "parts": parts}
    if isinstance(message, ToolResult):
        result = [_part(p, content) for p in message.parts]
        return {
            "role": "tool",
            "parts": [{"type": "tool_call_response", "id": message.call_id, "response": result}],
        }
    return {"role": "user", "parts": [_part(p, content) for p in message.parts]}


#: visus's stop reasons as the conventions' finish reasons.
_FINISH = {"end_turn": "stop", "tool_use": "tool_call", "max_tokens": "length"}


def stop_name(stop: str) -> str:
    """The conventions' name for why a model stopped (``content_filter`` is both's)."""
    return _FINISH.get(stop, stop)


def messages_attribute(messages: Sequence[Message], *, content: bool) -> str:
    """``gen_ai.input.messages`` as the JSON string an attribute holds."""
    shaped = [message_json(m, content=content) for m in messages]
    return json.dumps(shaped, ensure_ascii=False, separators=(",", ":"), default=str)


def output_attribute(reply: AssistantMessage, *, content: bool) -> str:
    """``gen_ai.output.messages``: the reply, with its finish reason."""
    shaped = message_json(reply, content=content)
    shaped["finish_reason"] = stop_name(reply.stop_reason or "end_turn")
    return json.dumps([shaped], ensure_ascii=False, separators=(",", ":"), default=str)


def retention(history: Sequence[Message], view: Sequence[Message]) -> Attributes:
    """What a request keeps of the record's images, what left it as a descriptor
    (evicted) and what went as a note naming an equal live image (deduplicated), each a
    list of references. ``view`` is ``history`` as retention shows it (part for part)."""
    kept: list[str] = []
    gone: list[str] = []
    for before, after in zip(history, view, strict=False):
        if before is after or len(before.parts) != len(after.parts):
            kept += [image_ref(p.digest) for p in after.parts if isinstance(p, ImagePart)]
            continue
        for old, new in zip(before.parts, after.parts, strict=True):
            if isinstance(new, ImagePart):
                kept.append(image_ref(new.digest))
            elif isinstance(old, ImagePart):
                gone.append(image_ref(old.digest))
    live = set(kept)
    return {
        names.KEPT: kept,
        names.EVICTED: [r for r in gone if r not in live],
        names.DEDUPLICATED: [r for r in gone if r in live],
    }


def view_attributes(parts: Sequence[Part], tokens: TokenCount | None) -> Attributes:
    """A view's result: where it came from, the region and page, what was sent (size,
    digest, tokens for the model). The first image of the result speaks for it."""
    image = next((p for p in parts if isinstance(p, ImagePart)), None)
    if image is None:
        return {}
    found: Attributes = {
        names.VIEW_DIGEST: image_ref(image.digest),
        names.VIEW_MEDIA_TYPE: image.media_type,
        names.VIEW_BYTES: image.size,
        names.VIEW_WIDTH: image.width,
        names.VIEW_HEIGHT: image.height,
    }
    if tokens is not None:
        found[names.VIEW_TOKENS] = tokens(image.width, image.height)
    origin = image.origin
    if isinstance(origin, PerceptionOrigin):
        found[names.VIEW_SOURCE] = origin.source
        if origin.page is not None:
            found[names.VIEW_PAGE] = origin.page
        if origin.region is not None:
            found[names.VIEW_REGION] = list(origin.region)
    return found
