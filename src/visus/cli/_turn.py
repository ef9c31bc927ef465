"""What a finished turn did, for the terminal: its tool calls and the images it sent.

``visus run`` and ``visus chat`` print these on stderr, so a user sees why an answer
came out as it did (a refused view, an edit that failed) without opening the session,
and the images the agent sends out (``send_image``) are kept instead of dropped.

Example:
    >>> _preview("a  b\\n c", 80)
    'a b c'
"""

from __future__ import annotations

import json
import mimetypes
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from visus.agent import TurnResult
    from visus.agent.tools import OutboundImage

__all__ = ["TRUNCATED_NOTE", "save_images", "tool_lines"]

#: Said after an answer the model cut off at its output limit.
TRUNCATED_NOTE = (
    "  note: the answer was cut off at the model's output limit (max_tokens); ask it to continue"
)

_ARGS_CHARS = 80
_RESULT_CHARS = 100
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _preview(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def tool_lines(result: TurnResult) -> list[str]:
    """One line per tool call of ``result``'s turn: name, arguments and outcome."""
    from visus.record.messages import AssistantMessage, ImagePart, ToolCall, ToolResult

    calls: dict[str, ToolCall] = {}
    lines: list[str] = []
    for m in result.messages:
        if m.turn != result.turn:
            continue
        if isinstance(m, AssistantMessage):
            calls.update((c.id, c) for c in m.tool_calls)
        elif isinstance(m, ToolResult):
            call = calls.get(m.call_id)
            args = json.dumps(dict(call.arguments), ensure_ascii=False) if call else ""
            images = [
                f"{p.width}x{p.height} {p.media_type}" for p in m.parts if isinstance(p, ImagePart)
            ]
            said = _preview(m.text, _RESULT_CHARS)
            outcome = said or ", ".join(images) or "(no output)"
            flag = "error: " if m.is_error and not said.lower().startswith("error") else ""
            lines.append(f"  {m.tool_name} {_preview(args, _ARGS_CHARS)} -> {flag}{outcome}")
    if result.truncated:
        lines.append(TRUNCATED_NOTE)
    return lines


def _file_name(index: int, image: OutboundImage) -> str:
    stem = _UNSAFE.sub("_", Path(image.source).stem).strip("._") if image.source else ""
    ext = mimetypes.guess_extension(image.media_type) or ".bin"
    return f"{index}-{stem or 'image'}{'.jpg' if ext == '.jpe' else ext}"


def save_images(images: Sequence[OutboundImage], folder: Path | None) -> list[str]:
    """Write the turn's outbound images into ``folder`` (when given); lines saying so.

    Raises ``OSError`` when the folder or a file cannot be written.
    """
    lines: list[str] = []
    if folder is not None and images:
        folder.mkdir(parents=True, exist_ok=True)
    for i, image in enumerate(images, 1):
        what = f"{image.source or 'image'} ({image.media_type}, {len(image.data):,} bytes)"
        if folder is None:
            lines.append(f"  sent image {what}; --save-images DIR keeps it")
            continue
        target = folder / _file_name(i, image)
        target.write_bytes(image.data)
        lines.append(f"  sent image {what} -> {target}")
    return lines
