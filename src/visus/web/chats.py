"""The web chat's own edits: a chat renamed or deleted, and a large image fitted.

Routes (bearer-token protected like the rest of ``/web/api``):

- ``PATCH  /web/api/sessions/{sid}`` ``{"title": "..."}`` -> ``{id, title}`` (``""``:
  back to the first message as title)
- ``DELETE /web/api/sessions/{sid}`` -> 204: the session's messages, title and attached
  files go (its images at the next ``visus gc``); 409 while one of its turns runs
- ``POST   /web/api/fit`` (an image's raw bytes, up to ``WEB_FIT_MAX_BYTES``) -> the
  image fitted for the model and the tether's bounds: what the page sends for every
  image, checked as it is added (one the model cannot take is refused then, by name)

Example:
    >>> sorted(r.path for r in router.routes)
    ['/web/api/fit', '/web/api/sessions/{sid}', '/web/api/sessions/{sid}']
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from visus import limits, media
from visus.errors import InvalidInputError, NotFoundError, TooLargeError, VisusError
from visus.media import Fitted
from visus.models import ModelSpec
from visus.record.sessions import validate_session_id
from visus.tether.instance import EGRESS_PROFILE
from visus.tether.limits import load_json
from visus.web.api import error_from, error_response, read_capped, web_stores

__all__ = ["FIT_PATH", "fit_for_chat", "router"]

# The token is checked in front of every route (tether's TokenGate).
router = APIRouter(prefix="/web/api", include_in_schema=False)


def fit_for_chat(data: bytes, model: ModelSpec) -> Fitted:
    """An image fitted for ``model`` (its edge, pixels and bytes) and for what a tether
    message carries (its media types, ``TETHER_MAX_IMAGE_BYTES``). CPU bound: call it in
    a worker thread; decoding runs under :mod:`visus.media`'s budgets.

    Example:
        >>> from visus.models import get_model
        >>> png = media.load(b"hello", profile=media.Profile(64, 4096, 100_000)).data
        >>> fit_for_chat(png, get_model("gpt-4.1")).media_type
        'image/png'
    """
    profile = model.profile() if model.vision else EGRESS_PROFILE
    fitted = media.fit(data, profile)
    carried = fitted.media_type in limits.TETHER_MEDIA_TYPES
    if carried and fitted.size <= limits.TETHER_MAX_IMAGE_BYTES:
        return fitted
    return media.fit(fitted.data, EGRESS_PROFILE)


@router.patch("/sessions/{sid}", response_model=None)
async def rename(sid: str, request: Request) -> dict[str, Any] | JSONResponse:
    """Give a chat a title; ``""`` goes back to its first message."""
    stores = web_stores(request.app)
    try:
        validate_session_id(sid)
        body = load_json(await request.body())
        title = body.get("title") if isinstance(body, dict) else None
        if not isinstance(title, str):
            raise InvalidInputError('send {"title": "..."} ("" removes the title)')
        await asyncio.to_thread(stores.sessions.set_title, sid, title)
    except VisusError as e:
        return error_from(e)
    return {"id": sid, "title": stores.sessions.title(sid)}


@router.delete("/sessions/{sid}", status_code=204, response_model=None)
async def delete(sid: str, request: Request) -> Response:
    """Delete a chat that has no turn running."""
    stores = web_stores(request.app)
    try:
        validate_session_id(sid)
        inst = request.app.state.registry.get(stores.instance)
        if await inst.turns_in_flight(sid):
            return error_response(
                409, "busy", "a turn of this chat is running: stop it, then delete the chat"
            )
        if not await asyncio.to_thread(stores.sessions.delete, sid):
            raise NotFoundError(f"no session {sid!r}")
    except VisusError as e:
        return error_from(e)
    return Response(status_code=204)


#: Where the page posts an image's raw bytes to be fitted.
FIT_PATH = "/web/api/fit"


@router.post(FIT_PATH.removeprefix("/web/api"), response_model=None)
async def fit(request: Request) -> Response:
    """The posted image, fitted (see :func:`fit_for_chat`)."""
    stores = web_stores(request.app)
    too_big = error_response(
        413,
        "too_large",
        f"an image to fit may be at most {limits.WEB_FIT_MAX_BYTES} bytes (WEB_FIT_MAX_BYTES): "
        "put a larger one in the files folder, where the agent views it",
        limit="WEB_FIT_MAX_BYTES",
    )
    body = await read_capped(request, limits.WEB_FIT_MAX_BYTES, too_big)
    if isinstance(body, JSONResponse):
        return body
    try:
        fitted = await asyncio.to_thread(fit_for_chat, body, stores.model)
    except TooLargeError as e:  # the decode bounds (pixels, edge), not an attachment cap
        return error_response(413, "too_large", str(e))
    except VisusError as e:
        return error_from(e)
    headers = {"X-Visus-Source-Size": f"{fitted.source_width}x{fitted.source_height}"}
    return Response(fitted.data, media_type=fitted.media_type, headers=headers)
