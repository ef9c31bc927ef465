"""The web chat's JSON API (``/web/api/...``): what the page reads besides tether.

Messages go through the real tether ingress (``POST /v1/instances/{id}/tether``) and
answers stream from the tether SSE stream; this router only serves what tether does
not: the default instance and the limits the page checks, the sessions of that
instance, one session's conversation (text, tool calls and results, images as blob
URLs, per-turn usage and cost, every image live or elided under the retention
policy, the session's attachments, the msg_ids of its turns still ``running`` and the
``phases`` they are in so a reloaded page shows them working, with Stop), the image
blobs themselves, and attachment
uploads ``{filename, contentBase64, mimeType}`` (the MIME type the browser gave).

Routes (the app's bearer token, checked in front of them by
:class:`visus.tether.gate.TokenGate` when the app has one):

- ``GET  /web/api/config``
- ``GET  /web/api/sessions``
- ``GET  /web/api/sessions/{sid}``
- ``GET  /web/api/sessions/{sid}/attachments``
- ``POST /web/api/sessions/{sid}/attachments`` -> 201 the stored attachment
- ``GET  /web/api/blobs/{digest}``

Renaming and deleting a session, and fitting a large image, are :mod:`visus.web.chats`.

Errors are JSON ``{"error": {"code", "message", "limit"?}}`` like tether's.

Example:
    >>> sorted({r.path for r in router.routes})[:2]
    ['/web/api/blobs/{digest}', '/web/api/config']
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from visus import limits
from visus.attachments import AttachmentInfo, AttachmentStore, SessionAttachments
from visus.errors import (
    InvalidInputError,
    InvalidKeyError,
    LimitError,
    NotFoundError,
    TooLargeError,
    VisusError,
)
from visus.models import ModelSpec, get_model
from visus.paths import blobs_dir, sessions_dir
from visus.record.blobs import BlobStore, FileBlobStore, validate_digest
from visus.record.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    Part,
    ToolResult,
    Usage,
    UserMessage,
)
from visus.record.sessions import SessionLog, SessionStore, validate_session_id
from visus.retention import DEFAULT_POLICY, RetentionPolicy, image_statuses
from visus.tether.limits import load_json

__all__ = [
    "BLOB_PATH",
    "AttachmentUpload",
    "WebStores",
    "conversation",
    "error_from",
    "error_response",
    "read_capped",
    "router",
    "session_list",
    "web_stores",
]

#: Where the page fetches an image blob (``{digest}`` is a sha256).
BLOB_PATH = "/web/api/blobs/{digest}"


class AttachmentUpload(BaseModel):
    """The body of an attachment upload: the browser's own ``file.type`` as mimeType."""

    model_config = ConfigDict(extra="forbid")

    filename: str = Field(min_length=1)
    contentBase64: str  # the page's JSON names, as the issue gives them
    mimeType: str = ""  # "" is what a browser gives for an unknown type


@dataclass(frozen=True, slots=True)
class WebStores:
    """The default instance's record as the page sees it. ``attachments(sid)`` is where
    the instance's agent reads session ``sid``'s attachments (with a PostgreSQL store,
    the database: an upload any replica took is there for every replica's turns)."""

    instance: str
    folder: Path
    sessions: SessionLog
    blobs: BlobStore
    attachments: Callable[[str], SessionAttachments]
    policy: RetentionPolicy
    model: ModelSpec
    last_seq: int


def web_stores(app: Any) -> WebStores:
    """The stores of ``app.state.default_instance`` (the agent's own when it has one)."""
    inst = app.state.registry.get(app.state.default_instance)
    folder = Path(inst.config.data_dir)
    agent = getattr(inst.runner, "agent", None)
    sessions = getattr(agent, "sessions", None)
    blobs = getattr(agent, "blobs", None)
    policy = getattr(agent, "policy", None)
    spec = getattr(agent, "model", None)
    # The runner's own (app.AgentRunner picks the store's); a runner without one keeps
    # them in the instance folder, where the attachment tools' default looks.
    attachments = getattr(inst.runner, "attachments", None)
    if not callable(attachments):
        attachments = functools.partial(AttachmentStore.for_session, folder)
    return WebStores(
        instance=str(inst.config.id),
        folder=folder,
        sessions=sessions
        if isinstance(sessions, SessionLog)
        else SessionStore(sessions_dir(folder)),
        blobs=blobs if isinstance(blobs, BlobStore) else FileBlobStore(blobs_dir(folder)),
        attachments=attachments,
        policy=policy if isinstance(policy, RetentionPolicy) else DEFAULT_POLICY,
        model=spec if isinstance(spec, ModelSpec) else get_model(inst.config.model),
        last_seq=int(inst.ring.last_seq),
    )


