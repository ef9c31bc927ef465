"""The visus MCP server (official ``mcp`` SDK): tether in and out, and ``view``.

Tools:

- ``tether_send(instance, text, images?, session_id?)``: a ``user.message`` to an
  instance; every limit is checked before anything is sent.
- ``tether_read(instance, session_id?, after_seq?, wait_ms?, include_user_images?)``:
  the first content item is text holding the poll answer as JSON, each image
  replaced by ``{"_mcp_index": N}``; then one image item per image, in order across
  frames, so a caller ties every image to its frame and ``msg_id``. The agent's
  images only, unless ``include_user_images``; the result stays under the cap
  (:func:`read_result`: frames deferred, an image too big alone fitted).
- ``tether_instances()``: the instances the tether server holds.
- ``view(path, page?, offset?, limit?)``: the file as an image fitted so that the
  whole result stays under ``limits.MCP_MAX_RESULT_BYTES`` (``offset``/``limit``
  page through a long text file's lines); ``sha256:<hex>`` shows again an image
  this client session viewed (never another session's).
- ``vision_analyze(prompt, file_path? | file_url? | file_base64?, ...)``: one
  question to a vision model (:func:`visus.analyze.vision_analyze`).

The server talks to a tether server through :class:`~visus.tether.client.TetherClient`
(over HTTP, or in-process when mounted with :func:`mount_mcp`). ``visus mcp`` runs
it over stdio.

Example:
    >>> from visus.tether.client import TetherClient
    >>> server = build_server(TetherClient("http://127.0.0.1:8750"))
    >>> server.name
    'visus'
"""

from __future__ import annotations

import base64
import inspect
import json
import os
import re
import weakref
from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, ImageContent, TextContent
from pydantic import BaseModel, Field
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from visus import limits
from visus.agent.policy import guarded_reach
from visus.errors import ConfigError, VisusError
from visus.perception import Reach
from visus.tether import limits as tether_limits
from visus.tether.client import TetherHTTPError
from visus.tether.frames import base64_size, decode_base64, padded
from visus.tether.guard import IN_PROCESS_HOST
from visus.tether.limits import check_image, check_image_count, check_images, check_media_type
from visus.tether.runner import ImageIn

if TYPE_CHECKING:
    from fastapi import FastAPI

    from visus.config import VisusConfig
    from visus.perception import Perception
    from visus.tether.client import TetherClient

_F = TypeVar("_F", bound=Callable[..., Any])

__all__ = [
    "McpBodyGate",
    "McpImage",
    "SessionRecall",
    "build_server",
    "max_result_bytes",
    "mount_mcp",
    "read_result",
    "view_result",
]

#: Bytes kept free in a view result for its text item and the JSON around it.
_VIEW_TEXT_RESERVE = 16 * limits.KB


class McpImage(BaseModel):
    """An image argument: standard base64 (no data-URI prefix) and its media type."""

    media_type: str = Field(description="image/png, image/jpeg, image/gif or image/webp")
    data: str = Field(description="standard base64 of the image bytes (RFC 4648)")


