"""Anthropic Messages API (``POST /v1/messages``) request bodies.

Images and PDF documents (``document`` blocks, on models with ``spec.pdf``) ride
natively everywhere the API allows them: in user turns and inside ``tool_result``
content. Tool results are user-role content, so a run of tool
results and the user message after it merge into one user turn (the API requires
alternating roles), ``tool_result`` blocks first.

Example:
    >>> from visus.wire import lower
    >>> from visus.record.blobs import MemoryBlobStore
    >>> from visus.record.messages import ModelRequest, UserMessage, TextPart
    >>> from visus.models.spec import ModelSpec
    >>> spec = ModelSpec(name="claude-x", provider="anthropic", vision=True)
    >>> req = ModelRequest(messages=(UserMessage((TextPart("hi"),)),), max_tokens=64)
    >>> lower(req, wire="anthropic", model=spec, blobs=MemoryBlobStore())["messages"]
    [{'role': 'user', 'content': [{'type': 'text', 'text': 'hi'}]}]
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
    WirePart,
    WireTool,
    WireUser,
    merge_roles,
    plain,
)

__all__ = ["RULES", "build"]

#: Image block media types (anthropic-sdk-python ``base64_image_source_param.py``).
RULES = WireRules(
    media_types=frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"}),
    # The per-image byte cap is on the base64 text (5 MB on Bedrock and Vertex).
    base64_byte_limit=True,
    many_images_rule=True,
    # Provider bounds (WIRES.md), the same values the reference server enforces.
    max_images=limits.ANTHROPIC_MAX_IMAGES,
    max_edge=limits.ANTHROPIC_MAX_EDGE,
    max_image_bytes=limits.ANTHROPIC_MAX_IMAGE_B64,
    max_request_image_bytes=limits.ANTHROPIC_MAX_REQUEST_IMAGE_B64,
    # PDFs: 32 MB per request, 100 pages (600 on contexts over 200k tokens).
    max_document_bytes=limits.ANTHROPIC_MAX_PDF_B64,
    max_document_pages=limits.ANTHROPIC_MAX_PDF_PAGES,
    max_document_pages_large_context=limits.ANTHROPIC_MAX_PDF_PAGES_LARGE_CONTEXT,
    documents_share_budget=True,
)

_EMPTY = {"type": "text", "text": "(empty)"}


def _block(part: WirePart) -> dict[str, Any] | None:
    if isinstance(part, TextPart):
        # The API refuses text blocks without non-whitespace text; such a part says nothing.
        return {"type": "text", "text": part.text} if part.text.strip() else None
    if isinstance(part, WireImage):
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": part.media_type, "data": part.data},
        }
    if isinstance(part, WireDocument):
        return {
            "type": "document",
            "source": {"type": "base64", "media_type": part.media_type, "data": part.data},
            "title": part.filename,
        }
    assert_never(part)


def _blocks(parts: tuple[WirePart, ...]) -> list[dict[str, Any]]:
    return [b for b in map(_block, parts) if b is not None]


def _tool_result(message: WireTool) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.call_id}
    content = _blocks(message.parts)
    if content:
        block["content"] = content
    if message.is_error:
        block["is_error"] = True
    return block


def _assistant(message: AssistantMessage) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = [
        {"type": "text", "text": p.text} for p in message.parts if p.text.strip()
    ]
    blocks.extend(
        {"type": "tool_use", "id": c.id, "name": c.name, "input": plain(c.arguments)}
        for c in message.tool_calls
    )
    return blocks


def build(prepared: Prepared) -> dict[str, Any]:
    """The Messages API body for ``prepared``."""
    turns: list[tuple[str, list[Any]]] = []
    for message in prepared.messages:
        if isinstance(message, WireUser):
            turns.append(("user", _blocks(message.parts)))
        elif isinstance(message, WireTool):
            turns.append(("user", [_tool_result(message)]))
        elif isinstance(message, AssistantMessage):
            turns.append(("assistant", _assistant(message)))
        else:
            assert_never(message)
    body: dict[str, Any] = {"model": prepared.model.name, "max_tokens": prepared.max_tokens}
    if prepared.system:
        body["system"] = prepared.system
    body["messages"] = [
        {"role": role, "content": blocks or [dict(_EMPTY)]} for role, blocks in merge_roles(turns)
    ]
    if prepared.tools:
        body["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": plain(t.parameters)}
            for t in prepared.tools
        ]
    return body
