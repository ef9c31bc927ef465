"""OpenAI Responses (``POST /v1/responses``): fit, repair and elide images in place.

This wire takes ``input_image`` both in user messages and inside a
``function_call_output``'s ``output`` list, so nothing is hoisted: a fitted image
replaces its ``image_url``, an elided one becomes an ``input_text``, and a string
``output`` holding stringified media becomes a list of ``input_text`` and
``input_image`` parts.

A turn starts at each input item with ``role: user``.

Example:
    >>> rewrite({"model": "gpt-4.1", "input": "hello"}, policy=None).changed
    False
"""

from __future__ import annotations

from typing import Any

from visus.proxy.edit import Edit, Fitted, data_url, parse_data_url
from visus.proxy.slots import Slot, fit_all
from visus.proxy.stringified import ImagePiece, TextPiece, parse
from visus.retention import RetentionPolicy
from visus.wire.openai_responses import RULES

__all__ = ["rewrite"]


def _repair(item: dict[str, Any], edit: Edit) -> None:
    output = item.get("output")
    parts: list[Any]
    if isinstance(output, str):
        parts = [{"type": "input_text", "text": output}]
    elif isinstance(output, list):
        parts = output
    else:
        return
    out: list[Any] = []
    repaired = 0
    for part in parts:
        is_text = isinstance(part, dict) and part.get("type") in {"input_text", "output_text"}
        text = part.get("text") if is_text else None
        pieces = parse(text) if isinstance(text, str) else None
        if pieces is None:
            out.append(part)
            continue
        for piece in pieces:
            if isinstance(piece, TextPiece):
                out.append({"type": "input_text", "text": piece.text})
            elif isinstance(piece, ImagePiece):
                repaired += 1
                out.append(
                    {"type": "input_image", "image_url": data_url(piece.media_type, piece.b64)}
                )
    if repaired:
        item["output"] = out
        edit.repaired += repaired


def _writer(part: dict[str, Any]) -> Any:
    def write(f: Fitted) -> None:
        part["image_url"] = data_url(f.media_type, f.b64)

    return write


def rewrite(body: dict[str, Any], *, policy: RetentionPolicy | None) -> Edit:
    """Edit ``body`` in place; the returned :class:`Edit` says what changed."""
    edit = Edit.for_model(body.get("model"), RULES, image_count=0, policy=policy)
    items = body.get("input")
    if not isinstance(items, list):
        return edit
    calls: dict[str, tuple[str, Any]] = {}
    found: list[tuple[list[Any], int, str, int, tuple[str, Any] | None]] = []
    turn = 0
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        if item.get("role") == "user":
            turn += 1
        kind = item.get("type")
        if kind == "function_call" and isinstance(item.get("call_id"), str):
            calls[item["call_id"]] = (str(item.get("name", "tool")), item.get("arguments"))
        parts, key, call = item.get("content"), "content", None
        if kind == "function_call_output":
            _repair(item, edit)
            parts, key = item.get("output"), "output"
            call = calls.get(str(item.get("call_id")))
        if not isinstance(parts, list):
            continue
        for j, part in enumerate(parts):
            if isinstance(part, dict) and part.get("type") == "input_image":
                found.append((parts, j, f"input[{i}].{key}[{j}]", turn, call))
    slots: list[Slot] = []
    count = 0
    for parts, j, path, image_turn, call in found:
        part = parts[j]
        url = part.get("image_url")
        parsed = parse_data_url(url) if isinstance(url, str) else None
        if edit.is_stale(image_turn, turn):
            text = edit.elide(parsed[1] if parsed else None, image_turn, call)
            parts[j] = {"type": "input_text", "text": text}
            continue
        count += 1
        if parsed is not None:
            slots.append(Slot(path, parsed[0], parsed[1], _writer(part)))
    fit_all(edit, RULES, slots, count=count)
    return edit