def _decode_args(images: Sequence[McpImage]) -> list[ImageIn]:
    check_image_count(len(images), "images")
    out: list[ImageIn] = []
    for i, image in enumerate(images):
        check_media_type(image.media_type, f"images[{i}].media_type")
        out.append(ImageIn(image.media_type, decode_base64(image.data, f"images[{i}].data")))
    check_images(out, "images")
    return out


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
        for k, item in enumerate(pending):
            item.stub["_mcp_index"] = len(images) + k
        cost = _escaped(out) + 1 + sum(p.cost for p in pending)
        if used + cost > budget:
            if frames:  # leave it (and what follows) for the next read
                deferred = True
                next_seq = frames[-1].get("seq", next_seq)
                break
            truncated = True
            out = _cut_text(out, (budget - used) // 4 if pending else budget - used)
            pending = _fit_images(pending, budget - used - _escaped(out) - 256)
            for k, item in enumerate(pending):
                item.stub["_mcp_index"] = len(images) + k
            cost = _escaped(out) + 1 + sum(p.cost for p in pending)
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


def _host_model(max_bytes: int) -> Any:
    from visus.models import ModelSpec

    # An MCP host forwards images to its own model: fit like Claude's native edge,
    # and in bytes so that base64 plus the text item stay under the result cap.
    return ModelSpec(
        name="mcp-host",
        provider="reference",
        vision=True,
        max_edge=1568,
        max_pixels=1568 * 1568,
        max_image_bytes=max_bytes,
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


def view_result(
    path: str,
    *,
    roots: Sequence[Path | str] | Reach,
    page: int | None = None,
    offset: int | None = None,
    limit: int | None = None,
    region: list[int] | None = None,
    recall: MutableMapping[str, bytes] | None = None,
    max_bytes: int = limits.MCP_MAX_RESULT_BYTES,
) -> CallToolResult:
    """``view`` for MCP: a short description, then the image, under ``max_bytes``.

    ``offset`` (0-based first line) and ``limit`` pick the lines of a text file; the
    description says which lines were shown of how many, so a host can page on.
    ``region`` (``[x0, y0, x1, y1]`` in the source's coordinates, which the description
    states) zooms in.

    ``roots`` is a :class:`~visus.perception.Reach`, or folders that become one that
    never reaches visus's own files (:func:`~visus.agent.policy.guarded_reach`).

    ``recall`` is what this client session viewed before (digest -> the image sent):
    ``sha256:<hex>`` (or a prefix of 12+ digits) shows one of those again, and
    never an image another session viewed. Each image shown is remembered there.
    """
    from visus.perception import is_digest_ref, view, view_digest

    budget = (max_bytes - _VIEW_TEXT_RESERVE) * 3 // 4
    reach = roots if isinstance(roots, Reach) else guarded_reach(list(roots))
    model = _host_model(budget)
    memory: MutableMapping[str, bytes] = {} if recall is None else recall
    if is_digest_ref(path):
        seen = view_digest(
            path,
            known=list(memory),
            load=memory.__getitem__,
            reach=reach,
            model=model,
            page=page,
            region=region,
        )
    else:
        seen = view(
            path, reach=reach, model=model, page=page, offset=offset, limit=limit, region=region
        )
    if seen.kind != "refusal":
        memory.pop(seen.digest, None)  # most recent last: the oldest leaves first
        memory[seen.digest] = seen.data
        while len(memory) > limits.MCP_VIEW_RECALL_IMAGES:
            del memory[next(iter(memory))]
    if seen.kind == "refusal":
        refusal = seen.to_json()
        refusal["message"] = _without_read_hint(refusal["message"])
        return CallToolResult(
            content=[TextContent(type="text", text=json.dumps(refusal))], is_error=True
        )
    data = base64.b64encode(seen.data).decode("ascii")
    note = _view_note(seen)
    if len(data) + len(note) > max_bytes:  # fit promised less; refuse
        msg = f"{path}: fitted image is still over MCP_MAX_RESULT_BYTES"
        return CallToolResult(content=[TextContent(type="text", text=msg)], is_error=True)
    return CallToolResult(
        content=[
            TextContent(type="text", text=note),
            ImageContent(type="image", data=data, mime_type=seen.media_type),
        ]
    )


def _view_note(seen: Perception) -> str:
    """The text before a view's image: the perception's line (source size, region, what
    was sent, how to zoom), its bytes and digest, and where a long text goes on."""
    note = f"{seen.describe()}; {seen.size} bytes, {seen.tagged_digest}"
    end, total = seen.line_end, seen.line_total
    if end is not None and total is not None and end < total:
        note += f"; offset={end} shows the next lines"
    return note


def _plain_doc(fn: _F) -> _F:
    """The SDK sends a tool's docstring as its description as it is, indentation and
    line breaks included; hosts show it to the model. One line per paragraph instead."""
    text = inspect.cleandoc(fn.__doc__ or "")
    fn.__doc__ = re.sub(r"(?<!\n)\n(?!\n)", " ", text)
    return fn


def _tether_error(e: VisusError, client: TetherClient) -> ToolError:
    """A tether call's failure for the host; no server at all says how to start one."""
    if isinstance(e, TetherHTTPError) and e.status == 0:
        return ToolError(
            f"no visus server answers at {client.base_url}: start one with `visus serve` "
            "(or give `visus mcp --url` the address of yours). view works without one."
        )
    return ToolError(str(e))


#: Frame types that end a turn: tether_read's until_done waits for one of these.
_TURN_ENDS = frozenset({"assistant.done", "error"})


async def _read_until_done(
    client: TetherClient, instance: str, after_seq: int, session: str | None, wait: float, cap: int
) -> dict[str, Any]:
    """Poll from ``after_seq`` until a frame ends a turn (or ``wait`` runs out), then
    answer every frame since ``after_seq`` (under ``cap``: a host reads on from
    ``next_seq`` if they do not all fit)."""
    deadline = anyio.current_time() + wait
    cursor = after_seq
    while True:
        left = max(0.0, deadline - anyio.current_time())
        answer = await client.poll_raw(instance, cursor, session=session, wait=left, max_bytes=cap)
        frames = answer.get("frames") or []
        if any(f.get("type") in _TURN_ENDS for f in frames) or left <= 0:
            break
        cursor = int(answer.get("next_seq", cursor))
    return await client.poll_raw(instance, after_seq, session=session, max_bytes=cap)


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


def build_server(
    client: TetherClient,
    *,
    roots: Sequence[Path | str] | Reach | None = None,
    name: str = "visus",
    analyze_config: VisusConfig | None = None,
    result_bytes: int | None = None,
) -> MCPServer:
    """An MCP server whose tether tools go through ``client``; ``view`` and
    ``vision_analyze`` see ``roots`` (a :class:`~visus.perception.Reach`, or folders;
    default: the current directory), never visus's own files.
    ``analyze_config`` is the configuration ``vision_analyze`` resolves its model
    with (default: ``load_config()`` at call time). Every tool result stays within
    ``result_bytes`` (default: :func:`max_result_bytes`)."""
    view_roots = roots if isinstance(roots, Reach) else guarded_reach(list(roots or [Path.cwd()]))
    cap = max_result_bytes(result_bytes)
    server = MCPServer(
        name,
        # The SDK configures the root logger at this level; INFO would log every
        # HTTP request the tools make.
        log_level="WARNING",
        instructions=(
            "visus gives agents eyes. tether_send sends text and images to an agent "
            "instance; tether_read returns its frames with images as image content "
            '({"_mcp_index": N} in the JSON points at the Nth image item); view shows '
            "a file (image, pdf, svg, text) as an image."
        ),
    )

    # The tools answering a JSON string say structured_output=False: else the SDK
    # declares an outputSchema {"result": string} and sends the same JSON a second
    # time, as a string inside structuredContent (twice the bytes against the host's
    # cap, and a string, not an object, for clients that read structuredContent).
    @server.tool(structured_output=False)
    @_plain_doc
    async def tether_send(
        instance: Annotated[str, Field(description="instance id")],
        text: Annotated[str, Field(description="message text; may be empty with images")],
        images: Annotated[
            list[McpImage] | None, Field(description="at most 4 images, 10 MB each, 20 MB total")
        ] = None,
        session_id: Annotated[str | None, Field(description="session; default 'default'")] = None,
    ) -> str:
        """Send a user message (text and optional images) to an agent instance of a
        running `visus serve`. Then call tether_read with after_seq set to the seq this
        answers, until a frame of type assistant.done (or error) arrives."""
        try:
            decoded = _decode_args(images or [])
            sent = await client.send(instance, text, decoded, session=session_id)
        except VisusError as e:
            raise _tether_error(e, client) from e
        return json.dumps(sent)

    @server.tool()
    @_plain_doc
    async def tether_read(
        instance: Annotated[str, Field(description="instance id")],
        session_id: Annotated[str | None, Field(description="only this session")] = None,
        after_seq: Annotated[int, Field(ge=0, description="next_seq of the last read")] = 0,
        wait_ms: Annotated[
            int,
            Field(
                ge=0,
                description="wait this long for a frame (with until_done: for the turn's end)",
            ),
        ] = 0,
        include_user_images: Annotated[
            bool, Field(description="also return the images of user.message frames")
        ] = False,
        until_done: Annotated[
            bool,
            Field(description="wait (up to wait_ms) until a frame of type assistant.done or error"),
        ] = False,
    ) -> CallToolResult:
        """Read the frames after after_seq (pass the seq tether_send returned to skip your
        own message). An answer comes as assistant.delta frames and ends with a frame of
        type assistant.done (or error): call again with after_seq=next_seq until that
        frame arrives, or pass until_done=true with wait_ms to have this call wait for it.

        The agent's images come as image items, each stubbed in the JSON as
        {"_mcp_index": N}. "deferred": true means more frames wait at next_seq (a result
        stays under the host's size limit); an image too big alone is fitted (its stub
        says "fitted")."""
        wait = min(wait_ms / 1000, limits.TETHER_POLL_MAX_WAIT_SECONDS)
        try:
            if until_done:
                answer = await _read_until_done(client, instance, after_seq, session_id, wait, cap)
            else:
                answer = await client.poll_raw(
                    instance, after_seq, session=session_id, wait=wait, max_bytes=cap
                )
        except VisusError as e:
            raise _tether_error(e, client) from e
        # Fitting an oversized image decodes it: off the event loop.
        return await anyio.to_thread.run_sync(
            lambda: read_result(answer, max_bytes=cap, include_user_images=include_user_images)
        )

    @server.tool(structured_output=False)
    @_plain_doc
    async def tether_instances() -> str:
        """The agent instances of the running `visus serve` (id, model, tools, roots);
        the web chat's is i-webchat."""
        try:
            return json.dumps(await client.list_instances())
        except VisusError as e:
            raise _tether_error(e, client) from e

    recalled = SessionRecall()

    @server.tool()
    @_plain_doc
    async def view(
        path: Annotated[
            str,
            Field(description="file under the allowed roots, or sha256:<hex> of an earlier view"),
        ],
        ctx: Context,
        # Bounds in the schema only: visus's own check answers a JSON refusal a host can
        # read, where the SDK's would be a raw validation error.
        page: Annotated[
            int | None, Field(description="pdf page, 1-based", json_schema_extra={"minimum": 1})
        ] = None,
        offset: Annotated[
            int | None,
            Field(
                description="text files: the first line to show, 0-based",
                json_schema_extra={"minimum": 0},
            ),
        ] = None,
        limit: Annotated[
            int | None,
            Field(
                description="text files: how many lines to show", json_schema_extra={"minimum": 1}
            ),
        ] = None,
        region: Annotated[
            list[int] | None,
            Field(
                min_length=4,
                max_length=4,
                description="zoom: [x0, y0, x1, y1] in the source's pixels (pdf: points)",
            ),
        ] = None,
    ) -> CallToolResult:
        """See a file as an image (raster, svg, pdf page, or text rendered: offset and
        limit page through a long text); sha256:<hex> (12+ digits) shows again an image
        this session viewed. The result states the source's size: region=[x0, y0, x1, y1]
        in it zooms in, showing that part at up to full resolution."""
        recall = recalled.of(ctx.session.client_params)
        return await anyio.to_thread.run_sync(
            lambda: view_result(
                path,
                roots=view_roots,
                page=page,
                offset=offset,
                limit=limit,
                region=region,
                recall=recall,
                max_bytes=cap,
            )
        )

    @server.tool(name="vision_analyze", structured_output=False)
    @_plain_doc
    async def vision_analyze_tool(
        prompt: Annotated[str, Field(description="the question about the file")],
        path: Annotated[
            str | None, Field(description="a file under the roots (as view takes it)")
        ] = None,
        file_path: Annotated[str | None, Field(description="the same as path")] = None,
        file_url: Annotated[str | None, Field(description="an https URL")] = None,
        file_base64: Annotated[str | None, Field(description="the file's bytes, base64")] = None,
        model: Annotated[str | None, Field(description="model ref; default configured")] = None,
        format: Annotated[
            dict[str, Any] | None, Field(description="JSON Schema the answer must meet")
        ] = None,
        first_page: Annotated[int | None, Field(ge=1, description="pdf: first page")] = None,
        last_page: Annotated[int | None, Field(ge=1, description="pdf: last page")] = None,
    ) -> str:
        """Ask a vision model one question about an image, PDF or screenshot-able file.

        Answers the JSON envelope {text, parsed?, model, cost_usd, input_tokens,
        output_tokens}."""
        from visus.analyze import vision_analyze

        if path is not None and file_path is not None and path != file_path:
            raise ToolError("INVALID_INPUT: give path or file_path, not both")
        pages = None
        if first_page is not None or last_page is not None:
            pages = (first_page or 1, last_page or first_page or 1)
        try:
            result = await vision_analyze(
                prompt,
                file_path=path if path is not None else file_path,
                file_url=file_url,
                file_base64=file_base64,
                model=model,
                format=format,
                pages=pages,
                reach=view_roots,
                config=analyze_config,
            )
        except VisusError as e:
            raise ToolError(str(e)) from e
        return json.dumps(result.to_dict())

    return server


def _rpc_error(status: int, code: int, message: str) -> JSONResponse:
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}
    return JSONResponse(body, status_code=status)


class McpBodyGate:
    """ASGI wrapper of the ``/mcp`` endpoint: a POST body over ``cap`` bytes gets 413
    naming ``MCP_MAX_REQUEST_BYTES``, one nested past ``JSON_MAX_DEPTH`` gets 400
    ``invalid_input``; both as JSON-RPC errors, before the SDK parses anything."""

    def __init__(self, app: ASGIApp, cap: int) -> None:
        self.app = app
        self.cap = cap

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        too_big = _rpc_error(
            413,
            -32600,
            f"too_large: request body over {tether_limits.mb(self.cap)} (MCP_MAX_REQUEST_BYTES)",
        )
        length = Headers(scope=scope).get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.cap):
            await too_big(scope, receive, send)
            return
        body = bytearray()
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            body += message.get("body", b"")
            more = bool(message.get("more_body", False))
            if len(body) > self.cap:
                await too_big(scope, receive, send)
                return
        try:
            tether_limits.load_json(bytes(body))
        except VisusError as e:
            await _rpc_error(400, -32700, f"invalid_input: {e}")(scope, receive, send)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def mount_mcp(
    app: FastAPI,
    *,
    roots: Sequence[Path | str] | Reach | None = None,
    host: str = "127.0.0.1",
    path: str = "/mcp",
) -> MCPServer:
    """Serve the MCP server over streamable HTTP at ``path`` inside a tether ``app``.

    The tools reach the tether API in-process (no socket), with the app's token.
    The app's bearer gate also covers ``/mcp`` when a token is set.

    Example:
        >>> import tempfile
        >>> from visus.tether.runner import TurnOutput
        >>> from visus.tether.server import create_app
        >>> class Quiet:
        ...     async def run_turn(self, **kw): return TurnOutput("")
        >>> app = create_app(data_dir=Path(tempfile.mkdtemp()), runner_factory=lambda c: Quiet())
        >>> mount_mcp(app).name
        'visus'
    """
    import httpx

    from visus.tether.client import TetherClient

    client = TetherClient(
        f"http://{IN_PROCESS_HOST}", app.state.token, transport=httpx.ASGITransport(app=app)
    )
    server = build_server(client, roots=roots)
    cap = limits.MCP_MAX_REQUEST_BYTES
    # The SDK's own cap (4 MiB by default) would refuse a 3 MB image with an opaque
    # -32603; ours sits in front of it with the same number and says which bound.
    sub = server.streamable_http_app(
        streamable_http_path=path, host=host, max_request_body_size=cap
    )
    for route in sub.routes:
        if isinstance(route, Route):
            route.app = McpBodyGate(route.app, cap)
    app.router.routes.extend(sub.routes)
    app.state.lifespan_hooks.append(server.session_manager.run)
    return server
