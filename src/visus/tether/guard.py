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
reached by any name. Either way :class:`OriginGuard` (``visus serve``, ``visus proxy``)
refuses any ``Origin`` but the server's own (scheme, host and port: another local web
app on another port is another origin) and (``visus serve``) state-changing requests
whose body is not JSON.

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

__all__ = ["IN_PROCESS_HOST", "LoopbackGuard", "OriginGuard", "same_origin"]

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


#: Methods that change state; their bodies must be JSON (see :class:`OriginGuard`).
_STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_DEFAULT_PORTS = {"http": "80", "https": "443", "ws": "80", "wss": "443"}


def _origin(scheme: str, host: str) -> str | None:
    """``scheme://host[:port]`` lowercased with the scheme's default port dropped, or
    None when ``host`` is not a plain ``host[:port]``."""
    match = _PLAIN_HOST.fullmatch(host)
    if match is None:
        return None
    name, port = match.group(1).lower(), (match.group(2) or "")[1:]
    scheme = scheme.lower()
    if port == _DEFAULT_PORTS.get(scheme):
        port = ""
    web = {"ws": "http", "wss": "https"}.get(scheme, scheme)
    return f"{web}://{name}" + (f":{port}" if port else "")


def same_origin(scope: Scope, origin: str) -> bool:
    """Whether ``origin`` (an ``Origin`` header) is this server's own: the request's
    scheme, and its ``Host`` header's name and port.

    Example:
        >>> scope = {"scheme": "http", "headers": [(b"host", b"127.0.0.1:8750")]}
        >>> same_origin(scope, "http://127.0.0.1:8750"), same_origin(scope, "http://127.0.0.1:3000")
        (True, False)
        >>> same_origin(scope, "http://localhost:8750"), same_origin(scope, "null")
        (False, False)
    """
    host = Headers(scope=scope).get("host", "")
    own = _origin(str(scope.get("scheme", "http")), host)
    parts = urlsplit(origin)
    if own is None or not parts.scheme or not parts.netloc or parts.path not in ("", "/"):
        return False
    return _origin(parts.scheme, parts.netloc) == own


#: The body types a page on another origin may send without a CORS preflight (the
#: Fetch standard's CORS-safelisted ``Content-Type`` values), and none at all.
_BLIND_KINDS = frozenset(
    {"", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data"}
)


def _kind(headers: Headers) -> str:
    return headers.get("content-type", "").split(";", 1)[0].strip().lower()


def _body_ok(scope: Scope, headers: Headers) -> bool:
    """JSON, or on a path the app takes raw bytes at (``app.state.raw_body_paths``)
    any type a page cannot send blind.

    Example:
        >>> def ok(kind, path="/v1/x"):
        ...     scope = {"path": path, "headers": [(b"content-type", kind.encode())]}
        ...     return _body_ok(scope, Headers(scope=scope))
        >>> ok("application/json"), ok("application/json; charset=utf-8"), ok("text/plain")
        (True, True, False)
        >>> ok("image/png"), ok("application/vnd.api+json")
        (False, True)
    """
    kind = _kind(headers)
    if kind == "application/json" or (kind.startswith("application/") and kind.endswith("+json")):
        return True
    state = scope["app"].state if "app" in scope else None
    raw: frozenset[str] | set[str] = getattr(state, "raw_body_paths", frozenset())
    return scope.get("path") in raw and kind not in _BLIND_KINDS


def _has_body(headers: Headers) -> bool:
    length = headers.get("content-length")
    return "transfer-encoding" in headers or (length is not None and length.strip() != "0")


class OriginGuard:
    """ASGI middleware refusing what a web page on another origin sends from the user's
    browser, with or without a token:

    - a request whose ``Origin`` is not this server's own origin (scheme, host and port,
      as the request names them; another port on the same host is another origin): 403
      ``cross_origin``;
    - a state-changing request (POST, PUT, PATCH, DELETE) whose body is not JSON
      (``text/plain``, a form: what a page may send without a CORS preflight): 415
      ``unsupported_media_type``. A path that takes raw bytes (the web chat's image
      fitting: ``app.state.raw_body_paths``) takes any type but those a page may send
      blind.

    ``json_bodies=False`` keeps the origin check only: ``visus proxy`` forwards any body
    type its API clients send (an OpenAI file upload is a form), and a page's blind
    post carries an ``Origin``, refused anyway.
    """

    def __init__(self, app: ASGIApp, *, json_bodies: bool = True) -> None:
        self.app = app
        self.json_bodies = json_bodies

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in {"http", "websocket"}:
            headers = Headers(scope=scope)
            origin = headers.get("origin")
            if origin is not None and not same_origin(scope, origin):
                await _refuse(
                    403,
                    "cross_origin",
                    f"requests from {origin} are refused: this server answers its own origin only",
                )(scope, receive, send)
                return
            method = str(scope.get("method", "GET")).upper()
            if (
                self.json_bodies
                and method in _STATE_CHANGING
                and _has_body(headers)
                and not _body_ok(scope, headers)
            ):
                got = _kind(headers) or "none"
                await _refuse(
                    415,
                    "unsupported_media_type",
                    f"body: send JSON with Content-Type: application/json (got {got})",
                )(scope, receive, send)
                return
        await self.app(scope, receive, send)
