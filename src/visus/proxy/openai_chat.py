"""OpenAI Chat Completions (``POST /v1/chat/completions``): fit, repair, hoist, elide.

Only ``user`` messages may carry images on this wire; OpenAI answers an image in a
``tool`` message with a 400 and several compatible servers drop it silently. The proxy
applies visus's own lowering rule (:mod:`visus.wire.openai_chat`): a tool message
keeps its text plus a stub naming each image, the tool messages of a run stay
adjacent, and right after the run ONE user message carries the images, introduced by
:data:`~visus.wire.openai_chat.HOIST_INTRO` and each labelled with its call. A tool
message whose text is stringified media (the AI SDK's ``JSON.stringify``) is treated
the same way once its images are recovered.

A turn starts at each ``user`` message that is not an agent's observation; tool
results belong to the turn that asked.

Its replies are read as they pass by :class:`ChatReply`: a JSON reply's ``usage``, or
a stream's last chunk's when the client asked for it (``stream_options.include_usage``;
the proxy never asks on its behalf: a stream without it has no usage to record).

Example:
    >>> body = {"model": "gpt-4.1", "messages": [
    ...     {"role": "assistant", "content": None, "tool_calls": [{"id": "c1",
    ...      "type": "function", "function": {"name": "shot", "arguments": "{}"}}]},
    ...     {"role": "tool", "tool_call_id": "c1", "content": "no image here"}]}
    >>> rewrite(body, policy=None).changed
    False
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from visus.proxy.edit import Edit, Fitted, call_text, data_url, parse_data_url
from visus.proxy.mcp import restore_tool
from visus.proxy.replies import ReplyUsage, detailed_usage
from visus.proxy.slots import Fate, Found, is_observation, plan
from visus.proxy.stringified import ImagePiece, TextPiece, parse
from visus.retention import RetentionPolicy
from visus.wire.openai_chat import HOIST_INTRO, RULES

__all__ = ["ChatReply", "rewrite"]


@dataclass(slots=True)
class _Image:
    """One image of a tool message (to hoist) or of a user message (stays in place)."""

    path: str
    turn: int
    call_id: str
    call: tuple[str, Any] | None
    order: tuple[int, int]
    media_type: str = ""
    b64: str = ""
    url: str | None = None  # a non-data URL: hoisted as it is, never fitted
    detail: Any = None
    width: int | None = None
    height: int | None = None
    stale_text: str | None = None
    #: Only what changed: the note and crops sent in the image's place.
    cut: tuple[str, list[Fitted]] | None = None

    def part(self) -> dict[str, Any]:
        url = self.url if self.url is not None else data_url(self.media_type, self.b64)
        return _url_part(url, self.detail)

    def what(self) -> str:
        dims = f", {self.width}x{self.height}" if self.width and self.height else ""
        name = call_text(*self.call) if self.call else "tool result"
        return f"{name}{dims}"

    def take(self, fate: Fate) -> None:
        """What :func:`~visus.proxy.slots.plan` decided for it (written out in pass 2)."""
        if fate.text is not None:
            self.stale_text = fate.text
        elif fate.note is not None:
            self.cut = (fate.note, list(fate.crops))
        elif fate.fitted is not None:
            self.media_type, self.b64 = fate.fitted.media_type, fate.fitted.b64
            self.width, self.height = fate.fitted.width, fate.fitted.height

    def parts(self) -> list[dict[str, Any]]:
        """What the hoisted user message carries for this image: it, or its note and crops."""
        if self.cut is None:
            return [self.part()]
        note, crops = self.cut
        return [_text(note)] + [
            _url_part(data_url(f.media_type, f.b64), self.detail) for f in crops
        ]

    def found(self) -> Found:
        b64 = self.b64 if self.url is None else None
        call = self.call if self.call_id else None
        # Only a tool's image may go as crops: it is hoisted, where a note can precede them.
        return Found(self.path, self.turn, call, b64, self.media_type, can_place=bool(self.call_id))


@dataclass(slots=True)
class _Tool:
    texts: list[str] = field(default_factory=list)
    images: list[_Image] = field(default_factory=list)


def _tool_pieces(
    content: Any, i: int, turn: int, call_id: str, call: tuple[str, Any] | None, edit: Edit
) -> _Tool | None:
    """A tool message's text and images, or None when it holds no image at all."""
    parts: list[Any] = content if isinstance(content, list) else [content]
    tool = _Tool()
    for j, part in enumerate(parts):
        text = part if isinstance(part, str) else None
        if isinstance(part, dict) and part.get("type") == "text":
            text = part.get("text") if isinstance(part.get("text"), str) else None
        if text is not None:
            pieces = parse(text)
            if pieces is None:
                tool.texts.append(text)
                continue
            for piece in pieces:
                if isinstance(piece, TextPiece):
                    tool.texts.append(piece.text)
                elif isinstance(piece, ImagePiece):
                    edit.repaired += 1
                    path = f"messages[{i}].content (image {len(tool.images) + 1})"
                    order = (i, len(tool.images))
                    image = _Image(path, turn, call_id, call, order, piece.media_type, piece.b64)
                    tool.images.append(image)
            continue
        if isinstance(part, dict) and part.get("type") == "image_url":
            inner = part.get("image_url")
            url = inner.get("url") if isinstance(inner, dict) else inner
            detail = inner.get("detail") if isinstance(inner, dict) else None
            if not isinstance(url, str):
                return None  # not an image we understand: leave the message alone
            path = f"messages[{i}].content[{j}]"
            image = _Image(path, turn, call_id, call, (i, len(tool.images)), detail=detail)
            parsed = parse_data_url(url)
            if parsed is None:
                image.url = url
            else:
                image.media_type, image.b64 = parsed
            tool.images.append(image)
            continue
        return None  # a part kind we do not know: pass the message through untouched
    return tool if tool.images else None


