"""Keep browsers from driving a token-less server on loopback.

Without a token, ``visus serve`` trusts whoever can reach its loopback port. A web
page in the user's own browser can reach it too, in two ways this guard closes:

- **Cross-site requests.** A page may POST a "simple" request (``text/plain``) to
  ``http://127.0.0.1:8750`` without a CORS preflight. Browsers mark such requests
  with an ``Origin`` header; a request whose ``Origin`` is not a loopback origin is
  refused (403).
- **DNS rebinding.** A page at ``evil.example`` whose name later resolves to
  127.0.0.1 talks to the server as a same-origin peer and can read its answers. Its
  requests carry ``Host: evil.example``; only loopback hosts (and
  :data:`IN_PROCESS_HOST`, the name in-process clients use) are served (421).

With a token neither applies: the bearer token is the gate, and the server may be
reached by any name.

Example:
    >>> _host_ok("127.0.0.1:8750"), _host_ok("localhost"), _host_ok("evil.example")
    (True, True, False)
    >>> _host_ok("[::1]:8750"), _host_ok("evil.example:80@127.0.0.1")
    (True, False)
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["IN_PROCESS_HOST", "LoopbackGuard"]

#: The host name in-process clients (``httpx.ASGITransport``) address the app by.
IN_PROCESS_HOST = "visus.internal"


def _is_loopback_name(host: str) -> bool:
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost") or host == IN_PROCESS_HOST:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


#: A Host header as RFC 9110 has it: a name or IPv4 address, or an IPv6 literal in
#: brackets, then an optional port. Nothing else (no userinfo "@", no backslash, no
#: path): URL parsers disagree on such forms, and "evil.example:80@127.0.0.1" would
#: read as host 127.0.0.1 to one of them.
_PLAIN_HOST = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(:[0-9]{1,5})?")


def _host_ok(value: str) -> bool:
    match = _PLAIN_HOST.fullmatch(value)
    return match is not None and _is_loopback_name(match.group(1))


def _origin_ok(value: str) -> bool:
    if value == "null":  # sandboxed frames and file:// pages
        return False
    return _is_loopback_name(urlsplit(value).hostname or "")


class LoopbackGuard:
    """ASGI middleware refusing browser-borne requests to a token-less server."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in {"http", "websocket"}:
            headers = Headers(scope=scope)
            host = headers.get("host", "")
            origin = headers.get("origin")
            if not _host_ok(host):
                response = _refuse(
                    421,
                    "misdirected_request",
                    f"this server answers only loopback names without a token, not {host!r}",
                )
                await response(scope, receive, send)
                return
            if origin is not None and not _origin_ok(origin):
                response = _refuse(
                    403,
                    "cross_origin",
                    f"requests from {origin} are refused; set a token to serve other origins",
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _refuse(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)
