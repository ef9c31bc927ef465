"""What a tool call does, in the words a progress line shows: the CLI's spinner and the
web chat's working bubble say the same thing (``viewing report.pdf page 4``).

Example:
    >>> tool_phase("view", {"path": "report.pdf", "page": 4})
    'viewing report.pdf page 4'
    >>> tool_phase("docs__search", {"q": "x"})
    'running docs__search'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["tool_phase"]

_VERBS = {
    "view": "viewing",
    "read": "reading",
    "edit": "editing",
    "send_image": "sending",
    "view_attachment": "viewing attachment",
    "read_attachment": "reading attachment",
}
_MAX_TARGET = 80


def _target(arguments: Mapping[str, Any]) -> str:
    target = arguments.get("path") or arguments.get("filename") or ""
    text = str(target)
    return text if len(text) <= _MAX_TARGET else "…" + text[-(_MAX_TARGET - 1) :]


def tool_phase(name: str, arguments: Mapping[str, Any]) -> str:
    """``name`` called with ``arguments``, as a short phrase."""
    if name == "list_attachments":
        return "listing the attachments"
    if name == "grep_attachment":
        return f"searching the attachments for {str(arguments.get('pattern', ''))[:40]!r}"
    verb = _VERBS.get(name)
    target = _target(arguments)
    if verb is None or not target:
        return f"running {name}"
    phrase = f"{verb} {target}"
    page = arguments.get("page")
    if isinstance(page, int) and not isinstance(page, bool):
        phrase += f" page {page}"
    if arguments.get("region") is not None:
        phrase += " (a region)"
    return phrase
