"""The proxy's token gate: with a token set, every request but the probes carries it.

Example:
    >>> TokenGate(None, "t").public == ops.PROBES  # type: ignore[arg-type]
    True
"""

from __future__ import annotations

import hmac

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from visus.proxy.transport import PROXY_TOKEN_HEADER
from visus.tether import ops

__all__ = ["TokenGate"]


class TokenGate:
    """Refuse requests without the proxy's token (``x-visus-token``) when one is set."""

    def __init__(self, app: ASGIApp, token: str, *, public: frozenset[str] = ops.PROBES) -> None:
        self.app = app
        self.token = token.encode()
        self.public = public

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] not in self.public:
            headers = dict(scope["headers"])
            given = headers.get(PROXY_TOKEN_HEADER.encode(), b"")
            if scope["path"] == "/metrics" and not given:
                # A scraper sends Authorization: Bearer (Prometheus' own setting).
                scheme, _, given = headers.get(b"authorization", b"").partition(b" ")
                given = given if scheme.lower() == b"bearer" else b""
            if not hmac.compare_digest(given, self.token):
                body = {
                    "type": "error",
                    "error": {
                        "type": "authentication_error",
                        "message": f"visus proxy: missing or wrong {PROXY_TOKEN_HEADER}",
                    },
                }
                await JSONResponse(body, status_code=401)(scope, receive, send)
                return
        await self.app(scope, receive, send)
