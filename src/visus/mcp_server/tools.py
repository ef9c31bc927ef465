"""The five tools, each a module-level function over the server's :class:`ToolContext`.

The SDK passes a tool its ``Context``; the :class:`ToolContext` that
:func:`~visus.mcp_server.server.build_server` made is its lifespan state
(:func:`context_of`). Parameter descriptions are the tool's schema; docstrings are
its description as hosts show it (one line per paragraph: :func:`plain_doc`).

The tools answering a JSON string are registered with ``structured_output=False``:
else the SDK declares an outputSchema ``{"result": string}`` and sends the same JSON a
second time, as a string inside structuredContent (twice the bytes against the host's
cap, and a string, not an object, for clients that read structuredContent).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import re
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, TypeAlias, TypeVar

import anyio
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult
from pydantic import BaseModel, Field, WithJsonSchema

from visus import limits
from visus.errors import AnalyzeError, LimitError, PolicyError, VisusError
from visus.mcp_server.refusals import Refused, path_too_long, reason_of
from visus.mcp_server.results import read_result
from visus.mcp_server.view import SessionRecall, view_result
from visus.perception import Reach
from visus.tether.client import TetherHTTPError
from visus.tether.frames import decode_base64
from visus.tether.limits import check_image_count, check_images, check_media_type
from visus.tether.runner import ImageIn

if TYPE_CHECKING:
    from visus.config import VisusConfig
    from visus.models.allowed import AllowedModels
    from visus.tether.client import TetherClient

__all__ = [
    "McpImage",
    "ToolContext",
    "context_of",
    "plain_doc",
    "tether_instances",
    "tether_read",
    "tether_send",
    "view",
    "vision_analyze",
]

_F = TypeVar("_F", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What every tool works over: the tether client, the reach ``view`` and
    ``vision_analyze`` see, the result cap, the configuration ``vision_analyze``
    resolves its model with (None: ``load_config()`` at call time), the models a
    client may name there (None: any) and each client session's viewed images."""

    client: TetherClient
    reach: Reach
    cap: int
    analyze_config: VisusConfig | None = None
    recall: SessionRecall = field(default_factory=SessionRecall)
    models: AllowedModels | None = None

    def lifespan(self, _server: object) -> AbstractAsyncContextManager[ToolContext]:
        """The server's lifespan: it holds nothing open, its state is this context."""
        return contextlib.nullcontext(self)


#: What the SDK passes a tool: its request, and our context as the lifespan state.
Call: TypeAlias = Context[ToolContext, Any]


def context_of(ctx: Call) -> ToolContext:
    """The :class:`ToolContext` of the server a tool call came to."""
    return ctx.request_context.lifespan_context


def plain_doc(fn: _F) -> _F:
    """The SDK sends a tool's docstring as its description as it is, indentation and
    line breaks included; hosts show it to the model. One line per paragraph instead."""
    text = inspect.cleandoc(fn.__doc__ or "")
    fn.__doc__ = re.sub(r"(?<!\n)\n(?!\n)", " ", text)
    return fn


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


#: What an instance or session id may be (visus makes ``i-<hex>`` and ``i-webchat``; a
#: session is spelled as in a frame); anything else is refused before it becomes part of
#: a request (a path: ``..``, ``/``, NUL).
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")

#: The tether server's statuses the client has no error class for -> refusal reason.
_STATUS_REASONS = {401: "unauthorized", 403: "forbidden", 409: "in_use", 429: "busy"}


def _instance(value: str) -> str:
    """``value`` as an instance id, or :class:`Refused` (``invalid_input``)."""
    return _checked_id(value, "instance", "an instance id (tether_instances lists them)")


def _session(value: str | None) -> str | None:
    """``value`` as a session id; empty (as some hosts fill an optional string) is none."""
    if not value:
        return None
    what = "a session id: 1 to 128 letters, digits and . _ : @ - (a letter or digit first)"
    return _checked_id(value, "session_id", what)


def _checked_id(value: str, field: str, what: str) -> str:
    if _ID.fullmatch(value):
        return value
    shown = repr(value) if len(value) <= 60 else repr(value[:57]) + "..."
    raise Refused("invalid_input", f"{field}: {shown} is not {what}", field=field)


def _tether_error(e: VisusError, client: TetherClient) -> Refused:
    """A tether call's failure for the host; no server at all says how to start one."""
    if isinstance(e, TetherHTTPError) and e.status == 0:
        return Refused(
            "unreachable",
            f"no visus server answers at {client.base_url}: start one with `visus serve` "
            "(or give `visus mcp --url` the address of yours). view works without one.",
        )
    reason = reason_of(e)
    if isinstance(e, TetherHTTPError):
        reason = _STATUS_REASONS.get(e.status, reason)
    elif isinstance(e, LimitError) and str(e).startswith("429"):
        reason = "busy"  # the client reads 413 and 429 alike as a LimitError
    elif reason == "failed" and "tether token" in str(e):
        reason = "unauthorized"  # a 401 is the client's ConfigError
    return Refused(reason, str(e))


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


