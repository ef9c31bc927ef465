"""``view`` over MCP: a file as one fitted image under the result cap, and each client
session's recall of what it viewed (``view("sha256:...")``)."""

from __future__ import annotations

import base64
import re
import weakref
from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from mcp.types import CallToolResult, ImageContent, TextContent

from visus import limits
from visus.agent.policy import guarded_reach
from visus.errors import InvalidInputError
from visus.mcp_server.refusals import path_too_long, refusal_result
from visus.media import Region
from visus.models import AnthropicPatches, ModelSpec
from visus.perception import (
    Perception,
    Reach,
    Refusal,
    as_region,
    is_digest_ref,
    view,
    view_digest,
)

__all__ = ["SessionRecall", "view_result"]

#: Bytes kept free in a view result for its text item and the JSON around it.
_VIEW_TEXT_RESERVE = 16 * limits.KB


def _host_model(max_bytes: int) -> ModelSpec:
    # An MCP host forwards images to its own model: fit like Claude's native edge,
    # and in bytes so that base64 plus the text item stay under the result cap; the
    # tokens it states are Claude's for that size (not a flat figure for every image).
    return ModelSpec(
        name="mcp-host",
        provider="reference",
        vision=True,
        max_edge=1568,
        max_pixels=1568 * 1568,
        max_image_bytes=max_bytes,
        tokens=AnthropicPatches(),
    )


#: The hint perception's refusals give for a text file: they name the agent's ``read``
#: tool, which this server does not have.
_READ_HINT = re.compile(r"\s*(?:Call|It is text: call) read\(.*\Z", re.DOTALL)


def _without_read_hint(message: str) -> str:
    """``message`` with a hint to call ``read`` replaced by what holds over MCP.

    Example:
        >>> _without_read_hint("a.txt is text too large to render: 9 MB. Call read('a.txt').")
        'a.txt is text too large to render: 9 MB. It is text: this server has no read tool; open it with a text tool of your own.'
    """  # noqa: E501
    cut = _READ_HINT.sub("", message)
    if cut == message:
        return message
    return f"{cut} It is text: this server has no read tool; open it with a text tool of your own."


@dataclass(frozen=True, slots=True)
class _Look:
    """One view's arguments: where it may look, the host's fit, what part to show."""

    reach: Reach
    model: ModelSpec
    page: int | None
    offset: int | None
    limit: int | None
    region: Region | None

    def at(self, path: str) -> Perception | Refusal:
        return view(
            path,
            reach=self.reach,
            model=self.model,
            page=self.page,
            offset=self.offset,
            limit=self.limit,
            region=self.region,
        )

    def recalled(self, ref: str, memory: MutableMapping[str, bytes]) -> Perception | Refusal:
        """An image this session viewed, by its digest (or a 12+ digit prefix)."""
        return view_digest(
            ref,
            known=list(memory),
            load=memory.__getitem__,
            reach=self.reach,
            model=self.model,
            page=self.page,
            region=self.region,
        )


def _whole(name: str, value: object) -> int | None:
    """``value`` as ``view``'s whole-number argument ``name`` (None: not given).

    Example:
        >>> _whole("page", 2), _whole("page", None)
        (2, None)
        >>> try:
        ...     _whole("page", True)
        ... except InvalidInputError as e:
        ...     print(e)
        page must be a whole number, got True
    """
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    shown = repr(value)  # a hostile host's value can be long: the message stays short
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    raise InvalidInputError(f"{name} must be a whole number, got {shown}")


def _remember(memory: MutableMapping[str, bytes], seen: Perception) -> None:
    """Keep what was shown for ``view("sha256:...")``: the latest last, the oldest
    leaving past ``MCP_VIEW_RECALL_IMAGES``."""
    memory.pop(seen.digest, None)
    memory[seen.digest] = seen.data
    while len(memory) > limits.MCP_VIEW_RECALL_IMAGES:
        del memory[next(iter(memory))]


