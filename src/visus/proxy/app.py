"""The proxy's ASGI app: three rewriting endpoints, ``/stats``, and a passthrough.

* ``POST /v1/messages`` (and ``/v1/messages/count_tokens``): Anthropic Messages.
* ``POST /v1/chat/completions``: OpenAI Chat Completions.
* ``POST /v1/responses``: OpenAI Responses.
* ``GET /stats``: :class:`~visus.proxy.stats.ProxyStats` as JSON.
* anything else: forwarded to the upstream as it is.

A rewriting endpoint parses the JSON body, lets its protocol module edit the image
parts (in a worker thread: fitting is CPU work), and forwards the original bytes when
nothing was touched. Without a token the app answers loopback names only
(:class:`~visus.tether.guard.LoopbackGuard`, as ``visus serve``); with one, every
request must carry it in ``x-visus-token``.

Example:
    >>> app = create_proxy_app(ProxyConfig(upstream="https://api.anthropic.com"))
    >>> sorted(r.path for r in app.routes)[:3]
    ['/stats', '/v1/chat/completions', '/v1/messages']
"""

from __future__ import annotations

import functools
import hmac
import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio.to_thread
import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from visus import limits
from visus.errors import ConfigError
from visus.proxy import anthropic, openai_chat, openai_responses
from visus.proxy.edit import Edit, ImageNote
from visus.proxy.rejection import explain
from visus.proxy.stats import ProxyStats
from visus.proxy.transport import (
    PROXY_TOKEN_HEADER,
    forward_headers,
    new_client,
    reply_headers,
    stream_body,
    upstream_base,
    upstream_url,
)
from visus.retention import RetentionPolicy
from visus.tether.guard import LoopbackGuard

__all__ = ["ProxyConfig", "create_proxy_app"]

logger = logging.getLogger("visus.proxy")

Rewrite = Callable[..., Edit]

#: Request path -> the protocol module that edits its body.
PROTOCOLS: dict[str, Rewrite] = {
    "/v1/messages": anthropic.rewrite,
    "/v1/messages/count_tokens": anthropic.rewrite,
    "/v1/chat/completions": openai_chat.rewrite,
    "/v1/responses": openai_responses.rewrite,
}

# A provider refuses a request it cannot take with one of these.
_REFUSALS = frozenset({400, 413, 422})


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    """What ``visus proxy`` runs with (``[proxy]`` in visus.toml, or the command's options).

    ``upstream`` is the provider's base URL (``https://api.anthropic.com``,
    ``https://api.openai.com``; a trailing ``/v1`` is dropped). ``live_turns``
    turns retention on: images of older turns become descriptors, the window moving
    ``chunk`` turns at a time.
    """

    upstream: str
    live_turns: int | None = None
    chunk: int = 1
    token: str | None = None

    def __post_init__(self) -> None:
        if not self.upstream.startswith(("http://", "https://")):
            raise ConfigError(f"proxy upstream must be an http(s) URL, got {self.upstream!r}")
        if self.live_turns is not None:
            RetentionPolicy(live_turns=self.live_turns, chunk=self.chunk)  # validates both

    @property
    def policy(self) -> RetentionPolicy | None:
        if self.live_turns is None:
            return None
        return RetentionPolicy(live_turns=self.live_turns, chunk=self.chunk)


@dataclass(slots=True)
class _Proxy:
    config: ProxyConfig
    stats: ProxyStats = field(default_factory=ProxyStats)
    client: httpx.AsyncClient | None = None

    def http(self) -> httpx.AsyncClient:
        if self.client is None:
            self.client = new_client()
        return self.client


def _proxy(request: Request) -> _Proxy:
    proxy: _Proxy = request.app.state.proxy
    return proxy


def _error(status: int, kind: str, message: str) -> JSONResponse:
    # The shape both OpenAI and Anthropic SDKs read a message from.
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return JSONResponse(body, status_code=status)


def _too_large() -> Response:
    return _error(
        413,
        "request_too_large",
        f"visus proxy: request body over {limits.PROXY_MAX_BODY_BYTES} bytes "
        "(PROXY_MAX_BODY_BYTES)",
    )