# --- values the page reads ---------------------------------------------------------------


def _usage(u: Usage) -> dict[str, Any]:
    return dict(u.as_json())


def _image(part: ImagePart) -> dict[str, Any]:
    origin = part.origin
    source = origin.source if origin.kind == "perception" else (origin.filename or "")
    return {
        "digest": part.digest,
        "url": BLOB_PATH.format(digest=part.digest),
        "media_type": part.media_type,
        "width": part.width,
        "height": part.height,
        "size": part.size,
        "origin": origin.kind,
        "source": source,
    }


def _parts(parts: Sequence[Part]) -> tuple[str, list[dict[str, Any]]]:
    texts = [p.text for p in parts if p.kind == "text"]
    images = [_image(p) for p in parts if isinstance(p, ImagePart)]
    return "\n".join(t for t in texts if t), images


def _message(m: Message) -> dict[str, Any]:
    match m:
        case UserMessage():
            text, images = _parts(m.parts)
            return {"kind": "user", "turn": m.turn, "text": text, "images": images}
        case AssistantMessage():
            return {
                "kind": "assistant",
                "turn": m.turn,
                "text": m.text,
                "model": m.model,
                "usage": None if m.usage is None else _usage(m.usage),
                "tool_calls": [
                    {"id": c.id, "name": c.name, "arguments": dict(c.arguments)}
                    for c in m.tool_calls
                ],
            }
        case ToolResult():
            text, images = _parts(m.parts)
            return {
                "kind": "tool",
                "turn": m.turn,
                "tool_name": m.tool_name,
                "call_id": m.call_id,
                "is_error": m.is_error,
                "text": text,
                "images": images,
            }


def _turns(messages: Sequence[Message]) -> list[dict[str, Any]]:
    by_turn: dict[int, dict[str, Any]] = {}
    for m in messages:
        empty = {"turn": m.turn, "usage": Usage(), "model": "", "steps": 0}
        row = by_turn.setdefault(m.turn, empty)
        if isinstance(m, AssistantMessage):
            row["steps"] += 1
            row["model"] = m.model or row["model"]
            if m.usage is not None:
                row["usage"] = row["usage"] + m.usage
    return [{**row, "usage": _usage(row["usage"])} for _, row in sorted(by_turn.items())]


def _title(messages: Sequence[Message]) -> str:
    for m in messages:
        if isinstance(m, UserMessage):
            text = m.text.strip()
            if text:
                first = text.splitlines()[0].strip()
                cap = limits.WEB_SESSION_TITLE_CHARS
                return first if len(first) <= cap else first[: cap - 1].rstrip() + "…"
            if any(isinstance(p, ImagePart) for p in m.parts):
                return "(image)"
    return "(empty)"


def session_list(stores: WebStores) -> list[dict[str, Any]]:
    """The sessions of the default instance, most recently modified first."""
    out: list[dict[str, Any]] = []
    for info in stores.sessions.list():
        try:
            loaded = stores.sessions.load(info.id)
        except VisusError:
            continue
        out.append(
            {
                "id": info.id,
                "title": stores.sessions.title(info.id) or _title(loaded.messages),
                "turns": info.turns,
                "messages": info.messages,
                "modified": info.modified,
            }
        )
    return out


def _attachments(stores: WebStores, sid: str) -> list[dict[str, Any]]:
    return [a.to_json() for a in stores.attachments(sid).list()]


