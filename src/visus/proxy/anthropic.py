"""Anthropic Messages (``POST /v1/messages``): fit, repair and elide images in place.

Images may sit in user messages and inside ``tool_result`` content, so nothing moves:
a fitted image replaces its ``source``, an elided one becomes a text block (keeping
its ``cache_control``), and a ``tool_result`` whose text is stringified media gets
real image blocks. Every other key of the body is left as the client sent it.

A turn starts at each user message that holds no ``tool_result`` and is not an
agent's observation (the user's own words); tool results belong to the turn that
asked for them. What leaves and what is fitted is decided by
:func:`visus.proxy.slots.plan`.

Its replies are read as they pass by :class:`MessagesReply` (the tap is
:class:`visus.proxy.replies.ReplyTap`): the usage (a JSON reply's ``usage``; a stream's
``message_start`` usage, then ``message_delta``'s, whose counts are cumulative) and the
reasoning blocks the upstream dropped (``input_transformations``,
:mod:`visus.proxy.reasoning`).

Example:
    >>> body = {"model": "claude-sonnet-4-6", "messages": [{"role": "user", "content": "hi"}]}
    >>> rewrite(body, policy=None).changed
    False
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from visus.proxy.edit import Edit, Fitted
from visus.proxy.mcp import restore_tool
from visus.proxy.reasoning import bind_claude
from visus.proxy.replies import ReplyUsage, as_count
from visus.proxy.slots import Fate, Found, is_observation, plan, stale_reasoning
from visus.proxy.stringified import ImagePiece, TextPiece, parse
from visus.retention import RetentionPolicy, sealed_reasoning
from visus.wire._thinking import dropped_reasoning
from visus.wire.anthropic import RULES

__all__ = ["MessagesReply", "rewrite"]

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


def _source(f: Fitted) -> dict[str, Any]:
    return {"type": "base64", "media_type": f.media_type, "data": f.b64}


def _apply(blocks: list[Any], index: int, fate: Fate) -> None:
    """Write one image's fate back in place: its fitted bytes, its descriptor (keeping
    the client's ``cache_control`` where it was), or a note and crops (the breakpoint at
    their end)."""
    block = blocks[index]
    mark = {"cache_control": block["cache_control"]} if "cache_control" in block else {}
    if fate.text is not None:
        blocks[index] = {"type": "text", "text": fate.text, **mark}
    elif fate.note is not None:
        new: list[dict[str, Any]] = [{"type": "text", "text": fate.note}]
        new += [{"type": "image", "source": _source(f)} for f in fate.crops]
        new[-1].update(mark)
        blocks[index : index + 1] = new
    elif fate.fitted is not None:
        block["source"] = _source(fate.fitted)


def _reasoning(block: dict[str, Any]) -> int:
    """The reasoning tokens a thinking block replays (0 for any other block): its
    sealed ``signature`` (a redacted block's ``data``) holds the thinking encrypted."""
    kind = block.get("type")
    if kind == "thinking":
        return sealed_reasoning(block.get("signature"))
    return sealed_reasoning(block.get("data")) if kind == "redacted_thinking" else 0


def _starts_turn(message: dict[str, Any]) -> bool:
    """A user message in the user's own words (no tool_result, no agent observation)."""
    content = message.get("content")
    if message.get("role") != "user" or is_observation(content):
        return False
    return not (
        isinstance(content, list)
        and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
    )


@dataclass(slots=True)
class _Walk:
    """What a walk of the messages found: each image (``found``, data) and where it sits
    (``places``), each assistant message's index and the turn it answered (``said``),
    the latest turn."""

    found: list[Found] = field(default_factory=list)
    places: list[tuple[list[Any], int]] = field(default_factory=list)
    said: list[tuple[int, int]] = field(default_factory=list)
    turn: int = 0
    reasoned: int = 0  # replayed since the last image found

    def image(self, blocks: list[Any], index: int, path: str, call: Any, at: int) -> None:
        source = _b64_source(blocks[index])
        media, b64 = source if source is not None else ("", None)
        self.found.append(
            Found(path, self.turn, call, b64, media, at, can_place=True, reasoning=self.reasoned)
        )
        self.places.append((blocks, index))
        self.reasoned = 0


def _walk(messages: list[Any], edit: Edit) -> _Walk:
    """Find the images of ``messages`` in the order the model reads them (repairing
    stringified media in tool results as it goes)."""
    walk = _Walk()
    calls: dict[str, tuple[str, Any]] = {}
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        if _starts_turn(message):
            walk.turn += 1
        if message.get("role") == "assistant":
            walk.said.append((i, walk.turn))
        content = message.get("content")
        blocks: list[Any] = content if isinstance(content, list) else []
        for j, block in enumerate(blocks):
            kind = block.get("type") if isinstance(block, dict) else None
            if kind in _REASONING and message.get("role") == "assistant":
                walk.reasoned += _reasoning(block)
            elif kind == "tool_use" and isinstance(block.get("id"), str):
                calls[block["id"]] = (str(block.get("name", "tool")), block.get("input"))
            elif kind == "image":
                walk.image(blocks, j, f"messages.{i}.content.{j}", None, i)
            elif kind == "tool_result":
                _repair(block, edit)
                inner = block.get("content")  # after _repair: a list, or left as sent
                call = calls.get(str(block.get("tool_use_id")))
                for k, item in enumerate(inner if isinstance(inner, list) else []):
                    if _is_image(item):
                        walk.image(inner, k, f"messages.{i}.content.{j}.content.{k}", call, i)
    return walk


def rewrite(body: dict[str, Any], *, policy: RetentionPolicy | None, **options: Any) -> Edit:
    """Edit ``body`` in place; the returned :class:`Edit` says what changed.

    ``options`` go to :meth:`Edit.for_model` (``live_images``, ``cache``, ``view_tool``).
    """
    options.setdefault("view_tool", restore_tool(body.get("tools")))
    edit = Edit.for_model(body.get("model"), RULES, policy=policy, **options)
    messages = body.get("messages")
    if not isinstance(messages, list):
        return edit
    walk = _walk(messages, edit)
    left_out = 0
    if edit.spec.preserved_thinking:
        for i in sorted(stale_reasoning(edit, walk.found, walk.said)):
            left_out += _leave_out_reasoning(messages[i])
            edit.touched(i, evicted=False)
    fates = plan(edit, walk.found, current=walk.turn)
    # The last first: a note and crops take more than the image's one place.
    for (blocks, index), fate in reversed(list(zip(walk.places, fates, strict=True))):
        _apply(blocks, index, fate)
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


class MessagesReply:
    """What a Messages reply says it cost, and the reasoning the upstream dropped.

    Example:
        >>> reply = MessagesReply()
        >>> reply.read({"type": "message_start", "message": {"model": "claude-x", "usage": {
        ...     "input_tokens": 5, "cache_read_input_tokens": 90,
        ...     "cache_creation_input_tokens": 10, "output_tokens": 1}}})
        >>> reply.read({"type": "message_delta", "usage": {"output_tokens": 42}})
        >>> u = reply.usage
        >>> u.input_tokens, u.cache_read_tokens, u.cache_write_tokens, u.output_tokens
        (105, 90, 10, 42)
    """

    #: The usage and ``input_transformations`` are in ``message_start`` and
    #: ``message_delta`` (whose type values start so; a quote inside a JSON string is
    #: escaped, so text never matches); :meth:`read` picks them by their type.
    marker = b'"message_'

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.seen = False
        self.model: str | None = None
        self.dropped = 0

    def wants(self, event: bytes) -> bool:
        return True

    def read(self, data: dict[str, Any]) -> None:
        kind = data.get("type")
        message = data.get("message") if kind == "message_start" else data
        if not isinstance(message, dict):
            return
        if kind != "message_delta":  # a JSON reply, or a stream's start
            self.dropped += dropped_reasoning(message.get("input_transformations"))
            model = message.get("model")
            self.model = model if isinstance(model, str) else self.model
        usage = message.get("usage")
        if isinstance(usage, dict):
            # message_delta's counts are cumulative: each one replaces the last.
            self.seen = True
            self.counts.update({k: as_count(v) for k, v in usage.items() if v is not None})

    @property
    def usage(self) -> ReplyUsage:
        """The reply's usage, its ``input_tokens`` with the cache's reads and writes."""
        c = self.counts
        read, write = c.get("cache_read_input_tokens", 0), c.get("cache_creation_input_tokens", 0)
        return ReplyUsage(
            input_tokens=c.get("input_tokens", 0) + read + write,
            output_tokens=c.get("output_tokens", 0),
            cache_read_tokens=read,
            cache_write_tokens=write,
            seen=self.seen,
            model=self.model,
        )
