"""Turn a tool result's JSON-stringified media back into images.

Some clients serialise a tool's image into the tool message as text:
``@ai-sdk/openai-compatible`` sends ``JSON.stringify`` of the tool output (``[{"type":
"media", "data": "iVBOR…", "mediaType": "image/png"}]``), and hand-written agents do
the same with an MCP result or a provider's own image block. The model then reads
base64 as text: it cannot see the image and the context fills up. :func:`parse`
recognises those shapes and splits the text into text pieces and images.

A text that is nothing but one base64 image ``data:`` URL is an image too. Shapes
recognised (anywhere in a list, or under ``value``/``content``):
AI SDK ``media`` / ``image-data`` / ``file-data`` (``data`` + ``mediaType``), MCP and
AI SDK v4 ``image`` (``data`` + ``mimeType``), Anthropic ``image`` (``source`` base64),
OpenAI ``image_url`` (``{"url": data-URL}`` or the URL itself) and ``input_image``.

Example:
    >>> pieces = parse('[{"type":"text","text":"shot"},'
    ...                '{"type":"media","data":"iVBORw0KGgo=","mediaType":"image/png"}]')
    >>> [type(p).__name__ for p in pieces]
    ['TextPiece', 'ImagePiece']
    >>> parse('{"ok": true}') is None
    True
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, TypeAlias

from visus.proxy.edit import parse_data_url

__all__ = ["ImagePiece", "Piece", "TextPiece", "parse"]


@dataclass(frozen=True, slots=True)
class TextPiece:
    text: str


@dataclass(frozen=True, slots=True)
class ImagePiece:
    media_type: str
    b64: str


Piece: TypeAlias = TextPiece | ImagePiece

_TEXT_TYPES = frozenset({"text", "input_text", "output_text"})
_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")


def _image(item: dict[str, Any]) -> ImagePiece | None:
    kind = item.get("type")
    data = item.get("data")
    media = item.get("mediaType") or item.get("mimeType") or item.get("media_type")
    if kind in {"media", "image-data", "file-data", "image"} and isinstance(data, str):
        if isinstance(media, str) and media.startswith("image/"):
            return ImagePiece(media, data)
        return None
    source = item.get("source")
    if kind == "image" and isinstance(source, dict) and source.get("type") == "base64":
        data, media = source.get("data"), source.get("media_type")
        if isinstance(data, str) and isinstance(media, str):
            return ImagePiece(media, data)
    if kind in {"image_url", "input_image"}:
        url = item.get("image_url")
        if isinstance(url, dict):
            url = url.get("url")
        parsed = parse_data_url(url) if isinstance(url, str) else None
        if parsed is not None:
            return ImagePiece(*parsed)
    return None


def _walk(value: Any, out: list[Piece]) -> bool:
    """Append ``value``'s pieces to ``out``; True if any image was found."""
    if isinstance(value, list):
        found = False
        for item in value:
            found = _walk(item, out) or found
        return found
    if isinstance(value, dict):
        image = _image(value)
        if image is not None:
            out.append(image)
            return True
        if value.get("type") in _TEXT_TYPES and isinstance(value.get("text"), str):
            out.append(TextPiece(value["text"]))
            return False
        for key in ("value", "content"):
            inner = value.get(key)
            if isinstance(inner, list | dict) and _has_image(inner):
                return _walk(inner, out)
    out.append(TextPiece(json.dumps(value, ensure_ascii=False)))
    return False


def _has_image(value: Any) -> bool:
    probe: list[Piece] = []
    return _walk(value, probe)


def parse(text: str) -> list[Piece] | None:
    """The pieces of a stringified tool result, or None if it holds no image."""
    stripped = text.strip()
    if stripped.startswith("data:image/"):
        # A tool that returns its image as one data URL (a hand-written agent's
        # f"data:image/png;base64,{b64}"); a URL inside other text stays text, since
        # that text may be a document the model edits (HTML with inline images).
        parsed = parse_data_url(stripped)
        return [ImagePiece(*parsed)] if parsed and _BASE64.fullmatch(parsed[1]) else None
    if not stripped or stripped[0] not in "[{" or "data" not in stripped:
        return None
    try:
        value = json.loads(stripped)
        out: list[Piece] = []
        if not _walk(value, out):
            return None
    except (ValueError, RecursionError):  # not JSON, or nested deeper than Python parses
        return None
    # Adjacent text pieces read better as one.
    merged: list[Piece] = []
    for piece in out:
        if isinstance(piece, TextPiece) and merged and isinstance(merged[-1], TextPiece):
            merged[-1] = TextPiece(merged[-1].text + "\n" + piece.text)
        else:
            merged.append(piece)
    return merged
