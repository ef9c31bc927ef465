"""Every tool result within the host's cap: ``tether_read``'s frames and their images.

A host (Claude Desktop, Claude Code) takes about 1 MB per tool result. A poll answer
becomes JSON text with each image stubbed as ``{"_mcp_index": N}``, then the image
items; frames that do not fit are deferred to the next read, and a first frame too
big alone has its images fitted and its text cut (:func:`read_result`).
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass
from typing import Any

from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, ImageContent, TextContent

from visus import limits
from visus.errors import ConfigError, VisusError
from visus.tether.frames import base64_size, padded
from visus.tether.limits import check_image, check_image_count, check_media_type

__all__ = ["max_result_bytes", "read_result"]

#: Bytes of every tool result kept for the JSON-RPC envelope around its content.
_RESULT_ENVELOPE = 2 * limits.KB
#: Bytes one image item takes besides its data: {"type":"image","data":"","mimeType":""}.
_ITEM_OVERHEAD = 64
#: Least base64 an image fitted into a crowded result may take; below it the image is
#: refused with a note rather than sent as a smudge.
_MIN_FITTED_B64 = 8 * limits.KB
#: Edge an image fitted for the MCP channel keeps at most (Claude's native edge).
_HOST_EDGE = 1568
_OMITTED = "the caller's own image; tether_read with include_user_images=true returns it"


def max_result_bytes(value: int | None = None) -> int:
    """The cap on every MCP tool result: ``value``, else ``$VISUS_MCP_MAX_RESULT_BYTES``,
    else ``limits.MCP_MAX_RESULT_BYTES`` (1 MB: what Claude Desktop and Claude Code take).

    Example:
        >>> max_result_bytes(512 * 1024)
        524288
    """
    if value is None:
        raw = os.environ.get("VISUS_MCP_MAX_RESULT_BYTES", "").strip()
        if not raw:
            return limits.MCP_MAX_RESULT_BYTES
        if not raw.isdigit():
            raise ConfigError(f"VISUS_MCP_MAX_RESULT_BYTES: not a number of bytes: {raw!r}")
        value = int(raw)
    if value < limits.MCP_MIN_RESULT_BYTES:
        raise ConfigError(
            f"MCP max result bytes: {value} is under {limits.MCP_MIN_RESULT_BYTES} "
            "(MCP_MIN_RESULT_BYTES)"
        )
    return value


def _escaped(value: object) -> int:
    """Bytes ``value`` takes as JSON inside the text item (a JSON string: escaped again)."""
    text = json.dumps(value, separators=(",", ":"))
    return len(json.dumps(text, ensure_ascii=False).encode()) - 2


@dataclass
class _Pending:
    """One checked image of a frame, waiting for its ``_mcp_index``."""

    stub: dict[str, Any]
    media_type: str
    data: str  # base64, padded

    @property
    def cost(self) -> int:
        return len(self.data) + len(self.media_type) + _ITEM_OVERHEAD


def _frame_images(
    frame: dict[str, Any], include_user_images: bool
) -> tuple[dict[str, Any], list[_Pending]]:
    """``frame`` with its images as stubs, and the images that pass every check."""
    payload = frame.get("payload")
    if not isinstance(payload, dict) or not isinstance(payload.get("images"), list):
        return frame, []
    stubs: list[dict[str, Any]] = []
    pending: list[_Pending] = []
    own = frame.get("type") == "user.message" and not include_user_images
    total = 0
    for i, image in enumerate(payload["images"]):
        name = f"frames[seq={frame.get('seq')}].payload.images[{i}]"
        try:
            check_image_count(i + 1, name)
            if not isinstance(image, dict):
                raise ToolError(f"{name}: not an image object")
            media_type = check_media_type(image.get("media_type"), f"{name}.media_type")
            size = base64_size(image.get("data"), f"{name}.data")  # checked, not decoded
            check_image(size, name)
            total += size
            if total > limits.TETHER_MAX_FRAME_IMAGE_BYTES:
                raise ToolError(f"{name}: over TETHER_MAX_FRAME_IMAGE_BYTES for the frame")
        except (VisusError, ToolError) as e:
            stubs.append({"_mcp_error": str(e)})
            continue
        if own:
            stubs.append({"media_type": media_type, "_mcp_omitted": _OMITTED})
            continue
        stub: dict[str, Any] = {"_mcp_index": 0}
        stubs.append(stub)
        pending.append(_Pending(stub, media_type, padded(image["data"])))
    return {**frame, "payload": {**payload, "images": stubs}}, pending


def _cut_text(frame: dict[str, Any], room: int) -> dict[str, Any]:
    """``frame`` with its payload text cut so that it takes about ``room`` bytes."""
    payload = frame.get("payload")
    key = next((k for k in ("text", "message") if isinstance(payload, dict) and k in payload), "")
    if not key or not isinstance(payload, dict) or not isinstance(payload[key], str):
        return frame
    text: str = payload[key]
    keep = len(text)
    out = frame
    while keep > 0 and _escaped(out) > room:
        keep = keep * max(room, 1) // _escaped(out) * 9 // 10
        out = {**frame, "payload": {**payload, key: text[:keep]}, "truncated": True}
    return out


def _fit_images(pending: list[_Pending], room: int) -> list[_Pending]:
    """Images of one frame fitted so that together they take at most ``room`` bytes; one
    that cannot be gets an ``_mcp_error`` stub instead of an item."""
    from visus.media import Profile, fit

    kept: list[_Pending] = []
    for k, item in enumerate(pending):
        share = (room - sum(p.cost for p in kept)) // (len(pending) - k)
        if item.cost <= share:
            kept.append(item)
            continue
        b64_room = share - len(item.media_type) - _ITEM_OVERHEAD - 128  # the "fitted" note
        if b64_room < _MIN_FITTED_B64:
            item.stub.clear()
            item.stub["_mcp_error"] = "image too large for one MCP result (MCP_MAX_RESULT_BYTES)"
            continue
        raw = base64.b64decode(item.data)
        profile = Profile(_HOST_EDGE, _HOST_EDGE * _HOST_EDGE, b64_room * 3 // 4)
        try:
            fitted = fit(raw, profile)
        except VisusError as e:
            item.stub.clear()
            item.stub["_mcp_error"] = f"image could not be fitted for MCP: {e}"
            continue
        item.stub["fitted"] = {
            "width": fitted.width,
            "height": fitted.height,
            "from_bytes": len(raw),
        }
        item.media_type = fitted.media_type
        item.data = base64.b64encode(fitted.data).decode("ascii")
        kept.append(item)
    return kept


def _numbered(frame: dict[str, Any], pending: list[_Pending], first: int) -> int:
    """Number the images of ``frame`` from ``first`` (their ``_mcp_index``); the bytes
    the frame and its images take in the result."""
    for k, item in enumerate(pending):
        item.stub["_mcp_index"] = first + k
    return _escaped(frame) + 1 + sum(p.cost for p in pending)


def _squeezed(
    frame: dict[str, Any], pending: list[_Pending], room: int
) -> tuple[dict[str, Any], list[_Pending]]:
    """A first frame too big alone, made to fit ``room``: its text cut (to a quarter of
    the room when it has images), its images fitted into what is left."""
    out = _cut_text(frame, room // 4 if pending else room)
    return out, _fit_images(pending, room - _escaped(out) - 256)


def read_result(
    answer: dict[str, Any],
    *,
    max_bytes: int = limits.MCP_MAX_RESULT_BYTES,
    include_user_images: bool = False,
) -> CallToolResult:
    """Turn a poll answer into MCP content: JSON text with ``_mcp_index`` stubs, then images,
    all of it within ``max_bytes``.

    Consumer-side checks run again on every image: one that is malformed or past a
    limit becomes ``{"_mcp_error": "..."}`` in the JSON and gets no image item.
    ``user.message`` images (the caller's own) are ``{"_mcp_omitted": ...}`` unless
    ``include_user_images``.

    Frames that do not fit whole are left for the next read (as are those the tether
    server held back: its ``more``): the answer then says ``"deferred": true`` and its
    ``next_seq`` is where to read on. A first
    frame too big alone has its images fitted for the channel (stub ``"fitted"``:
    the size sent) and, if need be, its text cut (frame ``"truncated": true``); the
    answer then says ``"truncated": true``.

    Example:
        >>> r = read_result({"frames": [], "next_seq": 0, "gap": False})
        >>> r.content[0].text
        '{"next_seq":0,"gap":false,"frames":[]}'
    """
    budget = max_bytes - _RESULT_ENVELOPE
    head = {k: v for k, v in answer.items() if k not in ("frames", "more")}
    used = _escaped({**head, "frames": []}) + 64  # room for the markers below
    frames: list[dict[str, Any]] = []
    images: list[ImageContent] = []
    truncated = False
    deferred = bool(answer.get("more"))  # the tether server held frames back already
    next_seq = answer.get("next_seq")
    for frame in answer.get("frames", []):
        out, pending = _frame_images(frame, include_user_images)
        cost = _numbered(out, pending, len(images))
        if used + cost > budget:
            if frames:  # leave it (and what follows) for the next read
                deferred = True
                next_seq = frames[-1].get("seq", next_seq)
                break
            truncated = True
            out, pending = _squeezed(out, pending, budget - used)
            cost = _numbered(out, pending, len(images))
        used += cost
        frames.append(out)
        images.extend(
            ImageContent(type="image", data=p.data, mime_type=p.media_type) for p in pending
        )
    body = {**head, "frames": frames, "next_seq": next_seq}
    if truncated:
        body["truncated"] = True
    if deferred:
        body["deferred"] = True
    text = TextContent(type="text", text=json.dumps(body, separators=(",", ":")))
    return CallToolResult(content=[text, *images])
