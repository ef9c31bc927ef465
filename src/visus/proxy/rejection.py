"""A provider's refusal of an image, turned into an error that names the image.

When the upstream still refuses a request that carried images (an image the proxy
could not decode, a cap it does not know), the provider's message names a position
in the body the proxy sent (``messages.3.content.1.source``, ``messages.[2].content.[0]``)
which the client never wrote. :func:`explain` finds the image at that position and
rewrites the error's ``message`` to say which of the client's images it was and what
the proxy did to it; the rest of the provider's error body (type, code, param) stays.

Example:
    >>> from visus.proxy.edit import ImageNote
    >>> notes = [ImageNote("messages.0.content.1", "messages.0.content.1 (image/png 10x10)")]
    >>> body = {"type": "error", "error": {"type": "invalid_request_error",
    ...         "message": "messages.0.content.1.source.base64.data: Could not process image"}}
    >>> print(explain(body, notes)["error"]["message"])  # doctest: +NORMALIZE_WHITESPACE
    visus proxy: the provider refused image messages.0.content.1 (image/png 10x10):
    messages.0.content.1.source.base64.data: Could not process image
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from typing import Any

import httpx
from starlette.responses import JSONResponse, Response

from visus.proxy.edit import ImageNote
from visus.proxy.encoding import READABLE
from visus.proxy.transport import reply_headers

__all__ = ["explain", "explained_refusal"]

logger = logging.getLogger("visus.proxy")

# A provider refuses a request it cannot take with one of these.
_REFUSALS = frozenset({400, 413, 422})

_TOKEN = re.compile(r"[A-Za-z_]+|\d+")
_PATHISH = re.compile(r"[\w.\[\]]*\d[\w.\[\]]*")
_SHOWN = 5


def _tokens(path: str) -> list[str]:
    return _TOKEN.findall(path)


def _match(notes: Sequence[ImageNote], candidates: list[str]) -> ImageNote | None:
    best: tuple[int, ImageNote] | None = None
    for candidate in candidates:
        have = _tokens(candidate)
        for note in notes:
            want = _tokens(note.path)
            if want and have[: len(want)] == want and (best is None or len(want) > best[0]):
                best = (len(want), note)
    return best[1] if best else None


def explain(body: Any, notes: Sequence[ImageNote]) -> dict[str, Any] | None:
    """``body`` with its message naming the refused image; None if it is not about images."""
    if not notes or not isinstance(body, dict) or not isinstance(body.get("error"), dict):
        return None
    error: dict[str, Any] = body["error"]
    message = error.get("message")
    if not isinstance(message, str):
        return None
    param = error.get("param")
    candidates = ([param] if isinstance(param, str) else []) + _PATHISH.findall(message)
    note = _match(notes, candidates)
    if note is None and len(notes) == 1 and "image" in message.lower():
        note = notes[0]  # the request's only image: the refusal can only mean it
    if note is not None:
        text = f"visus proxy: the provider refused image {note.what}: {message}"
    elif "image" in message.lower():
        shown = "; ".join(n.what for n in notes[:_SHOWN])
        more = f"; and {len(notes) - _SHOWN} more" if len(notes) > _SHOWN else ""
        text = (
            f"visus proxy: the provider refused an image of this request "
            f"({len(notes)} images: {shown}{more}): {message}"
        )
    else:
        return None
    return {**body, "error": {**error, "message": text}}


async def explained_refusal(response: httpx.Response, notes: list[ImageNote]) -> Response | None:
    """A refusal of a request with images, its message naming the image (None: not one)."""
    coding = response.headers.get("content-encoding", "identity").lower()
    if not notes or response.status_code not in _REFUSALS or coding not in READABLE:
        return None  # a coding the proxy cannot read goes on as it came
    try:
        raw = await response.aread()
    finally:
        await response.aclose()
    headers = reply_headers(response.headers, keep_encoding=False)
    try:
        explained = explain(json.loads(raw), notes)
    except (ValueError, RecursionError):
        explained = None
    if explained is None:
        return Response(raw, status_code=response.status_code, headers=headers)
    logger.warning("%s", explained["error"]["message"])
    return JSONResponse(explained, status_code=response.status_code, headers=headers)