def _size(edit: Edit, image: _Image) -> None:
    if image.url is None and image.width is None:
        size = edit.size_of(image.b64)
        if size is not None:
            image.width, image.height = size


def rewrite(body: dict[str, Any], *, policy: RetentionPolicy | None, **options: Any) -> Edit:
    """Edit ``body`` in place (``messages`` may be rebuilt); the :class:`Edit` says what changed.

    ``options`` go to :meth:`Edit.for_model` (``live_images``, ``cache``, ``view_tool``).
    """
    options.setdefault("view_tool", restore_tool(body.get("tools")))
    edit = Edit.for_model(body.get("model"), RULES, policy=policy, **options)
    messages = body.get("messages")
    if not isinstance(messages, list):
        return edit
    calls, turns = _calls_and_turns(messages)
    # Pass 1: find every image, decide which leave the window, fit the rest.
    tools, user_images = _find(messages, turns, calls, edit)
    everything = [im for t in tools.values() for im in t.images] + [im for *_, im in user_images]
    everything.sort(key=lambda im: im.order)  # the order the model reads them: oldest first
    fates = plan(edit, [im.found() for im in everything], current=turns[-1] if turns else 0)
    for image, fate in zip(everything, fates, strict=True):
        image.take(fate)
    for image in everything:
        if image.stale_text is None:
            _size(edit, image)
    if not tools and not edit.changed:
        return edit
    # Pass 2: write the images back; hoist tool images after their run.
    for content, j, image in user_images:
        content[j] = image.part() if image.stale_text is None else _text(image.stale_text)
    hoist = _Hoist(edit)
    for i, message in enumerate(messages):
        hoist.add(i, message, tools.get(i))
    hoist.close_run()
    body["messages"] = hoist.out
    edit.relocate(hoist.relocated)
    return edit


def _calls_and_turns(messages: list[Any]) -> tuple[dict[str, tuple[str, Any]], list[int]]:
    """Every tool call by id (its name and arguments), and each message's turn number."""
    calls: dict[str, tuple[str, Any]] = {}
    turns: list[int] = []
    turn = 0
    for message in messages:
        if isinstance(message, dict):
            if message.get("role") == "user" and not is_observation(message.get("content")):
                turn += 1
            for call in message.get("tool_calls") or []:
                fn = call.get("function") if isinstance(call, dict) else None
                if isinstance(fn, dict) and isinstance(call.get("id"), str):
                    calls[call["id"]] = (str(fn.get("name", "tool")), fn.get("arguments"))
        turns.append(turn)
    return calls, turns


