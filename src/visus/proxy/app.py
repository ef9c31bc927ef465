"""The proxy's ASGI app: three rewriting endpoints, ``/stats``, and a passthrough.

* ``POST /v1/messages`` (and ``/v1/messages/count_tokens``): Anthropic Messages.
* ``POST /v1/chat/completions``: OpenAI Chat Completions.
* ``POST /v1/responses``: OpenAI Responses.
* ``GET /stats``: :class:`~visus.proxy.stats.ProxyStats` as JSON.
* ``/mcp``: the proxy's MCP server, ``restore_image`` (:mod:`visus.proxy.mcp`).
* any other path under ``/v1``: forwarded to the upstream as it is.

Paths are taken as clients spell them (``/messages`` and ``/v1/v1/messages`` are
``/v1/messages``) and one that leaves ``/v1`` is refused (:mod:`visus.proxy.paths`).
A rewriting endpoint parses the JSON body (decompressed first if the client
compressed it), lets its protocol module edit the image parts (in a worker thread:
fitting is CPU work), and forwards the original bytes when nothing was touched. The
upstream's answer is awaited as long as the client waits for it. Without a token the
app answers loopback names only (:class:`~visus.tether.guard.LoopbackGuard`, as
``visus serve``); with one, every request must carry it in ``x-visus-token``. Either
way a request whose ``Origin`` is not the proxy's own is refused
(:class:`~visus.tether.guard.OriginGuard`); SDK clients send none.

Example:
    >>> app = create_proxy_app(ProxyConfig(upstream="https://api.anthropic.com"))
    >>> [r.path for r in app.routes]
    ['/mcp', '/healthz', '/readyz', '/metrics', '/stats', '/{path:path}']
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

import anyio.to_thread
import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from visus import limits
from visus.budget import MEMORY, BodyBudget
from visus.errors import BusyError, ConfigError, TooLargeError
from visus.proxy import anthropic, openai_chat, openai_responses
from visus.proxy.cache import FitCache
from visus.proxy.edit import Edit, ImageNote
from visus.proxy.encoding import (
    BodyTooLarge,
    UnknownCoding,
    decode_body,
    parse_json,
    serialise_json,
)
from visus.proxy.gate import TokenGate
from visus.proxy.mcp import RestoreServer
from visus.proxy.paths import API_PREFIX, api_path, upstream_base, upstream_url
from visus.proxy.reasoning import BINDING_BETA, with_beta
from visus.proxy.rejection import explained_refusal
from visus.proxy.replies import Reader
from visus.proxy.stats import ProxyStats, edit_attributes, log_edit, tap_reply
from visus.proxy.transport import forward_headers, new_client, reply_headers, stream_body
from visus.retention import RetentionPolicy, evicted_images
from visus.telemetry import metrics, names, seams
from visus.telemetry.logs import RequestIds
from visus.telemetry.traces import OFF, Span
from visus.tether import ops
from visus.tether.guard import LoopbackGuard, OriginGuard

__all__ = ["UVICORN_OPTIONS", "ProxyConfig", "create_proxy_app"]

logger = logging.getLogger("visus.proxy")

Rewrite = Callable[..., Edit]

#: Request path -> the protocol module that edits its body.
PROTOCOLS: dict[str, Rewrite] = {
    "/v1/messages": anthropic.rewrite,
    "/v1/messages/count_tokens": anthropic.rewrite,
    "/v1/chat/completions": openai_chat.rewrite,
    "/v1/responses": openai_responses.rewrite,
}

#: Request path -> what reads its replies as they pass (:mod:`visus.proxy.replies`).
READERS: dict[str, Callable[[], Reader]] = {
    "/v1/messages": anthropic.MessagesReply,
    "/v1/chat/completions": openai_chat.ChatReply,
    "/v1/responses": openai_responses.ResponsesReply,
}

#: How uvicorn serves the proxy: the upstream's own ``server`` and ``date`` headers
#: pass through, so uvicorn adds none of its own (clients saw two of each).
UVICORN_OPTIONS: Final[Mapping[str, Any]] = MappingProxyType(
    {"server_header": False, "date_header": False}
)


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    """What ``visus proxy`` runs with (``[proxy]`` in visus.toml, or the command's options).

    ``upstream`` is the provider's base URL (see :mod:`visus.proxy.paths`).
    ``live_turns`` turns retention by turns on: images of older turns become
    descriptors, the window moving ``chunk`` turns at a time (default 1). ``live_images``
    keeps at most that many images live, the oldest leaving ``chunk`` at a time
    (default: all but the newest at once, so the forwarded prefix changes once per
    ``live_images`` images). With neither, images stay until the provider's limit,
    then the oldest leave in one batch (``limits.RETENTION_LIMIT_SHARE`` of the cap).

    Example:
        >>> ProxyConfig("https://api.anthropic.com", live_images=8).image_batch
        8
    """

    upstream: str
    live_turns: int | None = None
    chunk: int | None = None
    token: str | None = None
    live_images: int | None = None
    #: The data folder: the savings ledger is kept in ``<data>/proxy/ledger.json``
    #: (None: counted in memory only).
    data: Path | None = None
    #: Serve ``/metrics`` without the token (a scraper inside the operator's network).
    open_metrics: bool = False
    #: Append-only: the first eviction waits until the reads cover the reasoning the
    #: client replays (``RetentionPolicy.weigh_reasoning``; off, as measured cheaper).
    weigh_reasoning: bool = False

    def __post_init__(self) -> None:
        if not self.upstream.startswith(("http://", "https://")):
            raise ConfigError(f"proxy upstream must be an http(s) URL, got {self.upstream!r}")
        RetentionPolicy(live_turns=self.live_turns or 1, chunk=self.chunk or 1)  # validates
        if self.live_images is not None:
            evicted_images(0, self.live_images, self.image_batch)  # validates it

    @property
    def image_batch(self) -> int:
        """Images that leave together past ``live_images``: ``chunk``, else the window."""
        return self.chunk or self.live_images or 1

    @property
    def policy(self) -> RetentionPolicy | None:
        """Retention by turns (None: off)."""
        if self.live_turns is None:
            return None
        return RetentionPolicy(live_turns=self.live_turns, chunk=self.chunk or 1)


@dataclass(slots=True)
class _Proxy:
    config: ProxyConfig
    stats: ProxyStats = field(init=False)
    client: httpx.AsyncClient | None = None
    cache: FitCache = field(default_factory=lambda: FitCache(limits.PROXY_FIT_CACHE_BYTES))
    mcp: RestoreServer = field(init=False)

    def __post_init__(self) -> None:
        self.stats = ProxyStats.at(self.config.data)
        self.mcp = RestoreServer(self.cache.elided)

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


async def _send(request: Request, outgoing: httpx.Request) -> httpx.Response | None:
    """Send ``outgoing`` upstream and wait for its answer as long as the client waits.

    No read timeout of the proxy's own: a long reasoning call is the client's to give
    up on (the SDKs wait 600 s, then retry), and a proxy that answered 502 first would
    have it cut and billed again. When the client disconnects, the upstream request
    is cancelled with it (None is returned).
    """
    response: httpx.Response | None = None
    async with anyio.create_task_group() as group:

        async def give_up_with_the_client() -> None:
            # The body was read, so the next message is the disconnect.
            while (await request.receive())["type"] != "http.disconnect":
                pass
            group.cancel_scope.cancel()

        group.start_soon(give_up_with_the_client)
        response = await _proxy(request).http().send(outgoing, stream=True)
        group.cancel_scope.cancel()
    return response


async def _forward(
    request: Request,
    path: str,
    content: bytes,
    notes: list[ImageNote],
    *,
    decoded: bool = False,
    beta: str | None = None,
    model: str = "",
    traced: Span = OFF,
) -> Response:
    """Send the request on to ``path`` upstream (``decoded``: ``content`` was decompressed;
    ``beta``: an ``anthropic-beta`` value the proxy adds; ``model``: the body's, for what
    its reply used; ``traced``: the model call's span, ended once the reply has passed)."""
    proxy = _proxy(request)
    anthropic_api = path.startswith("/v1/messages") or "anthropic-version" in request.headers
    url = upstream_url(
        proxy.config.upstream, path, request.scope["query_string"], anthropic=anthropic_api
    )
    headers = forward_headers(request.headers.raw, decoded=decoded)
    if beta is not None:
        headers = with_beta(headers, beta)
    outgoing = proxy.http().build_request(request.method, url, headers=headers, content=content)
    try:
        response = await _send(request, outgoing)
    except httpx.HTTPError as e:
        proxy.stats.upstream_errors += 1
        return _error(
            502,
            "api_error",
            f"visus proxy: the upstream {upstream_base(proxy.config.upstream)} "
            f"did not answer ({type(e).__name__})",
        )
    if response is None:  # the client left; nobody reads this
        return Response(status_code=499)
    explained = await explained_refusal(response, notes)
    if explained is not None:
        if isinstance(explained, JSONResponse):
            proxy.stats.image_rejections += 1
        return explained
    body = stream_body(response)
    if path in READERS and response.status_code == 200:
        body = tap_reply(proxy.stats, response, body, READERS[path](), model, traced)
    return StreamingResponse(
        metrics.streaming(proxy.stats, body),
        status_code=response.status_code,
        headers=reply_headers(response.headers),
    )


def _decoded(request: Request, raw: bytes) -> bytes | Response | None:
    """A compressed body decompressed (None: not compressed, or not in a coding we read)."""
    coding = request.headers.get("content-encoding")
    if not coding or coding.strip().lower() == "identity":
        return None
    try:
        return decode_body(raw, coding, limit=limits.PROXY_MAX_BODY_BYTES)
    except BodyTooLarge:
        return _too_large()
    except UnknownCoding as e:
        logger.warning("%s: request body in %s; forwarded without editing", request.url.path, e)
        return None


async def _rewrite(request: Request, path: str, held: list[bytes]) -> Response:
    """Edit the images of a Messages, Chat Completions or Responses body, then forward.

    ``held`` is the one reference to the body as read, and ``work`` to what it decodes
    and parses to: once the edit is done they are let go, so while the upstream answers
    only what goes to it is held (``python -m benchmarks budgets``: a 250 MB body peaked
    at 1,225 MB before, 950 MB now; four 128 MB gzip bodies, ``gzip``: 1,028 -> 3 MB).
    """
    started = time.perf_counter()
    raw = held.pop()
    proxy = _proxy(request)
    proxy.stats.requests += 1
    plain = _decoded(request, raw)
    if isinstance(plain, Response):
        return plain
    try:
        # BodyBudget counted the compressed bytes: what they decode to counts too, or
        # a few 256 KB gzip bombs would hold 256 MB each. No wait: the decode is done.
        decoded = MEMORY.reserve(len(plain or b""), what="a decompressed request body", wait=0)
    except TooLargeError as e:  # BusyError too
        code = "busy" if isinstance(e, BusyError) else "too_large"
        return JSONResponse(_budget_error(code, str(e)), status_code=503 if code == "busy" else 413)
    try:
        body = parse_json(raw if plain is None else plain)
        model = body.get("model") if body is not None else None
        work = _Work(raw, plain, body)
        del raw, plain, body
        with seams.proxied(path, model if isinstance(model, str) else "") as traced:
            sending: _Sending = (work.raw, [], False, None)
            if work.body is not None:
                sending = await _edited(request, path, work, started, traced)
            work.plain = work.body = None
            decoded.release()  # what is left is what goes upstream
            content, notes, was_decoded, beta = sending
            del sending
            response = await _forward(
                request,
                path,
                content,
                notes,
                decoded=was_decoded,
                beta=beta,
                model=model if isinstance(model, str) else "",
                traced=traced,
            )
            traced.set({names.HTTP_STATUS: response.status_code})
            return response
    finally:
        decoded.release()


@dataclass
class _Work:
    """A request body as read, decoded and parsed: the one reference to each, so what
    the forward does not send is let go before it waits on the upstream."""

    raw: bytes
    plain: bytes | None
    body: dict[str, Any] | None


#: What goes upstream: the body, the notes naming its images, whether it was decoded, and
#: an ``anthropic-beta`` value the proxy adds (:mod:`visus.proxy.reasoning`).
_Sending = tuple[bytes, list[ImageNote], bool, str | None]


async def _edited(
    request: Request, path: str, work: _Work, started: float, traced: Span
) -> _Sending:
    """The rest of :func:`_rewrite`: edit the body, count it; what to forward (the
    body, the notes, whether it was decoded), ``work`` emptied of all else."""
    proxy = _proxy(request)
    body = work.body
    assert body is not None
    rewrite = functools.partial(
        PROTOCOLS[path],
        body,
        policy=proxy.config.policy,
        live_images=proxy.config.live_images,
        chunk=proxy.config.image_batch,
        cache=proxy.cache,
        weigh_reasoning=proxy.config.weigh_reasoning,
    )
    decoded = work.plain is not None
    work.plain = work.body = None
    try:
        edit = await anyio.to_thread.run_sync(rewrite)
    except Exception:  # a proxy bug must not cost the user the request
        logger.exception("%s: could not edit the request; forwarding it as it is", path)
        return work.raw, [], False, None
    content = serialise_json(body) if edit.changed else None
    model = body.get("model")
    name = model if isinstance(model, str) else ""
    proxy.stats.add(edit, model=name, seconds=time.perf_counter() - started)
    traced.set(edit_attributes(edit))
    if content is None:
        return work.raw, edit.notes, False, None
    log_edit(request.url.path, body.get("model"), edit)
    work.raw = b""
    return content, edit.notes, decoded, BINDING_BETA if edit.binding.opted_in else None


async def api_endpoint(request: Request) -> Response:
    """Every API path: the three the proxy edits, and any other forwarded as it is."""
    path = api_path(request.url.path)
    if path is None:
        return _error(
            404,
            "not_found_error",
            f"visus proxy: {request.url.path!r} is not an API path here; the proxy "
            f"forwards {API_PREFIX}/... only (base URL {str(request.base_url).rstrip('/')} "
            f"for Anthropic clients, {str(request.base_url).rstrip('/')}{API_PREFIX} for "
            "OpenAI clients)",
        )
    raw = await _read(request)
    if raw is None:
        return _too_large()
    if request.method == "POST" and path in PROTOCOLS:
        held, raw = [raw], b""  # _rewrite holds the one reference
        return await _rewrite(request, path, held)
    return await _forward(request, path, raw, [])


async def stats_endpoint(request: Request) -> Response:
    """What the proxy has done since it started."""
    return JSONResponse(_proxy(request).stats.as_dict())


routes = [
    *ops.routes,
    Route("/stats", stats_endpoint, methods=["GET"]),
    Route(
        "/{path:path}",
        api_endpoint,
        methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"],
    ),
]


@asynccontextmanager
async def _lifespan(app: Starlette) -> AsyncIterator[None]:
    proxy: _Proxy = app.state.proxy
    app.state.loop = asyncio.get_running_loop()
    ledger = proxy.stats.ledger
    async with proxy.mcp.running(), anyio.create_task_group() as group:
        group.start_soon(ledger.keep_written)
        try:
            yield
        finally:
            group.cancel_scope.cancel()
    await anyio.to_thread.run_sync(ledger.flush)  # what the last seconds saved
    if proxy.client is not None:
        await proxy.client.aclose()


def _budget_error(code: str, message: str) -> dict[str, Any]:
    kind = "overloaded_error" if code == "busy" else "request_too_large"
    return {"type": "error", "error": {"type": kind, "message": f"visus proxy: {message}"}}


def create_proxy_app(config: ProxyConfig) -> Starlette:
    """The proxy app for ``config`` (serve it with uvicorn, or ``visus proxy``)."""
    proxy = _Proxy(config)
    app = Starlette(routes=[*proxy.mcp.routes(), *routes], lifespan=_lifespan)
    app.state.proxy = proxy
    app.state.draining = False
    # /metrics: the process's counters and these (the same as /stats and the ledger).
    app.state.metrics = metrics.own_registry(proxy.stats.metrics)
    # Request bodies count against the process's memory budget (inside the gates:
    # a request they refuse holds nothing).
    app.add_middleware(BodyBudget, error_body=_budget_error)
    # The proxy serves no page: a browser request from any origin but its own is a page
    # on another site or port driving it (with the user's provider, or a keyless local
    # upstream). SDK clients send no Origin. Bodies go on as their clients typed them
    # (an OpenAI file upload is a form), so only the origin is checked.
    app.add_middleware(OriginGuard, json_bodies=False)
    if config.token:
        public = ops.PROBES | ({"/metrics"} if config.open_metrics else set())
        app.add_middleware(TokenGate, token=config.token, public=frozenset(public))
    else:
        app.add_middleware(LoopbackGuard)
    # Outermost: every answer (a 401 too) is counted and carries its request id.
    app.add_middleware(metrics.CountRequests, server="proxy")
    app.add_middleware(RequestIds)
    return app
