"""The web chat's sign-in: the server's token traded for a cookie, as Jupyter does.

``visus serve`` prints the chat's URL with its token (``/?token=...``). Opening it, the
page route checks the token, sets it in a cookie (HttpOnly: no script reads it;
SameSite=Strict; Secure over https; named for the port, :func:`cookie_name`) and
redirects to ``/``, so the token leaves the address bar and the history. A wrong token
is not kept: the page is served with it still in the address, and the page drops it and
asks for the token. The token dialog posts it to ``POST /web/login`` (``{"token"}``),
which sets the same cookie or answers 401. From then on every request the page makes
carries the cookie, which :class:`~visus.tether.server.TokenGate` takes like the bearer
token, from the page's own origin only.

Example:
    >>> [r.path for r in router.routes]
    ['/web/login']
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import RedirectResponse
from pydantic import BaseModel, ConfigDict, Field

from visus.tether.server import cookie_name, token_matches
from visus.web.api import error_response

__all__ = ["COOKIE_MAX_AGE_SECONDS", "LOGIN_PATH", "Login", "router", "signed_in_redirect"]

#: Where the token dialog posts the token.
LOGIN_PATH = "/web/login"
#: How long the browser keeps the cookie (a new token at the next start ends it sooner).
COOKIE_MAX_AGE_SECONDS = 30 * 24 * 3600


class Login(BaseModel):
    """The token dialog's body."""

    model_config = ConfigDict(extra="forbid")
    token: str = Field(min_length=1, max_length=512)


def _set_cookie(response: Response, request: Request, token: str) -> None:
    response.set_cookie(
        cookie_name(request.headers.get("host", "")),
        token,
        max_age=COOKIE_MAX_AGE_SECONDS,
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def signed_in_redirect(request: Request) -> Response | None:
    """For ``GET /?token=...`` with the server's token: a redirect to ``/`` that sets the
    cookie; None for any other request (the page is served as it is)."""
    token = getattr(request.app.state, "token", None)
    given = request.query_params.get("token")
    if not token or given is None or not token_matches(given, token):
        return None
    response = RedirectResponse("/", status_code=303, headers={"Cache-Control": "no-store"})
    _set_cookie(response, request, token)
    return response


router = APIRouter(include_in_schema=False)


@router.post(LOGIN_PATH, status_code=204, response_model=None)
async def login(body: Login, request: Request) -> Response:
    """Trade the token for the cookie (204), or 401 for a wrong one."""
    token = getattr(request.app.state, "token", None)
    if token and not token_matches(body.token, token):
        return error_response(401, "unauthorized", "that token was refused")
    response = Response(status_code=204)
    if token:
        _set_cookie(response, request, token)
    return response