def _find(
    messages: list[Any], turns: list[int], calls: dict[str, tuple[str, Any]], edit: Edit
) -> tuple[dict[int, _Tool], list[tuple[list[Any], int, _Image]]]:
    """The tool messages holding images (by index) and the images of user messages."""
    tools: dict[int, _Tool] = {}
    user_images: list[tuple[list[Any], int, _Image]] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        role, content = message.get("role"), message.get("content")
        if role == "tool":
            call_id = str(message.get("tool_call_id", ""))
            tool = _tool_pieces(content, i, turns[i], call_id, calls.get(call_id), edit)
            if tool is not None:
                tools[i] = tool
        elif role == "user" and isinstance(content, list):
            user_images += [(content, j, im) for j, im in _user_images(content, i, turns[i])]
    return tools, user_images


def _user_images(content: list[Any], i: int, turn: int) -> Iterator[tuple[int, _Image]]:
    """The ``data:`` images of user message ``i`` (URLs stay as they are, uncounted)."""
    for j, part in enumerate(content):
        inner = part.get("image_url") if isinstance(part, dict) else None
        url = inner.get("url") if isinstance(inner, dict) else inner
        parsed = parse_data_url(url) if isinstance(url, str) else None
        if parsed is None:
            continue
        image = _Image(f"messages[{i}].content[{j}]", turn, "", None, (i, j), *parsed)
        if isinstance(inner, dict):
            image.detail = inner.get("detail")
        yield j, image


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _url_part(url: str, detail: Any) -> dict[str, Any]:
    inner: dict[str, Any] = {"url": url}
    if detail is not None:
        inner["detail"] = detail
    return {"type": "image_url", "image_url": inner}


class _Hoist:
    """Pass 2's new message list: each tool message's images move to one user message
    right after its run of tool messages; ``relocated`` maps old image paths to new."""

    def __init__(self, edit: Edit) -> None:
        self.edit = edit
        self.out: list[Any] = []
        self.relocated: dict[str, str] = {}
        self.run: list[_Image] = []

    def add(self, i: int, message: Any, tool: _Tool | None) -> None:
        if not (isinstance(message, dict) and message.get("role") == "tool"):
            self.close_run()
            if isinstance(message, dict) and message.get("role") == "user":
                for k, item in enumerate(message.get("content") or []):
                    if isinstance(item, dict) and item.get("type") == "image_url":
                        old, new = f"messages[{i}].content[{k}]", f"messages[{len(self.out)}]"
                        self.relocated[old] = f"{new}.content[{k}]"
            self.out.append(message)
            return
        if tool is None:
            self.out.append(message)
            return
        lines = list(tool.texts)
        for image in tool.images:
            if image.stale_text is not None:
                lines.append(image.stale_text)
            else:
                lines.append(
                    f"[image: {image.what()}; shown in the user message after these tool results]"
                )
                self.run.append(image)
        self.out.append({**message, "content": "\n".join(lines)})

    def close_run(self) -> None:
        """The user message carrying the images of the tool messages just added."""
        if not self.run:
            return
        hoisted: list[Any] = [_text(HOIST_INTRO)]
        for image in self.run:
            hoisted.append(_text(f"[image from tool call {image.call_id}: {image.what()}]"))
            self.relocated[image.path] = f"messages[{len(self.out)}].content[{len(hoisted)}]"
            hoisted.extend(image.parts())
        self.edit.hoisted += len(self.run)
        self.out.append({"role": "user", "content": hoisted})
        self.run.clear()


class ChatReply:
    """What a Chat Completions reply says it cost (``prompt_tokens`` counts the cached ones).

    Example:
        >>> reply = ChatReply()
        >>> reply.wants(b'data: {"choices": [], "usage": null}')
        False
        >>> reply.read({"model": "gpt-4.1", "choices": [], "usage": {"prompt_tokens": 2000,
        ...     "completion_tokens": 9, "prompt_tokens_details": {"cached_tokens": 1024}}})
        >>> reply.usage.input_tokens, reply.usage.cache_read_tokens, reply.usage.output_tokens
        (2000, 1024, 9)
    """

    marker = b'"usage"'
    #: Every chunk of a stream that asked for usage says ``"usage": null`` but the last.
    _USAGE = re.compile(rb'"usage"\s*:\s*\{')

    def __init__(self) -> None:
        self.usage = ReplyUsage()
        self.dropped = 0  # OpenAI drops reasoning without saying (module reasoning)

    def wants(self, event: bytes) -> bool:
        return self._USAGE.search(event) is not None

    def read(self, data: dict[str, Any]) -> None:
        usage = data.get("usage")
        if not isinstance(usage, dict):
            return
        self.usage = detailed_usage(usage, data.get("model"), "prompt_tokens", "completion_tokens")
