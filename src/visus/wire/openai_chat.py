"""OpenAI Chat Completions (``POST /v1/chat/completions``) request bodies.

Only ``user`` messages may carry images on this wire (and on every
openai-compatible server). A tool message therefore keeps its text plus a stub
naming each image, the tool messages of a run stay adjacent to the assistant message
holding their ``tool_calls``, and right after the last tool message of the run ONE
user message carries the images, each labelled with its call id and source.
PDFs (models with ``spec.pdf``) are ``file`` parts (``file_data`` as a data URL
and a ``filename``), allowed in user messages only, so they are hoisted the same way.

Example:
    >>> from visus.wire import lower
    >>> from visus.record.blobs import MemoryBlobStore
    >>> from visus.record.messages import ModelRequest, UserMessage, TextPart
    >>> from visus.models.spec import ModelSpec
    >>> spec = ModelSpec(name="gpt-x", provider="openai", vision=True)
    >>> req = ModelRequest(messages=(UserMessage((TextPart("hi"),)),), system="Be brief.")
    >>> lower(req, wire="openai-chat", model=spec, blobs=MemoryBlobStore())["messages"]
    [{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': 'hi'}]
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
    arguments_json,
    function_tools,
    media_label,
    media_stub,
)

__all__ = ["ERROR_PREFIX", "HOIST_INTRO", "HOIST_INTRO_FILES", "RULES", "build"]

#: png, jpeg, webp and non-animated gif (OpenAI images-vision guide).
RULES = WireRules(
    media_types=frozenset({"image/png", "image/jpeg", "image/webp", "image/gif"}),
    # Provider bounds (WIRES.md), the same values the reference server enforces.
    max_images=limits.OPENAI_MAX_IMAGES,
    max_image_bytes=limits.OPENAI_MAX_IMAGE_BYTES,
    max_request_image_bytes=limits.OPENAI_MAX_REQUEST_IMAGE_BYTES,
    max_document_bytes=limits.OPENAI_MAX_PDF_BYTES,
    max_document_pages=limits.OPENAI_MAX_PDF_PAGES,
)

#: Chat Completions has no error flag on tool messages; the text says it.
ERROR_PREFIX = "[tool error] "
#: First line of the user message that carries a run's tool images.
HOIST_INTRO = "Images returned by the tool calls above:"
#: The same line when the hoisted parts include documents.
HOIST_INTRO_FILES = "Images and documents returned by the tool calls above:"


def _content_part(part: WirePart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, WireImage):
        return {"type": "image_url", "image_url": {"url": part.data_url}}
    if isinstance(part, WireDocument):
        return {"type": "file", "file": {"filename": part.filename, "file_data": part.data_url}}
    assert_never(part)


def _user(message: WireUser) -> dict[str, Any]:
    parts = message.parts
    if not parts:
        return {"role": "user", "content": ""}
    if len(parts) == 1 and isinstance(parts[0], TextPart):
        return {"role": "user", "content": parts[0].text}
    return {"role": "user", "content": [_content_part(p) for p in parts]}


def _tool_text(message: WireTool) -> str:
    pieces: list[str] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            pieces.append(part.text)
        elif isinstance(part, WireImage | WireDocument):
            pieces.append(("\n" if pieces else "") + media_stub(part))
        else:
            assert_never(part)
    text = "".join(pieces)
    return ERROR_PREFIX + text if message.is_error else text


def _assistant(message: AssistantMessage) -> dict[str, Any]:
    # null content is only valid beside tool_calls
    content = message.text or (None if message.tool_calls else "")
    out: dict[str, Any] = {"role": "assistant", "content": content}
    if message.tool_calls:
        out["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": arguments_json(c.arguments)},
            }
            for c in message.tool_calls
        ]
    return out


def hoisted_images(run: list[WireTool]) -> list[tuple[str, WireMedia]]:
    """Each image (or document) of a run of tool messages with the call id that produced it."""
    return [(m.call_id, item) for m in run for item in m.media]


def build(prepared: Prepared) -> dict[str, Any]:
    """The Chat Completions body for ``prepared``."""
    messages: list[dict[str, Any]] = []
    if prepared.system:
        messages.append({"role": "system", "content": prepared.system})
    run: list[WireTool] = []

    def close_run() -> None:
        images = hoisted_images(run)
        run.clear()
        if not images:
            return
        files = any(isinstance(item, WireDocument) for _, item in images)
        intro = HOIST_INTRO_FILES if files else HOIST_INTRO
        content: list[dict[str, Any]] = [{"type": "text", "text": intro}]
        for call_id, item in images:
            content.append({"type": "text", "text": media_label(call_id, item)})
            content.append(_content_part(item))
        messages.append({"role": "user", "content": content})

    for message in prepared.messages:
        if isinstance(message, WireTool):
            run.append(message)
            messages.append(
                {"role": "tool", "tool_call_id": message.call_id, "content": _tool_text(message)}
            )
            continue
        close_run()
        if isinstance(message, WireUser):
            messages.append(_user(message))
        elif isinstance(message, AssistantMessage):
            messages.append(_assistant(message))
        else:
            assert_never(message)
    close_run()
    body: dict[str, Any] = {"model": prepared.model.name, "messages": messages}
    if prepared.tools:
        body["tools"] = function_tools(prepared.tools)
    return body