def view_result(
    path: str,
    *,
    roots: Sequence[Path | str] | Reach,
    page: object = None,
    offset: object = None,
    limit: object = None,
    region: object = None,
    recall: MutableMapping[str, bytes] | None = None,
    max_bytes: int = limits.MCP_MAX_RESULT_BYTES,
) -> CallToolResult:
    """``view`` for MCP: a short description, then the image, under ``max_bytes``.

    ``offset`` (0-based first line) and ``limit`` pick the lines of a text file; the
    description says which lines were shown of how many, so a host can page on.
    ``region`` (``[x0, y0, x1, y1]`` in the source's coordinates, which the description
    states) zooms in. These are whatever the host sent, checked here: a wrong type or
    shape is the same JSON refusal as a page or region outside the source.

    ``roots`` is a :class:`~visus.perception.Reach`, or folders that become one that
    never reaches visus's own files (:func:`~visus.agent.policy.guarded_reach`).

    ``recall`` is what this client session viewed before (digest -> the image sent):
    ``sha256:<hex>`` (or a prefix of 12+ digits) shows one of those again, and
    never an image another session viewed. Each image shown is remembered there.
    """
    budget = (max_bytes - _VIEW_TEXT_RESERVE) * 3 // 4
    reach = roots if isinstance(roots, Reach) else guarded_reach(list(roots))
    memory: MutableMapping[str, bytes] = {} if recall is None else recall
    seen: Perception | Refusal
    if len(path) > limits.MCP_MAX_PATH_CHARS:
        return refusal_result("invalid_input", path_too_long(len(path)), "path")
    try:
        whole = (_whole("page", page), _whole("offset", offset), _whole("limit", limit))
        look = _Look(reach, _host_model(budget), *whole, as_region(region))
    except InvalidInputError as e:
        seen = Refusal("invalid_input", f"Cannot view {path}: {e}", path)
    else:
        seen = look.recalled(path, memory) if is_digest_ref(path) else look.at(path)
    if seen.kind == "refusal":
        return refusal_result(seen.reason, _without_read_hint(seen.message))
    _remember(memory, seen)
    data = base64.b64encode(seen.data).decode("ascii")
    note = _view_note(seen)
    if len(data) + len(note) > max_bytes:  # fit promised less; refuse
        msg = f"Cannot view {path}: the fitted image is still over MCP_MAX_RESULT_BYTES"
        return refusal_result("too_large", msg)
    return CallToolResult(
        content=[
            TextContent(type="text", text=note),
            ImageContent(type="image", data=data, mime_type=seen.media_type),
        ]
    )


def _view_note(seen: Perception) -> str:
    """The text before a view's image: the perception's line (source size, region, what
    was sent, how to zoom), what it costs the host's model (Claude's tokens for the size
    sent: a host sees one result per call, unlike an agent's history re-read every step),
    its bytes and digest, and where a long text goes on."""
    note = f"{seen.describe()}, ~{seen.tokens} tokens; {seen.size} bytes, {seen.tagged_digest}"
    end, total = seen.line_end, seen.line_total
    if end is not None and total is not None and end < total:
        note += f"; offset={end} shows the next lines"
    return note


class SessionRecall:
    """The images each MCP client session viewed, for ``view("sha256:...")``.

    A session is known by its ``initialize`` params (the public
    ``ServerSession.client_params``): the SDK builds a ``ServerSession`` per request
    but keeps the one params object of the handshake on the client's connection for
    its life (stdio: the process; HTTP: one ``Mcp-Session-Id``). Its identity is the
    key, held weakly: a session's images go when its connection does. Without a
    handshake (``None``: a stateless request) nothing is remembered.

    Example:
        >>> from mcp.types import ClientCapabilities, Implementation, InitializeRequestParams
        >>> hello = InitializeRequestParams(
        ...     protocol_version="2025-06-18",
        ...     capabilities=ClientCapabilities(),
        ...     client_info=Implementation(name="host", version="1"),
        ... )
        >>> recall = SessionRecall()
        >>> recall.of(hello)["d"] = b"png"
        >>> recall.of(hello), recall.of(None), len(recall)
        ({'d': b'png'}, {}, 1)
        >>> del hello
        >>> len(recall)
        0
    """

    def __init__(self) -> None:
        self._by_session: dict[int, dict[str, bytes]] = {}

    def __len__(self) -> int:
        return len(self._by_session)

    def of(self, hello: object | None) -> dict[str, bytes]:
        """The images the session that sent ``hello`` viewed (a fresh dict if new)."""
        if hello is None:
            return {}
        key = id(hello)
        memory = self._by_session.get(key)
        if memory is None:
            memory = self._by_session[key] = {}
            # id() is unique while the object lives; forget it when it goes.
            weakref.finalize(hello, self._by_session.pop, key, None)
        return memory
