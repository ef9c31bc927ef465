"""The web chat: a page at ``/`` that talks to the default instance's agent.

The page is plain HTML, CSS and JavaScript shipped in ``static/`` (no CDN, no build
step, nothing fetched at run time). It sends messages through the real tether
ingress (images inline as tether images), reads answers from the tether SSE stream,
uploads other files to the session's attachments and reads everything else from
the small JSON API in :mod:`visus.web.api`.

Auth: the page itself is public (it holds no data); with a token on the app, the
page takes it once from ``?token=``, keeps it in ``sessionStorage`` and sends it as
``Authorization: Bearer`` to ``/v1`` and ``/web/api``, which both refuse requests
without it.

Example:
    >>> # app = create_main_app(data=Path(".visus-data"))   # mounts the chat itself
    >>> from fastapi import FastAPI
    >>> app = FastAPI()
    >>> mount_web(app)
    >>> paths = {getattr(r, "path", "") for r in app.routes}
    >>> sorted(p for p in paths if p == "/" or p.startswith("/web"))
    ['/', '/web/static']
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.staticfiles import StaticFiles

from visus.web import chats
from visus.web.api import WebAuthError, api_router, error_response

__all__ = ["STATIC_DIR", "mount_web"]

#: The page's files, shipped as package data.
STATIC_DIR = Path(__file__).parent / "static"

# The page loads only its own files; images come from blob URLs or object URLs.
_PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' blob: data:; script-src 'self'; "
        "style-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; "
        "frame-ancestors 'none'"
    ),
    # The token may sit in the address bar for a moment: never send it onwards.
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}


def mount_web(app: FastAPI) -> None:
    """Add the web chat to ``app``: ``GET /``, ``/web/static/*`` and ``/web/api/*``.

    ``app`` is the main app (:func:`visus.app.create_main_app`): its state holds the
    tether ``registry``, the ``default_instance`` id and the ``token`` (or None).
    """

    async def _unauthorized(request: Request, exc: Exception) -> JSONResponse:
        return error_response(
            401,
            "unauthorized",
            "missing or wrong bearer token: open the page as /?token=<token> once",
        )

    app.add_exception_handler(WebAuthError, _unauthorized)
    app.include_router(api_router())
    app.include_router(chats.router)

    @app.get("/", include_in_schema=False)
    async def page() -> HTMLResponse:
        html = (STATIC_DIR / "index.html").read_text(encoding="utf-8")
        return HTMLResponse(html, headers=_PAGE_HEADERS)

    @app.get("/favicon.ico", include_in_schema=False)
    async def favicon() -> Response:
        return Response(
            (STATIC_DIR / "favicon.svg").read_bytes(),
            media_type="image/svg+xml",
            headers={"Cache-Control": "max-age=86400"},
        )

    app.mount("/web/static", StaticFiles(directory=STATIC_DIR), name="web-static")
