"""Anthropic Messages (``POST /v1/messages``): fit, repair and elide images in place.

Images may sit in user messages and inside ``tool_result`` content, so nothing moves:
a fitted image replaces its ``source``, an elided one becomes a text block (keeping
its ``cache_control``), and a ``tool_result`` whose text is stringified media gets
real image blocks. Every other key of the body is left as the client sent it.

A turn starts at each user message that holds no ``tool_result`` and is not an
agent's observation (the user's own words); tool results belong to the turn that
asked for them. What leaves and what is fitted is decided by
:func:`visus.proxy.slots.plan`.

Example:
    >>> body = {"model": "claude-sonnet-4-6", "messages": [{"role": "user", "content": "hi"}]}
    >>> rewrite(body, policy=None).changed
    False
"""

from __future__ import annotations

from typing import Any

from visus.proxy.edit import Edit, Fitted
from visus.proxy.mcp import restore_tool
from visus.proxy.reasoning import bind_claude
from visus.proxy.slots import Found, is_observation, plan, stale_reasoning
from visus.proxy.stringified import ImagePiece, TextPiece, parse
from visus.retention import RetentionPolicy
from visus.wire.anthropic import RULES

__all__ = ["rewrite"]

_REASONING = frozenset({"thinking", "redacted_thinking"})


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


def _dropper(blocks: list[Any], index: int) -> Any:
    def drop(text: str) -> None:
        replacement: dict[str, Any] = {"type": "text", "text": text}
        if "cache_control" in blocks[index]:  # the client's breakpoint stays where it was
            replacement["cache_control"] = blocks[index]["cache_control"]
        blocks[index] = replacement

    return drop


def _placer(blocks: list[Any], index: int) -> Any:
    def place(note: str, crops: list[Fitted]) -> None:
        new: list[dict[str, Any]] = [{"type": "text", "text": note}]
        for f in crops:
            source = {"type": "base64", "media_type": f.media_type, "data": f.b64}
            new.append({"type": "image", "source": source})
        if "cache_control" in blocks[index]:  # the client's breakpoint stays at its end
            new[-1]["cache_control"] = blocks[index]["cache_control"]
        blocks[index : index + 1] = new

    return place


def _found(blocks: list[Any], index: int, path: str, turn: int, call: Any, at: int) -> Found:
    block = blocks[index]
    source = _b64_source(block)
    media, b64 = source if source is not None else ("", None)
    return Found(
        path,
        turn,
        call,
        b64,
        media,
        _writer(block),
        _dropper(blocks, index),
        _placer(blocks, index),
        at,
    )


def _starts_turn(message: dict[str, Any]) -> bool:
    """A user message in the user's own words (no tool_result, no agent observation)."""
    content = message.get("content")
    if message.get("role") != "user" or is_observation(content):
        return False
    return not (
        isinstance(content, list)
        and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
    )


def rewrite(body: dict[str, Any], *, policy: RetentionPolicy | None, **options: Any) -> Edit:
    """Edit ``body`` in place; the returned :class:`Edit` says what changed.

    ``options`` go to :meth:`Edit.for_model` (``live_images``, ``cache``, ``view_tool``).
    """
    options.setdefault("view_tool", restore_tool(body.get("tools")))
    edit = Edit.for_model(body.get("model"), RULES, policy=policy, **options)
    messages = body.get("messages")
    if not isinstance(messages, list):
        return edit
    calls: dict[str, tuple[str, Any]] = {}
    found: list[Found] = []
    said: list[tuple[int, int]] = []
    turn = 0
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        if _starts_turn(message):
            turn += 1
        if message.get("role") == "assistant":
            said.append((i, turn))
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for j, block in enumerate(content):
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "tool_use" and isinstance(block.get("id"), str):
                calls[block["id"]] = (str(block.get("name", "tool")), block.get("input"))
            elif kind == "image":
                found.append(_found(content, j, f"messages.{i}.content.{j}", turn, None, i))
            elif kind == "tool_result":
                _repair(block, edit)
                inner = block.get("content")
                call = calls.get(str(block.get("tool_use_id")))
                if isinstance(inner, list):
                    for k, item in enumerate(inner):
                        if _is_image(item):
                            path = f"messages.{i}.content.{j}.content.{k}"
                            found.append(_found(inner, k, path, turn, call, i))
    left_out = 0
    if edit.spec.preserved_thinking:
        for i in sorted(stale_reasoning(edit, found, said)):
            left_out += _leave_out_reasoning(messages[i])
            edit.touched(i, evicted=False)
    plan(edit, found, current=turn)
    edit.binding = bind_claude(
        body, edit.spec, edited_at=edit.edited_at, evicted_at=edit.evicted_at, left_out=left_out
    )
    return edit


def _leave_out_reasoning(message: dict[str, Any]) -> int:
    """Take the thinking blocks out of an assistant message (how many), unless they are
    all it holds (an empty message is refused: the provider drops them instead)."""
    content = message.get("content")
    if not isinstance(content, list):
        return 0
    kept = [b for b in content if not (isinstance(b, dict) and b.get("type") in _REASONING)]
    if not kept or len(kept) == len(content):
        return 0
    message["content"] = kept
    return len(content) - len(kept)
