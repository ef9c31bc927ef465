"""The web chat's sign-in: the page keeps the token in its own origin's storage.

``visus serve`` prints the chat's URL with its token (``/?token=...``). The page takes
the token from its address, keeps it in ``localStorage`` (which belongs to the page's
origin: scheme, host and port) and removes it from the address and the history; every
request the page makes carries it as ``Authorization: Bearer <token>``, the stream too
(read with ``fetch``). The token dialog posts a token to ``POST /web/login``
(``{"token"}``): 204 for the server's own, 401 for any other, which the page then keeps
the same way.

No cookie holds it: a browser sends a host's cookies to every port of that host, so a
cookie holding the token reached any other program serving on the machine, which could
use it as the bearer token (issue 33). A cookie an older version set is cleared when
the page loads. Sign-in attempts count against the same per-address bound as wrong
bearer tokens (:class:`~visus.tether.gate.Failures`): past it, 429.

Example:
    >>> [r.path for r in router.routes]
    ['/web/login']
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from visus.tether.gate import Failures, client_address, token_matches, too_many
from visus.web.api import error_response

__all__ = ["LOGIN_PATH", "Login", "forget_old_cookie", "router"]

#: Where the token dialog posts the token.
LOGIN_PATH = "/web/login"


class Login(BaseModel):
    """The token dialog's body."""

    model_config = ConfigDict(extra="forbid")
    token: str = Field(min_length=1, max_length=512)


def _old_cookie(host: str) -> str:
    """The cookie an older visus set for the server a ``Host`` header names."""
    _, sep, port = host.rpartition(":")
    return f"visus-token-{port}" if sep and port.isdigit() else "visus-token"


def forget_old_cookie(request: Request, response: Response) -> None:
    """Expire the token cookie an older version of the page was given, if the browser
    still sends it (it would go on reaching every port of this host)."""
    name = _old_cookie(request.headers.get("host", ""))
    if name in request.cookies:
        response.delete_cookie(name, path="/")


router = APIRouter(include_in_schema=False)


@router.post(LOGIN_PATH, status_code=204, response_model=None)
async def login(body: Login, request: Request) -> Response:
    """Whether ``body.token`` is the server's (204) or not (401); past the bound on
    wrong tokens from this address, 429."""
    token = getattr(request.app.state, "token", None)
    failures: Failures | None = getattr(request.app.state, "auth_failures", None)
    client = client_address(request.scope)
    if failures is not None and (wait := failures.blocked(client)) > 0:
        return too_many(wait)
    if token and not token_matches(body.token, token):
        if failures is not None:
            failures.add(client)
        return error_response(401, "unauthorized", "that token was refused")
    return Response(status_code=204)