async def _read(request: Request) -> bytes | None:
    """The request body, or None past the proxy's body cap."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limits.PROXY_MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _log(request: Request, body: dict[str, Any], edit: Edit) -> None:
    # What changed, never what was sent: no headers (keys), no text, no pixels.
    logger.info(
        "%s model=%s images=%d fitted=%d hoisted=%d repaired=%d elided=%d "
        "saved=%d bytes ~%d image tokens",
        request.url.path,
        body.get("model"),
        edit.images,
        edit.fitted,
        edit.hoisted,
        edit.repaired,
        edit.elided,
        edit.bytes_saved,
        edit.tokens_saved,
    )


async def _forward(request: Request, content: bytes, notes: list[ImageNote]) -> Response:
    proxy = _proxy(request)
    client = proxy.http()
    url = upstream_url(proxy.config.upstream, request.url.path, request.scope["query_string"])
    outgoing = client.build_request(
        request.method, url, headers=forward_headers(request.headers.raw), content=content
    )
    try:
        response = await client.send(outgoing, stream=True)
    except httpx.HTTPError as e:
        proxy.stats.upstream_errors += 1
        return _error(
            502,
            "api_error",
            f"visus proxy: the upstream {upstream_base(proxy.config.upstream)} "
            f"did not answer ({type(e).__name__})",
        )
    if notes and response.status_code in _REFUSALS:
        try:
            raw = await response.aread()
        finally:
            await response.aclose()
        headers = reply_headers(response.headers, keep_encoding=False)
        try:
            explained = explain(json.loads(raw), notes)
        except ValueError:
            explained = None
        if explained is None:
            return Response(raw, status_code=response.status_code, headers=headers)
        proxy.stats.image_rejections += 1
        logger.warning("%s %s", request.url.path, explained["error"]["message"])
        return JSONResponse(explained, status_code=response.status_code, headers=headers)
    return StreamingResponse(
        stream_body(response),
        status_code=response.status_code,
        headers=reply_headers(response.headers),
    )


async def rewrite_endpoint(request: Request) -> Response:
    """Edit the images of a Messages, Chat Completions or Responses body, then forward."""
    proxy = _proxy(request)
    raw = await _read(request)
    if raw is None:
        return _too_large()
    proxy.stats.requests += 1
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return await _forward(request, raw, [])  # the upstream says what is wrong with it
    rewrite = PROTOCOLS[request.url.path]
    try:
        edit = await anyio.to_thread.run_sync(
            functools.partial(rewrite, body, policy=proxy.config.policy)
        )
    except Exception:  # a proxy bug must not cost the user the request
        logger.exception("%s: could not edit the request; forwarding it as it is", request.url.path)
        return await _forward(request, raw, [])
    proxy.stats.add(edit)
    if not edit.changed:
        return await _forward(request, raw, edit.notes)
    _log(request, body, edit)
    content = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    return await _forward(request, content, edit.notes)


def _misdirected(request: Request) -> str | None:
    """Why a request for an API the proxy edits came on the wrong path, if it did.

    An OpenAI base URL without ``/v1``, or an Anthropic one with it, sends the request
    past the image editing to a path the provider answers with a bare 404.
    """
    path = request.url.path
    base = str(request.base_url).rstrip("/")
    for api in PROTOCOLS:
        if path == api.removeprefix("/v1"):
            return (
                f"visus proxy: {request.method} {path} is not an API path here; "
                f"an OpenAI client's base URL is {base}/v1"
            )
        if path == "/v1" + api:
            client = "an Anthropic" if api.startswith("/v1/messages") else "an OpenAI"
            fixed = base if client == "an Anthropic" else base + "/v1"
            return (
                f"visus proxy: {request.method} {path} has /v1 twice; "
                f"{client} client's base URL is {fixed}"
            )
    return None


async def passthrough_endpoint(request: Request) -> Response:
    """Any other path (``/v1/models``, ...): forwarded unchanged."""
    wrong = _misdirected(request) if request.method == "POST" else None
    if wrong is not None:
        return _error(404, "not_found_error", wrong)
    raw = await _read(request)
    if raw is None:
        return _too_large()
    return await _forward(request, raw, [])


async def stats_endpoint(request: Request) -> Response:
    """What the proxy has done since it started."""
    return JSONResponse(_proxy(request).stats.as_dict())


routes = [
    Route("/stats", stats_endpoint, methods=["GET"]),
    *(Route(path, rewrite_endpoint, methods=["POST"]) for path in PROTOCOLS),
    Route(
        "/{path:path}",
        passthrough_endpoint,
        methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"],
    ),
]


class TokenGate:
    """Refuse requests without the proxy's token (``x-visus-token``) when one is set."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = dict(scope["headers"]).get(PROXY_TOKEN_HEADER.encode(), b"")
            if not hmac.compare_digest(given, self.token):
                await _error(
                    401,
                    "authentication_error",
                    f"visus proxy: missing or wrong {PROXY_TOKEN_HEADER}",
                )(scope, receive, send)
                return
        await self.app(scope, receive, send)


@asynccontextmanager
async def _lifespan(app: Starlette) -> AsyncIterator[None]:
    yield
    proxy: _Proxy = app.state.proxy
    if proxy.client is not None:
        await proxy.client.aclose()


def create_proxy_app(config: ProxyConfig) -> Starlette:
    """The proxy app for ``config`` (serve it with uvicorn, or ``visus proxy``)."""
    app = Starlette(routes=routes, lifespan=_lifespan)
    app.state.proxy = _Proxy(config)
    if config.token:
        app.add_middleware(TokenGate, token=config.token)
    else:
        app.add_middleware(LoopbackGuard)
    return app
