"""OpenAI Responses (``POST /v1/responses``): fit, repair and elide images in place.

This wire takes ``input_image`` both in user messages and inside a
``function_call_output``'s ``output`` list, so nothing is hoisted: a fitted image
replaces its ``image_url``, an elided one becomes an ``input_text``, and a string
``output`` holding stringified media becomes a list of ``input_text`` and
``input_image`` parts.

A turn starts at each input item with ``role: user``.

Its replies are read as they pass by :class:`ResponsesReply`: the usage of a JSON
reply, or of a stream's ``response.completed`` (``response.incomplete``,
``response.failed``) event.

Example:
    >>> rewrite({"model": "gpt-4.1", "input": "hello"}, policy=None).changed
    False
"""

from __future__ import annotations

from typing import Any

from visus.proxy.edit import Edit, data_url, parse_data_url
from visus.proxy.mcp import restore_tool
from visus.proxy.reasoning import Binding, reasoning_after, responses_reasoning
from visus.proxy.replies import ReplyUsage, detailed_usage
from visus.proxy.slots import Fate, Found, is_observation, plan
from visus.proxy.stringified import ImagePiece, TextPiece, parse
from visus.retention import RetentionPolicy, sealed_reasoning
from visus.wire.openai_responses import RULES

__all__ = ["ResponsesReply", "rewrite"]


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


def _apply(parts: list[Any], index: int, fate: Fate) -> None:
    """Write one image's fate back in place: its fitted bytes, its descriptor, or a note
    and crops (at the image's ``detail``)."""
    part = parts[index]
    if fate.text is not None:
        parts[index] = {"type": "input_text", "text": fate.text}
    elif fate.note is not None:
        detail = {"detail": part["detail"]} if part.get("detail") is not None else {}
        new: list[dict[str, Any]] = [{"type": "input_text", "text": fate.note}]
        for f in fate.crops:
            new.append(
                {"type": "input_image", "image_url": data_url(f.media_type, f.b64), **detail}
            )
        parts[index : index + 1] = new
    elif fate.fitted is not None:
        part["image_url"] = data_url(fate.fitted.media_type, fate.fitted.b64)


def _found(
    parts: list[Any], j: int, path: str, turn: int, call: Any, at: int, reasoning: int
) -> Found:
    url = parts[j].get("image_url")
    parsed = parse_data_url(url) if isinstance(url, str) else None
    media, b64 = parsed if parsed is not None else ("", None)
    return Found(path, turn, call, b64, media, at, can_place=True, reasoning=reasoning)


def rewrite(body: dict[str, Any], *, policy: RetentionPolicy | None, **options: Any) -> Edit:
    """Edit ``body`` in place; the returned :class:`Edit` says what changed.

    ``options`` go to :meth:`Edit.for_model` (``live_images``, ``cache``, ``view_tool``).
    """
    options.setdefault("view_tool", restore_tool(body.get("tools")))
    edit = Edit.for_model(body.get("model"), RULES, policy=policy, **options)
    items = body.get("input")
    if not isinstance(items, list):
        return edit
    calls: dict[str, tuple[str, Any]] = {}
    found: list[Found] = []
    places: list[tuple[list[Any], int]] = []  # where each found image sits
    turn = 0
    reasoned = 0  # replayed since the last image found
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        if item.get("role") == "user" and not is_observation(item.get("content")):
            turn += 1
        kind = item.get("type")
        if kind == "reasoning":  # its encrypted_content holds the reasoning (store=False)
            reasoned += sealed_reasoning(item.get("encrypted_content"))
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
                path = f"input[{i}].{key}[{j}]"
                found.append(_found(parts, j, path, turn, call, i, reasoned))
                places.append((parts, j))
                reasoned = 0
    fates = plan(edit, found, current=turn)
    # The last first: a note and crops take more than the image's one place.
    for (parts, index), fate in reversed(list(zip(places, fates, strict=True))):
        _apply(parts, index, fate)
    # The provider discards the reasoning items after a changed point, without an error
    # (OpenAI "preserved reasoning"): counted, nothing to opt into.
    if edit.spec.preserved_thinking:
        after = reasoning_after(responses_reasoning(items), edit.evicted_at)
        edit.binding = Binding(after_edits=after)
    return edit


class ResponsesReply:
    """What a Responses reply says it cost (``input_tokens`` counts the cached ones).

    Example:
        >>> reply = ResponsesReply()
        >>> reply.read({"type": "response.completed", "response": {"model": "gpt-5",
        ...     "usage": {"input_tokens": 100, "output_tokens": 30,
        ...               "input_tokens_details": {"cached_tokens": 64},
        ...               "output_tokens_details": {"reasoning_tokens": 20}}}})
        >>> u = reply.usage
        >>> u.input_tokens, u.cache_read_tokens, u.output_tokens, u.reasoning_tokens, u.model
        (100, 64, 30, 20, 'gpt-5')
    """

    #: The events whose ``response`` holds the final usage.
    _DONE = ("response.completed", "response.incomplete", "response.failed")
    #: ``response.created`` and the final events carry it; :meth:`read` picks by type.
    marker = b'"usage"'

    def __init__(self) -> None:
        self.usage = ReplyUsage()
        self.dropped = 0  # OpenAI drops reasoning without saying (module reasoning)

    def wants(self, event: bytes) -> bool:
        return True

    def read(self, data: dict[str, Any]) -> None:
        kind = data.get("type")
        # A JSON reply is the response itself (it has no ``type``).
        response = data.get("response") if kind in self._DONE else data if kind is None else None
        usage = response.get("usage") if isinstance(response, dict) else None
        if not isinstance(response, dict) or not isinstance(usage, dict):
            return
        self.usage = detailed_usage(usage, response.get("model"), "input_tokens", "output_tokens")
