"""The web chat: a page at ``/`` that talks to the default instance's agent.

The page is plain HTML, CSS and JavaScript shipped in ``static/`` (no CDN, no build
step, nothing fetched at run time). It sends messages through the real tether
ingress (images inline as tether images), reads answers from the tether SSE stream,
uploads other files to the session's attachments and reads everything else from
the small JSON API in :mod:`visus.web.api`.

Auth: the page and its files are public (they hold no data); with a token on the
app, the page takes ``/?token=<token>`` from its address into its origin's own storage
and sends it as the bearer token on every request (:mod:`visus.web.auth`; the token
dialog checks a token at ``/web/login``), and every other route (``/v1``,
``/web/api``, ``/mcp``) refuses a request without it
(:class:`visus.tether.gate.TokenGate`). No cookie holds the token.

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
from fastapi.responses import HTMLResponse, Response
from starlette.staticfiles import StaticFiles

from visus.web import chats
from visus.web.api import router as api_router
from visus.web.auth import LOGIN_PATH, forget_old_cookie
from visus.web.auth import router as auth_router

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


async def page(request: Request) -> Response:
    """The chat page (a ``?token=`` in its address is the page's to keep)."""
    html = (STATIC_DIR / "index.html").read_text(encoding="utf-8")
    response = HTMLResponse(html, headers=_PAGE_HEADERS)
    forget_old_cookie(request, response)
    return response


def mount_web(app: FastAPI) -> None:
    """Add the web chat to ``app``: ``GET /``, ``/web/static/*``, ``/web/login`` and
    ``/web/api/*``.

    ``app`` is the main app (:func:`visus.app.create_main_app`): its state holds the
    tether ``registry``, the ``default_instance`` id and the ``token`` (or None). The
    page, its files and the sign-in are public; the rest needs the token.
    """
    public_paths = getattr(app.state, "public_paths", None)
    if public_paths is not None:  # a tether app: its TokenGate reads these
        public_paths.update({"/", "/favicon.ico", LOGIN_PATH})
        app.state.public_prefixes.append("/web/static/")
        app.state.raw_body_paths.add(chats.FIT_PATH)  # an image's own bytes
    app.include_router(api_router)
    app.include_router(chats.router)
    app.include_router(auth_router)
    app.add_api_route("/", page, methods=["GET"], include_in_schema=False)

    @app.get("/favicon.ico", include_in_schema=False)
    async def favicon() -> Response:
        return Response(
            (STATIC_DIR / "favicon.svg").read_bytes(),
            media_type="image/svg+xml",
            headers={"Cache-Control": "max-age=86400"},
        )

    app.mount("/web/static", StaticFiles(directory=STATIC_DIR), name="web-static")
