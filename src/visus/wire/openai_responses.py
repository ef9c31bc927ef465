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
    arguments_json,
)
from visus.wire._prepared import plain as _plain

__all__ = ["ERROR_PREFIX", "RULES", "build"]

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


def _item(part: WirePart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "input_text", "text": part.text}
    if isinstance(part, WireImage):
        return {"type": "input_image", "image_url": part.data_url, "detail": "auto"}
    if isinstance(part, WireDocument):
        return {"type": "input_file", "filename": part.filename, "file_data": part.data_url}
    assert_never(part)


def _user(message: WireUser) -> dict[str, Any]:
    parts = message.parts
    if not parts:
        return {"role": "user", "content": ""}
    if len(parts) == 1 and isinstance(parts[0], TextPart):
        return {"role": "user", "content": parts[0].text}
    return {"role": "user", "content": [_item(p) for p in parts]}


def _output(message: WireTool) -> dict[str, Any]:
    prefix = ERROR_PREFIX if message.is_error else ""
    output: str | list[dict[str, Any]]
    if message.media:
        output = [_item(p) for p in message.parts]
        if prefix:
            output.insert(0, {"type": "input_text", "text": prefix.strip()})
    else:
        output = prefix + message.text
    return {"type": "function_call_output", "call_id": message.call_id, "output": output}


def _assistant(message: AssistantMessage) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if message.text:
        items.append({"role": "assistant", "content": message.text})
    items.extend(
        {
            "type": "function_call",
            "call_id": c.id,
            "name": c.name,
            "arguments": arguments_json(c.arguments),
        }
        for c in message.tool_calls
    )
    return items


def build(prepared: Prepared) -> dict[str, Any]:
    """The Responses API body for ``prepared``."""
    items: list[dict[str, Any]] = []
    for message in prepared.messages:
        if isinstance(message, WireUser):
            items.append(_user(message))
        elif isinstance(message, WireTool):
            items.append(_output(message))
        elif isinstance(message, AssistantMessage):
            items.extend(_assistant(message))
        else:
            assert_never(message)
    body: dict[str, Any] = {"model": prepared.model.name, "input": items}
    if prepared.system:
        body["instructions"] = prepared.system
    if prepared.tools:
        body["tools"] = [
            {
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": _plain(t.parameters),
                "strict": False,
            }
            for t in prepared.tools
        ]
    return body
