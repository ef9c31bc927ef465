"""Gemini ``generateContent`` request bodies (REST, camelCase).

Tool results are ``functionResponse`` parts in a user turn. On models that take
images in tool results (Gemini 3: ``spec.images_in_tool_results``) the images ride
inside ``functionResponse.parts``; on older models they follow the run's function
responses as ordinary labelled parts in the same user turn. PDFs (models with
``spec.pdf``) are ``inlineData`` parts with mimeType ``application/pdf`` and go
wherever images go. Roles alternate, so a run of tool results and the user message
after it merge into one user turn. A tool call's ``signature`` (the
``thoughtSignature`` Gemini returned on it) is sent back on its ``functionCall`` part,
which Gemini 3 requires.

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

from typing import Any, assert_never

from visus import limits
from visus.record.messages import AssistantMessage, TextPart
from visus.wire._prepare import WireRules
from visus.wire._prepared import (
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

__all__ = ["RULES", "build"]

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

_EMPTY = {"text": "(empty)"}


def _inline(image: WireMedia) -> dict[str, Any]:
    return {"inlineData": {"mimeType": image.media_type, "data": image.data}}


def _part(part: WirePart) -> dict[str, Any] | None:
    if isinstance(part, TextPart):
        return {"text": part.text} if part.text else None
    if isinstance(part, WireImage | WireDocument):
        return _inline(part)
    assert_never(part)


def _function_response(message: WireTool, native: bool) -> dict[str, Any]:
    pieces: list[str] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            pieces.append(part.text)
        elif isinstance(part, WireImage | WireDocument):
            if not native:
                pieces.append(("\n" if pieces else "") + media_stub(part))
        else:
            assert_never(part)
    text = "".join(pieces)
    response: dict[str, Any] = {
        "id": message.call_id,
        "name": message.tool_name,
        "response": {"error": text} if message.is_error else {"output": text},
    }
    if native and message.media:
        response["parts"] = [_inline(item) for item in message.media]
    return {"functionResponse": response}


def _model(message: AssistantMessage) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"text": p.text} for p in message.parts if p.text]
    for c in message.tool_calls:
        part: dict[str, Any] = {
            "functionCall": {"id": c.id, "name": c.name, "args": plain(c.arguments)}
        }
        if c.signature is not None:
            part["thoughtSignature"] = c.signature
        parts.append(part)
    return parts


def build(prepared: Prepared) -> dict[str, Any]:
    """The ``generateContent`` body for ``prepared`` (the model goes in the URL)."""
    native = prepared.model.images_in_tool_results
    turns: list[tuple[str, list[Any]]] = []
    run: list[WireTool] = []

    def close_run() -> None:
        if not run:
            return
        parts: list[dict[str, Any]] = [_function_response(m, native) for m in run]
        if not native:
            for m in run:
                for item in m.media:
                    parts.append({"text": media_label(m.call_id, item)})
                    parts.append(_inline(item))
        run.clear()
        turns.append(("user", parts))

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
    body: dict[str, Any] = {
        "contents": [
            {"role": role, "parts": parts or [dict(_EMPTY)]} for role, parts in merge_roles(turns)
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