def conversation(stores: WebStores, sid: str) -> dict[str, Any]:
    """One session as the page renders it; a session not started yet is empty."""
    validate_session_id(sid)
    base: dict[str, Any] = {
        "id": sid,
        "instance": stores.instance,
        "model": stores.model.name,
        "last_seq": stores.last_seq,
        "attachments": _attachments(stores, sid),
        "policy": {"live_turns": stores.policy.live_turns, "chunk": stores.policy.chunk},
    }
    if not stores.sessions.exists(sid):
        return {
            **base,
            "exists": False,
            "messages": [],
            "turns": [],
            "images": [],
            "problems": [],
        }
    loaded = stores.sessions.load(sid, blobs=stores.blobs)
    statuses = image_statuses(loaded.messages, stores.policy, model=stores.model)
    images = [
        {**_image(s.image), "turn": s.turn, "live": s.live, "tokens": s.tokens} for s in statuses
    ]
    turns = _turns(loaded.messages)
    total = Usage()
    for m in loaded.messages:
        if isinstance(m, AssistantMessage) and m.usage is not None:
            total = total + m.usage
    return {
        **base,
        "exists": True,
        "title": stores.sessions.title(sid) or _title(loaded.messages),
        "session_model": str(loaded.meta.get("model", "")),
        "messages": [_message(m) for m in loaded.messages],
        "turns": turns,
        "total": _usage(total),
        "images": images,
        "problems": list(loaded.problems),
    }


def _config(app: Any, stores: WebStores) -> dict[str, Any]:
    policy = getattr(app.state, "policy", None)
    return {
        "instance": stores.instance,
        "model": stores.model.name,
        "model_ref": str(getattr(app.state, "default_model", stores.model.name)),
        # The page says what the offline reference model is, and how to switch.
        "reference": stores.model.provider == "reference",
        "vision": stores.model.vision,
        # Where to put files the agent should read or view (the operator's roots).
        "files": [str(r) for r in getattr(policy, "roots", ())],
        "limits": {
            "max_images": limits.TETHER_MAX_IMAGES_PER_MESSAGE,
            "max_image_bytes": limits.TETHER_MAX_IMAGE_BYTES,
            "fit_max_bytes": limits.WEB_FIT_MAX_BYTES,
            "max_message_image_bytes": limits.TETHER_MAX_FRAME_IMAGE_BYTES,
            "max_wire_bytes": limits.TETHER_MAX_WIRE_BYTES,
            "image_media_types": sorted(limits.TETHER_MEDIA_TYPES),
            "attachment_max_file_bytes": limits.ATTACHMENT_MAX_FILE_BYTES,
            "attachment_max_session_bytes": limits.ATTACHMENT_MAX_SESSION_BYTES,
            "attachment_max_files": limits.ATTACHMENT_MAX_FILES,
            "session_id_max_chars": min(limits.SESSION_ID_MAX_CHARS, limits.TETHER_MAX_ID_CHARS),
        },
    }


# --- errors and auth --------------------------------------------------------------------


def error_response(
    status: int, code: str, message: str, *, limit: str | None = None
) -> JSONResponse:
    """The error body tether uses, so the page reads one shape."""
    detail: dict[str, str] = {"code": code, "message": message}
    if limit:
        detail["limit"] = limit
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse({"error": detail}, status_code=status, headers=headers)


_ATTACHMENT_LIMITS = (
    "ATTACHMENT_MAX_FILES",
    "ATTACHMENT_MAX_SESSION_BYTES",
    "ATTACHMENT_MAX_INSTANCE_FILES",
    "ATTACHMENT_MAX_INSTANCE_BYTES",
)


def error_from(e: VisusError) -> JSONResponse:
    if isinstance(e, NotFoundError):
        return error_response(404, "not_found", str(e))
    if isinstance(e, TooLargeError):
        return error_response(413, "too_large", str(e), limit="ATTACHMENT_MAX_FILE_BYTES")
    if isinstance(e, LimitError):
        text = str(e)
        name = next(
            (n for n in _ATTACHMENT_LIMITS if n in text),
            None,
        )
        return error_response(413, "too_large", text, limit=name)
    return error_response(400, "invalid_input", str(e))


