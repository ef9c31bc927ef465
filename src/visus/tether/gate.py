"""The token gate in front of every route of a server with a token.

Every request but the public ones (``app.state.public_paths`` and ``public_prefixes``:
the web chat's page and files, its sign-in, ``/openapi.json``, the health probes) needs
``Authorization: Bearer <token>``; a 401 comes before anything reads the body (route
dependencies run only after the body is parsed).

- **No cookie.** A browser sends a host's cookies to every port of it, so a cookie
  holding the token reached any other server on the machine (which could replay it as
  a bearer token). The web chat keeps the token in its origin's own storage (scheme,
  host and port) and sends it as the header; nothing is taken from a cookie.
- **Public routes take small bodies only**: the gate caps them at
  ``limits.PUBLIC_MAX_BODY_BYTES`` (:data:`visus.budget.BODY_CAP`, enforced as the
  body arrives by :class:`visus.budget.BodyBudget`).
- **Guessing is slowed**: a client address that presents a wrong token
  ``limits.AUTH_MAX_FAILURES`` times within ``AUTH_FAILURE_WINDOW_SECONDS`` is refused
  (429) until the window has passed, a right token included: else each answer would
  still tell a right guess from a wrong one (:class:`Failures`; ``web.auth``'s sign-in
  counts too). A request presenting no token guesses nothing: it gets its 401.

Example:
    >>> token_matches("s3cret", "s3cret"), token_matches("guess", "s3cret")
    (True, False)
"""

from __future__ import annotations

import hmac
import time
from collections import OrderedDict, deque

from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from visus import limits
from visus.budget import BODY_CAP

__all__ = ["Failures", "TokenGate", "client_address", "is_public", "token_matches"]


def token_matches(given: str, token: str) -> bool:
    """Constant-time comparison of a presented token with the server's."""
    return hmac.compare_digest(given.encode(), token.encode())


def _error(status: int, code: str, message: str, **headers: str) -> JSONResponse:
    return JSONResponse(
        {"error": {"code": code, "message": message}}, status_code=status, headers=headers
    )


def unauthorized() -> JSONResponse:
    """The 401 every route answers without the token."""
    return _error(
        401,
        "unauthorized",
        "missing or wrong token: send Authorization: Bearer <token> (visus serve prints "
        "it; [server] token or VISUS_TOKEN sets one), or open the web chat at the URL it "
        "prints",
        **{"WWW-Authenticate": "Bearer"},
    )


def is_public(scope: Scope) -> bool:
    """Whether the request's path is served without the token."""
    state = scope["app"].state if "app" in scope else None
    path = str(scope.get("path", ""))
    paths: set[str] = getattr(state, "public_paths", set())
    prefixes: list[str] = getattr(state, "public_prefixes", [])
    return path in paths or any(path.startswith(p) for p in prefixes)


def client_address(scope: Scope) -> str:
    """Who a failed token check is counted against: the peer's address."""
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


class Failures:
    """Failed token checks per client address, in a sliding window.

    Example:
        >>> f = Failures(limit=2, window=60.0)
        >>> f.add("10.0.0.1"); f.add("10.0.0.1"); f.blocked("10.0.0.1") > 0
        True
        >>> f.blocked("10.0.0.2")
        0.0
    """

    def __init__(
        self, *, limit: int | None = None, window: float | None = None, clients: int | None = None
    ) -> None:
        self._limit = limit
        self._window = window
        self._clients = clients
        self._seen: OrderedDict[str, deque[float]] = OrderedDict()

    @property
    def limit(self) -> int:
        return int(limits.AUTH_MAX_FAILURES if self._limit is None else self._limit)

    @property
    def window(self) -> float:
        return float(limits.AUTH_FAILURE_WINDOW_SECONDS if self._window is None else self._window)

    def _recent(self, client: str, now: float) -> deque[float]:
        times = self._seen.get(client)
        if times is None:
            return deque()
        while times and times[0] <= now - self.window:
            times.popleft()
        if not times:
            del self._seen[client]
        return times

    def add(self, client: str) -> None:
        """Count one failed check by ``client``."""
        now = time.monotonic()
        times = self._recent(client, now)
        times.append(now)
        self._seen[client] = times
        self._seen.move_to_end(client)
        cap = int(limits.AUTH_MAX_CLIENTS if self._clients is None else self._clients)
        while len(self._seen) > cap:
            self._seen.popitem(last=False)

    def blocked(self, client: str) -> float:
        """Seconds until ``client`` may try again (0: now)."""
        now = time.monotonic()
        times = self._recent(client, now)
        if len(times) < self.limit:
            return 0.0
        return max(0.0, times[-self.limit] + self.window - now)


def too_many(wait: float) -> JSONResponse:
    """The 429 a client gets after too many wrong tokens."""
    seconds = max(1, int(wait + 0.999))
    return _error(
        429,
        "too_many_failures",
        f"too many wrong tokens from this address; try again in {seconds} s "
        "(limits.AUTH_MAX_FAILURES)",
        **{"Retry-After": str(seconds)},
    )


class TokenGate:
    """ASGI gate: every request but the public ones needs the bearer ``token``; see the
    module docstring. ``failures`` is shared with the web chat's sign-in
    (``app.state.auth_failures``)."""

    def __init__(self, app: ASGIApp, *, token: str, failures: Failures | None = None) -> None:
        self.app = app
        self.token = token
        self.failures = failures or Failures()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if is_public(scope):
            scope[BODY_CAP] = int(limits.PUBLIC_MAX_BODY_BYTES)
            await self.app(scope, receive, send)
            return
        presented = Headers(scope=scope).get("authorization")
        if presented is None:  # no guess: nothing to count, nothing told
            await unauthorized()(scope, receive, send)
            return
        client = client_address(scope)
        wait = self.failures.blocked(client)
        if wait > 0:
            await too_many(wait)(scope, receive, send)
            return
        scheme, _, given = presented.partition(" ")
        if scheme.lower() != "bearer" or not token_matches(given, self.token):
            self.failures.add(client)
            await unauthorized()(scope, receive, send)
            return
        await self.app(scope, receive, send)
