"""Anthropic Messages (``POST /v1/messages``): fit, repair and elide images in place.

Images may sit in user messages and inside ``tool_result`` content, so nothing moves:
a fitted image replaces its ``source``, an elided one becomes a text block (keeping
its ``cache_control``), and a ``tool_result`` whose text is stringified media gets
real image blocks. Every other key of the body is left as the client sent it.

A turn starts at each user message that holds no ``tool_result`` (the user's own
words); tool results belong to the turn that asked for them.

Example:
    >>> body = {"model": "claude-sonnet-4-6", "messages": [{"role": "user", "content": "hi"}]}
    >>> rewrite(body, policy=None).changed
    False
"""

from __future__ import annotations

from typing import Any

from visus.proxy.edit import Edit, Fitted
from visus.proxy.slots import Slot, fit_all
from visus.proxy.stringified import ImagePiece, TextPiece, parse
from visus.retention import RetentionPolicy
from visus.wire.anthropic import RULES

__all__ = ["rewrite"]


def _is_image(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") == "image"


def _b64_source(block: dict[str, Any]) -> tuple[str, str] | None:
    source = block.get("source")
    if isinstance(source, dict) and source.get("type") == "base64":
        data, media = source.get("data"), source.get("media_type")
        if isinstance(data, str) and isinstance(media, str):
            return media, data
    return None


def _repair(result: dict[str, Any], edit: Edit) -> None:
    """Stringified media in a tool_result's text becomes image blocks."""
    content = result.get("content")
    blocks: list[Any]
    if isinstance(content, str):
        blocks = [{"type": "text", "text": content}]
    elif isinstance(content, list):
        blocks = content
    else:
        return
    out: list[Any] = []
    repaired = 0
    for block in blocks:
        text = (
            block.get("text") if isinstance(block, dict) and block.get("type") == "text" else None
        )
        pieces = parse(text) if isinstance(text, str) else None
        if pieces is None:
            out.append(block)
            continue
        for piece in pieces:
            if isinstance(piece, TextPiece):
                out.append({"type": "text", "text": piece.text})
            elif isinstance(piece, ImagePiece):
                repaired += 1
                out.append(
                    {
                        "type": "image",
                        "source": {
                            "type": "base64",
                            "media_type": piece.media_type,
                            "data": piece.b64,
                        },
                    }
                )
    if repaired:
        result["content"] = out
        edit.repaired += repaired


def _writer(block: dict[str, Any]) -> Any:
    def write(f: Fitted) -> None:
        block["source"] = {"type": "base64", "media_type": f.media_type, "data": f.b64}

    return write


def rewrite(body: dict[str, Any], *, policy: RetentionPolicy | None) -> Edit:
    """Edit ``body`` in place; the returned :class:`Edit` says what changed."""
    edit = Edit.for_model(body.get("model"), RULES, image_count=0, policy=policy)
    messages = body.get("messages")
    if not isinstance(messages, list):
        return edit
    calls: dict[str, tuple[str, Any]] = {}
    # (blocks, index, path, turn, call) for every image block, in order.
    found: list[tuple[list[Any], int, str, int, tuple[str, Any] | None]] = []
    turn = 0
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("content"), list):
            if isinstance(message, dict) and message.get("role") == "user":
                turn += 1
            continue
        content: list[Any] = message["content"]
        results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
        if message.get("role") == "user" and not results:
            turn += 1
        for j, block in enumerate(content):
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "tool_use" and isinstance(block.get("id"), str):
                calls[block["id"]] = (str(block.get("name", "tool")), block.get("input"))
            elif kind == "image":
                found.append((content, j, f"messages.{i}.content.{j}", turn, None))
            elif kind == "tool_result":
                _repair(block, edit)
                inner = block.get("content")
                call = calls.get(str(block.get("tool_use_id")))
                if isinstance(inner, list):
                    for k, item in enumerate(inner):
                        if _is_image(item):
                            path = f"messages.{i}.content.{j}.content.{k}"
                            found.append((inner, k, path, turn, call))
    current = turn
    slots: list[Slot] = []
    count = 0
    for blocks, index, path, image_turn, call in found:
        block = blocks[index]
        source = _b64_source(block)
        if edit.is_stale(image_turn, current):
            text = edit.elide(source[1] if source else None, image_turn, call)
            replacement: dict[str, Any] = {"type": "text", "text": text}
            if "cache_control" in block:
                replacement["cache_control"] = block["cache_control"]
            blocks[index] = replacement
            continue
        count += 1  # URL images count toward the many-image rule too
        if source is not None:
            slots.append(Slot(path, source[0], source[1], _writer(block)))
    fit_all(edit, RULES, slots, count=count)
    return edit