@plain_doc
async def tether_send(
    instance: Annotated[str, Field(description="instance id")],
    text: Annotated[str, Field(description="message text; may be empty with images")],
    ctx: Call,
    images: Annotated[
        list[McpImage] | None, Field(description="at most 4 images, 10 MB each, 20 MB total")
    ] = None,
    session_id: Annotated[str | None, Field(description="session; default 'default'")] = None,
) -> str:
    """Send a user message (text and optional images) to an agent instance of a
    running `visus serve`. Then call tether_read with after_seq set to the seq this
    answers, until a frame of type assistant.done (or error) arrives."""
    client = context_of(ctx).client
    try:
        decoded = _decode_args(images or [])
        sent = await client.send(_instance(instance), text, decoded, session=_session(session_id))
    except VisusError as e:
        raise _tether_error(e, client) from e
    return json.dumps(sent)


@plain_doc
async def tether_read(
    instance: Annotated[str, Field(description="instance id")],
    ctx: Call,
    session_id: Annotated[str | None, Field(description="only this session")] = None,
    after_seq: Annotated[int, Field(ge=0, description="next_seq of the last read")] = 0,
    wait_ms: Annotated[
        int,
        Field(ge=0, description="wait this long for a frame (with until_done: for the turn's end)"),
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
    state = context_of(ctx)
    client, cap = state.client, state.cap
    wait = min(wait_ms / 1000, limits.TETHER_POLL_MAX_WAIT_SECONDS)
    instance, session_id = _instance(instance), _session(session_id)
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


@plain_doc
async def tether_instances(ctx: Call) -> str:
    """The agent instances of the running `visus serve` (id, model, tools, and the
    roots: the folders its agent reaches); the web chat's is i-webchat."""
    client = context_of(ctx).client
    try:
        return json.dumps(await client.list_instances())
    except VisusError as e:
        raise _tether_error(e, client) from e


#: ``view``'s page, offset and limit as a host reads them (checked by visus).
_WHOLE_OR_NULL = WithJsonSchema({"anyOf": [{"type": "integer"}, {"type": "null"}]})
#: ``view``'s ``region`` as a host reads it (checked by visus, not by the SDK).
_REGION_SCHEMA: dict[str, Any] = {
    "items": {"type": "integer"},
    "maxItems": 4,
    "minItems": 4,
    "type": "array",
}


@plain_doc
async def view(
    path: Annotated[
        str,
        Field(description="file under the allowed roots, or sha256:<hex> of an earlier view"),
    ],
    ctx: Call,
    # Types and bounds in the schema only: any value passes the SDK and view_result
    # checks it, so a wrong one is visus's JSON refusal a host can read, where the SDK's
    # would be a raw validation error.
    page: Annotated[
        Any,
        _WHOLE_OR_NULL,
        Field(description="pdf page, 1-based", json_schema_extra={"minimum": 1}),
    ] = None,
    offset: Annotated[
        Any,
        _WHOLE_OR_NULL,
        Field(
            description="text files: the first line to show, 0-based",
            json_schema_extra={"minimum": 0},
        ),
    ] = None,
    limit: Annotated[
        Any,
        _WHOLE_OR_NULL,
        Field(description="text files: how many lines to show", json_schema_extra={"minimum": 1}),
    ] = None,
    region: Annotated[
        Any,
        WithJsonSchema({"anyOf": [_REGION_SCHEMA, {"type": "null"}]}),
        Field(description="zoom: [x0, y0, x1, y1] in the source's pixels (pdf: points)"),
    ] = None,
) -> CallToolResult:
    """See a file as an image (raster, svg, pdf page, or text rendered: offset and
    limit page through a long text); sha256:<hex> (12+ digits) shows again an image
    this session viewed. The result states the source's size: region=[x0, y0, x1, y1]
    in it zooms in, showing that part at up to full resolution."""
    state = context_of(ctx)
    recall = state.recall.of(ctx.session.client_params)
    return await anyio.to_thread.run_sync(
        lambda: view_result(
            path,
            roots=state.reach,
            page=page,
            offset=offset,
            limit=limit,
            region=region,
            recall=recall,
            max_bytes=state.cap,
        )
    )


@plain_doc
async def vision_analyze(
    prompt: Annotated[str, Field(description="the question about the file")],
    ctx: Call,
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
    from visus.analyze import vision_analyze as analyze

    state = context_of(ctx)
    if path is not None and file_path is not None and path != file_path:
        raise Refused("invalid_input", "give path or file_path, not both", field="file_path")
    named = path if path is not None else file_path
    if named is not None and len(named) > limits.MCP_MAX_PATH_CHARS:
        raise Refused("invalid_input", path_too_long(len(named)), field="path")
    from visus.analyze import allowed_model
    from visus.config import load_config

    config = state.analyze_config or load_config()
    try:
        # The operator's keys pay for it: their list decides, the default included.
        model = allowed_model(model, config, state.models)
    except PolicyError as e:
        raise Refused("forbidden", str(e), field="model") from e
    pages = None
    if first_page is not None or last_page is not None:
        pages = (first_page or 1, last_page or first_page or 1)
    try:
        result = await analyze(
            prompt,
            file_path=named,
            file_url=file_url,
            file_base64=file_base64,
            model=model,
            format=format,
            pages=pages,
            reach=state.reach,
            config=config,
        )
    except AnalyzeError as e:
        raise Refused(e.reason, e.message) from e
    except VisusError as e:
        raise Refused(reason_of(e), str(e)) from e
    return json.dumps(result.to_dict())