async def _read_body(request: Request, cap: int) -> bytes | JSONResponse:
    too_big = error_response(
        413,
        "too_large",
        f"upload body over {cap} bytes: one attachment may be at most "
        f"{limits.ATTACHMENT_MAX_FILE_BYTES} bytes (ATTACHMENT_MAX_FILE_BYTES)",
        limit="ATTACHMENT_MAX_FILE_BYTES",
    )
    return await read_capped(request, cap, too_big)


async def read_capped(request: Request, cap: int, too_big: JSONResponse) -> bytes | JSONResponse:
    """The body, or ``too_big`` as soon as it is known to pass ``cap``."""
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > cap):
        return too_big  # refused before a byte of the body is read
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > cap:
            return too_big
    return bytes(body)


def _upload(body: bytes) -> AttachmentUpload:
    obj = load_json(body)  # FrameError is an InvalidInputError
    try:
        return AttachmentUpload.model_validate(obj)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "body"
        raise InvalidInputError(
            f"{where}: {first.get('msg', 'invalid')} (send {{filename, contentBase64, mimeType}})"
        ) from e


# --- the router -------------------------------------------------------------------------


# The ``/web/api`` routes; they read ``request.app.state`` (see :func:`web_stores`).
# The token is checked in front of every route (tether's TokenGate: the bearer), before
# a body is read.
router = APIRouter(prefix="/web/api", include_in_schema=False)


@router.get("/config")
async def config(request: Request) -> dict[str, Any]:
    return _config(request.app, web_stores(request.app))


@router.get("/sessions")
async def sessions(request: Request) -> dict[str, Any]:
    stores = web_stores(request.app)
    return {"sessions": await asyncio.to_thread(session_list, stores)}


@router.get("/sessions/{sid}", response_model=None)
async def session(sid: str, request: Request) -> dict[str, Any] | JSONResponse:
    stores = web_stores(request.app)  # last_seq first: a turn ending after it streams
    try:
        conv = await asyncio.to_thread(conversation, stores, sid)
        inst = request.app.state.registry.get(stores.instance)
        conv["running"] = await inst.turns_in_flight(sid)
        # What each running turn does now, for a reloaded page's working bubble.
        phases = {m: inst.turn_phase(sid, m) for m in conv["running"]}
        conv["phases"] = {m: p for m, p in phases.items() if p}
    except VisusError as e:
        return error_from(e)
    return conv


@router.get("/sessions/{sid}/attachments", response_model=None)
async def attachments(sid: str, request: Request) -> dict[str, Any] | JSONResponse:
    stores = web_stores(request.app)
    try:
        validate_session_id(sid)
        # Off the loop: with a database store this is a query.
        return {"attachments": await asyncio.to_thread(_attachments, stores, sid)}
    except VisusError as e:
        return error_from(e)


@router.post("/sessions/{sid}/attachments", status_code=201, response_model=None)
async def upload(sid: str, request: Request) -> dict[str, Any] | JSONResponse:
    stores = web_stores(request.app)
    try:
        validate_session_id(sid)
        body = await _read_body(request, limits.WEB_ATTACHMENT_MAX_BODY_BYTES)
        if isinstance(body, JSONResponse):
            return body
        up = _upload(body)
        store = stores.attachments(sid)
        info: AttachmentInfo = await asyncio.to_thread(
            store.put, up.filename, up.contentBase64, up.mimeType
        )
    except VisusError as e:
        return error_from(e)
    return info.to_json()


@router.get("/blobs/{digest}", response_model=None)
async def blob(digest: str, request: Request) -> Response:
    stores = web_stores(request.app)
    try:
        key = validate_digest(digest)
        data = await asyncio.to_thread(stores.blobs.get, key)  # verified against the key
        media_type = await asyncio.to_thread(stores.blobs.media_type, key)
        media_type = media_type or "application/octet-stream"
    except InvalidKeyError as e:
        return error_response(400, "invalid_input", str(e))
    except VisusError as e:
        return error_from(e)
    headers: Mapping[str, str] = {
        "Cache-Control": "private, max-age=31536000, immutable",
        "X-Content-Type-Options": "nosniff",
        # A blob opened in its own tab runs nothing, whatever its type (an SVG).
        "Content-Security-Policy": "default-src 'none'; sandbox",
    }
    return Response(data, media_type=media_type, headers=dict(headers))
