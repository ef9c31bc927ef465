"""Tools beyond read/view/edit: the session's attachments (list, read, grep, view).

Attachments live per session: under a data folder
(``<data>/sessions/<id>/attachments``), or wherever a function from session id to
:class:`~visus.attachments.SessionAttachments` says (``visus serve`` passes its
store's, so on PostgreSQL every replica reads the same attachments). The tools find
the session from the :class:`~visus.agent.tools.ToolContext`'s session id, so one
registry serves every session of an agent. The full registry ``visus serve`` uses (these plus
vision_analyze / video_analyze, which live above the agent in ``analyze/``) is
assembled by :func:`visus.app.full_registry`.

Example:
    >>> [t.name for t in attachment_tools("/tmp/visus-data")]
    ['list_attachments', 'read_attachment', 'grep_attachment', 'view_attachment']
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from visus.agent.tools import (
    REGION_PARAMETER,
    Tool,
    ToolContext,
    ToolOutcome,
    perception_parts,
)
from visus.attachments import (
    AttachmentStore,
    SessionAttachments,
    grep_attachment,
    list_attachments,
    read_attachment,
    view_attachment,
)
from visus.errors import InvalidInputError
from visus.perception import Refusal, as_region
from visus.record.messages import ToolSpec

__all__ = ["AttachmentsFor", "attachment_tools"]

#: Session id -> that session's attachments (e.g. ``functools.partial(store.attachments,
#: namespace)`` for a :class:`~visus.store.Store`).
AttachmentsFor = Callable[[str], SessionAttachments]


def _int(args: Mapping[str, Any], key: str) -> int | None:
    v = args.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        # Reported to the model as an error result, like the built-in tools do.
        raise InvalidInputError(f"argument {key!r} must be an integer")
    return v


LIST_ATTACHMENTS = ToolSpec(
    "list_attachments",
    "List the files the user attached to this conversation (name, bytes, type).",
    {"type": "object", "properties": {}},
)
READ_ATTACHMENT = ToolSpec(
    "read_attachment",
    "Read an attached text file, paged by lines. Images: use view_attachment.",
    {
        "type": "object",
        "properties": {
            "filename": {"type": "string"},
            "offset": {"type": "integer", "minimum": 0},
            "limit": {"type": "integer", "minimum": 1},
        },
        "required": ["filename"],
    },
)
GREP_ATTACHMENT = ToolSpec(
    "grep_attachment",
    "Search attached files with a regular expression (one file or all).",
    {
        "type": "object",
        "properties": {"pattern": {"type": "string"}, "filename": {"type": "string"}},
        "required": ["pattern"],
    },
)
VIEW_ATTACHMENT = ToolSpec(
    "view_attachment",
    "See an attached file as an image, as view sees a file: photos, screenshots, PDF "
    "pages (page), SVG and text (rendered). The result states the source's size; "
    "region=[x0, y0, x1, y1] in those coordinates zooms in.",
    {
        "type": "object",
        "properties": {
            "filename": {"type": "string"},
            "page": {"type": "integer", "minimum": 1, "description": "PDF page, 1-based"},
            "offset": {"type": "integer", "minimum": 0, "description": "Text: first line"},
            "limit": {"type": "integer", "minimum": 1, "description": "Text: lines"},
            "region": REGION_PARAMETER,
        },
        "required": ["filename"],
    },
)


def attachment_tools(data: Path | str | AttachmentsFor) -> list[Tool]:
    """The four attachment tools over sessions under the data folder ``data``, or over
    the attachments ``data(session_id)`` gives.

    Example:
        >>> import functools, tempfile
        >>> from visus.store import open_store
        >>> store = open_store("", tempfile.mkdtemp())
        >>> tools = attachment_tools(functools.partial(store.attachments, "instances/i-1"))
        >>> len(tools)
        4
    """
    of = functools.partial(_under, Path(data)) if isinstance(data, Path | str) else data
    run = _Handlers(of)
    return [
        Tool(LIST_ATTACHMENTS, run.list, read_only=True),
        Tool(READ_ATTACHMENT, run.read, read_only=True),
        Tool(GREP_ATTACHMENT, run.grep, read_only=True),
        Tool(VIEW_ATTACHMENT, run.view, read_only=True),
    ]


def _under(folder: Path, session_id: str) -> SessionAttachments:
    return AttachmentStore.for_session(folder, session_id)


@dataclass(frozen=True, slots=True)
class _Handlers:
    """The tools' calls, over the attachments of the session a call comes from.

    Each runs off the event loop: on a database store every call is a query, grep waits
    up to its time budget, and a render waits on its worker process.
    """

    of: AttachmentsFor

    async def list(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        del args
        return ToolOutcome.text(await asyncio.to_thread(list_attachments, self.of(ctx.session_id)))

    async def read(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        name = args.get("filename")
        if not isinstance(name, str):
            return ToolOutcome.text("error: filename must be a string", is_error=True)
        offset, limit = _int(args, "offset") or 0, _int(args, "limit")
        text = await asyncio.to_thread(
            read_attachment, self.of(ctx.session_id), name, offset, limit
        )
        return ToolOutcome.text(text)

    async def grep(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        pattern = args.get("pattern")
        name = args.get("filename")
        if not isinstance(pattern, str) or (name is not None and not isinstance(name, str)):
            return ToolOutcome.text("error: pattern (and filename) must be strings", is_error=True)
        store = self.of(ctx.session_id)
        return ToolOutcome.text(await asyncio.to_thread(grep_attachment, store, pattern, name))

    async def view(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        name = args.get("filename")
        if not isinstance(name, str):
            return ToolOutcome.text("error: filename must be a string", is_error=True)
        page = _int(args, "page")
        try:
            region = as_region(args.get("region"))
        except InvalidInputError as e:
            return ToolOutcome.text(f"error: {e}", is_error=True)
        store = self.of(ctx.session_id)
        result = await asyncio.to_thread(
            functools.partial(
                view_attachment,
                store,
                name,
                model=ctx.model,
                render=ctx.reach.render,
                page=page,
                region=region,
                offset=_int(args, "offset"),
                limit=_int(args, "limit"),
            )
        )
        if isinstance(result, Refusal):
            return ToolOutcome.refused(result)
        parts = await asyncio.to_thread(
            perception_parts, result, ctx, source=name, tool="view_attachment", page=page
        )
        return ToolOutcome(parts)
