"""The tether HTTP API (FastAPI): instances, ingress, long poll and SSE.

Routes (all under ``/v1``, bearer-token protected when a token is set):

- ``POST /v1/instances`` ``{model, tools?, roots?}`` -> 201 instance
- ``GET /v1/instances``, ``GET /v1/instances/{id}``, ``DELETE /v1/instances/{id}``
  (409 for an instance the server itself uses: ``app.state.protected_instances``)
- ``POST /v1/instances/{id}/tether``: one ``user.message`` frame. A body over
  TETHER_MAX_WIRE_BYTES is refused from its Content-Length before it is read (and
  counted while reading when chunked): 413. Bad frames: 400 naming the field.
- ``GET /v1/instances/{id}/tether/poll?after_seq=&session=&wait=&limit=&max_bytes=``
  (``max_bytes`` default TETHER_POLL_DEFAULT_MAX_BYTES: no answer is unbounded)
- ``GET /v1/instances/{id}/tether/stream``: server-sent events, ``id:`` is the
  seq, resumable with ``Last-Event-ID`` (or ``?after_seq=``).

Errors are JSON ``{"error": {"code", "message", "field"?, "limit"?}}``.

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> from visus.tether.runner import TurnOutput
    >>> class Echo:
    ...     async def run_turn(self, *, text, **kw): return TurnOutput(text)
    >>> app = create_app(data_dir=Path(tempfile.mkdtemp()), runner_factory=lambda c: Echo())
    >>> sorted(app.openapi()["paths"])[:2]
    ['/v1/instances', '/v1/instances/{instance_id}']
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import logging
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Header, Query, Request, Response
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException

from visus import limits, paths
from visus.budget import BodyBudget
from visus.errors import (
    ConfigError,
    LimitError,
    NotFoundError,
    PolicyError,
    ReachError,
    VisusError,
)
from visus.store import Store
from visus.telemetry import metrics
from visus.telemetry.logs import RequestIds
from visus.tether import ops
from visus.tether.frames import INGRESS_TYPES, CancelPayload, decode_frame
from visus.tether.gate import Failures, TokenGate, token_matches
from visus.tether.guard import LoopbackGuard, OriginGuard
from visus.tether.instance import TurnsBusyError
from visus.tether.instances import BusyError, Registry
from visus.tether.limits import FrameError, TetherLimitError, check_wire, load_json
from visus.tether.ring import Page
from visus.tether.runner import MCP_SERVERS_KEY, RunnerFactory
from visus.tether.schemas import (
    FORBIDDEN,
    FRAME_IN_SCHEMA,
    SESSION_PATTERN,
    Accepted,
    ErrorBody,
    InstanceCreate,
    InstanceList,
    InstanceOut,
    PollOut,
)
from visus.tether.shared import RawPage
from visus.tether.stopping import uvicorn_handle_exit
from visus.tether.streams import StreamSlots, events, page_pieces, stop_streams

__all__ = [
    "ERROR_STATUS",
    "FRAME_IN_SCHEMA",
    "InUseError",
    "TokenGate",
    "check_bind",
    "create_app",
    "encode_page",
    "error_status",
    "get_registry",
    "is_loopback",
    "router",
    "serve",
    "serve_dir",
    "stop_streams",
    "tether_server",
    "token_matches",
]

log = logging.getLogger(__name__)


def _err(status: int, code: str, message: str, **extra: str | None) -> JSONResponse:
    detail = {"code": code, "message": message, **{k: v for k, v in extra.items() if v}}
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse({"error": detail}, status_code=status, headers=headers)


def encode_page(page: Page | RawPage) -> bytes:
    """A poll answer built from the frames' own encoding (no re-serialising of images)."""
    return b"".join(page_pieces(page))


_E = {
    400: {"model": ErrorBody, "description": "a malformed request; the error names the field"},
    401: {"model": ErrorBody, "description": "missing or wrong bearer token"},
    403: {
        "model": ErrorBody,
        "description": "the operator's policy refuses it (outside_reach, forbidden)",
    },
    404: {"model": ErrorBody, "description": "no such instance"},
    413: {"model": ErrorBody, "description": "over a tether limit; the error names it"},
    409: {"model": ErrorBody, "description": "the instance is in use by this server itself"},
    429: {"model": ErrorBody, "description": "too many turns in flight; retry after a while"},
}


class InUseError(VisusError):
    """An instance the server itself relies on (the web chat's) cannot be deleted."""


@dataclass(frozen=True, slots=True)
class _Status:
    """How one kind of error is answered: status, error code, and the limit it names."""

    status: int
    code: str
    limit: str | None = None
    retry_after: str | None = None


#: Exception -> answer, first match wins (so subclasses come before their bases).
#: Any other VisusError is a 400 ``invalid_input``.
ERROR_STATUS: tuple[tuple[type[VisusError], _Status], ...] = (
    (NotFoundError, _Status(404, "not_found")),
    (ReachError, _Status(403, "outside_reach")),
    (PolicyError, _Status(403, "forbidden")),
    (InUseError, _Status(409, "in_use")),
    (TurnsBusyError, _Status(429, "busy", limit="TETHER_TURNS_MAX_BYTES", retry_after="1")),
    (BusyError, _Status(429, "busy", limit="TETHER_MAX_PENDING_TURNS", retry_after="1")),
    (TetherLimitError, _Status(413, "too_large")),
    (LimitError, _Status(413, "too_large")),
)
_INVALID = _Status(400, "invalid_input")


def error_status(exc: VisusError) -> _Status:
    """The answer for ``exc`` from :data:`ERROR_STATUS`.

    Example:
        >>> error_status(NotFoundError("no such instance")).status
        404
        >>> error_status(ConfigError("model: required")).code
        'invalid_input'
    """
    for kind, status in ERROR_STATUS:
        if isinstance(exc, kind):
            return status
    return _INVALID


async def _visus_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, VisusError)
    st = error_status(exc)
    field = getattr(exc, "field", None)
    limit = getattr(exc, "limit", None) if isinstance(exc, TetherLimitError) else st.limit
    resp = _err(st.status, st.code, str(exc), field=field, limit=limit)
    if st.retry_after:
        resp.headers["Retry-After"] = st.retry_after
    return resp


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    codes = {400: "invalid_input", 404: "not_found", 405: "method_not_allowed"}
    code = codes.get(exc.status_code, f"http_{exc.status_code}")
    return _err(exc.status_code, code, str(exc.detail))


async def _invalid(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0] if exc.errors() else {}
    field = ".".join(str(p) for p in first.get("loc", ()))
    if first.get("type") == FORBIDDEN:
        return _err(403, "forbidden", f"{field}: {first.get('msg')}", field=field)
    ctype = request.headers.get("content-type", "")
    if field == "body" and "json" not in ctype:
        # curl -d sends a form by default; the pydantic message would not say so.
        got = ctype.split(";")[0] or "none"
        message = f"body: send JSON with Content-Type: application/json (got {got})"
        return _err(400, "invalid_input", message, field=field)
    return _err(400, "invalid_input", f"{field}: {first.get('msg', 'invalid')}", field=field)


# The bearer token is checked by TokenGate (ASGI middleware, before any body is read),
# so this scheme never refuses anything: it is here only so that /openapi.json declares
# the bearer security scheme on every /v1 route.
_bearer = HTTPBearer(auto_error=False, description="VISUS_TOKEN, when the server has one")


async def _openapi_bearer(
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    return None


def get_registry(request: Request) -> Registry:
    """The app's instance registry (a route dependency)."""
    registry: Registry = request.app.state.registry
    return registry


Reg = Annotated[Registry, Depends(get_registry)]
#: An instance id in a route's path: one no instance can have (a NUL, 5000 characters)
#: is a 400 on every store (PostgreSQL answered it with a DataError, files with 404).
_InstanceId = Annotated[
    str, PathParam(pattern=SESSION_PATTERN, max_length=limits.TETHER_MAX_ID_CHARS)
]
#: A poll's or stream's ``session`` filter, spelled as a frame's (a NUL was a PostgreSQL
#: DataError on a shared store, and matched nothing on files).
_Session = Annotated[
    str | None,
    Query(
        pattern=SESSION_PATTERN,
        max_length=limits.TETHER_MAX_ID_CHARS,
        description="only this session",
    ),
]

_TOO_MANY = {"model": ErrorBody, "description": "busy, or too many wrong tokens; see Retry-After"}
router = APIRouter(
    prefix="/v1",
    dependencies=[Depends(_openapi_bearer)],
    responses={401: _E[401], 429: _TOO_MANY},
)


@router.post(
    "/instances",
    status_code=201,
    response_model=InstanceOut,
    responses={400: _E[400], 403: _E[403]},
)
async def create_instance(body: InstanceCreate, registry: Reg) -> dict[str, Any]:
    """Create an instance: an agent with a model, tools and roots, within what the
    server's operator allows (a root outside it: 403 ``outside_reach``; an MCP server or
    a write tool it did not allow: 403 ``forbidden``)."""
    # The runner factory reads mounted MCP servers from extra (tether knows no agent).
    mcp = [m.model_dump(exclude_defaults=True) for m in body.mcp_servers or ()]
    extra = {MCP_SERVERS_KEY: mcp} if mcp else None
    # Off the loop: it builds the runner and writes the config (on PostgreSQL, a query).
    inst = await asyncio.to_thread(
        registry.create, model=body.model, tools=body.tools, roots=body.roots, extra=extra
    )
    await inst.refresh()
    return inst.describe()


@router.get("/instances", response_model=InstanceList)
async def list_instances(registry: Reg) -> dict[str, Any]:
    found = await registry.current()
    for inst in found:
        await inst.refresh()
    return {"instances": [inst.describe() for inst in found]}


@router.get("/instances/{instance_id}", response_model=InstanceOut, responses={404: _E[404]})
async def get_instance(instance_id: _InstanceId, registry: Reg) -> dict[str, Any]:
    inst = await registry.find(instance_id)
    await inst.refresh()
    return inst.describe()


@router.delete(
    "/instances/{instance_id}",
    status_code=204,
    response_class=Response,
    responses={404: _E[404], 409: _E[409]},
)
async def delete_instance(instance_id: _InstanceId, registry: Reg, request: Request) -> Response:
    await registry.find(instance_id)  # 404 first
    user = request.app.state.protected_instances.get(instance_id)
    if user:
        raise InUseError(
            f"instance {instance_id!r} is {user}; it cannot be deleted while the server runs"
        )
    await registry.delete(instance_id)
    return Response(status_code=204)


@router.post(
    "/instances/{instance_id}/tether",
    status_code=202,
    response_model=Accepted,
    responses={400: _E[400], 404: _E[404], 413: _E[413], 429: _E[429]},
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": FRAME_IN_SCHEMA}},
        }
    },
)
async def ingress(instance_id: _InstanceId, registry: Reg, request: Request) -> dict[str, Any]:
    """Send one ``user.message`` frame (the turn runs in the background), or a
    ``turn.cancel`` frame naming a message's ``msg_id`` in ``payload.target`` to stop
    its turn (404 when no such turn is in flight)."""
    inst = await registry.find(instance_id)
    await inst.refresh()  # a shared store: turns in flight on every replica
    length = request.headers.get("content-length")
    if length is not None and not length.isdigit():
        raise FrameError("Content-Length: not a number", field="Content-Length")
    if length is None or int(length) > limits.TETHER_SMALL_FRAME_BYTES:
        # Before the body is read, and again before the turn starts; a small body may
        # be a turn.cancel, which must pass when the instance is busy.
        inst.check_capacity()
    if length is not None:
        check_wire(int(length))  # refused before a byte of the body is read
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        check_wire(len(body))
    decoded = decode_frame(load_json(bytes(body)), types=INGRESS_TYPES, assign=True)
    if isinstance(decoded.frame.payload, CancelPayload):
        # Checked before it is appended: a stop of nothing leaves no frame behind.
        frame = await inst.cancel_turn(decoded.frame, decoded.frame.payload.target)
        return {"seq": frame.seq, "msg_id": frame.msg_id, "session": frame.session}
    inst.check_capacity()
    frame = await inst.accept(decoded.frame, decoded.images)
    return {"seq": frame.seq, "msg_id": frame.msg_id, "session": frame.session}


@router.get(
    "/instances/{instance_id}/tether/poll",
    response_model=PollOut,
    responses={400: _E[400], 404: _E[404]},
)
async def poll(
    instance_id: _InstanceId,
    registry: Reg,
    after_seq: Annotated[int, Query(ge=0)] = 0,
    session: _Session = None,
    wait: Annotated[float, Query(ge=0, le=limits.TETHER_POLL_MAX_WAIT_SECONDS)] = 0.0,
    limit: Annotated[int | None, Query(ge=1, le=limits.RING_MAX_FRAMES)] = None,
    max_bytes: Annotated[
        int, Query(ge=1, le=limits.RING_MAX_BYTES)
    ] = limits.TETHER_POLL_DEFAULT_MAX_BYTES,
) -> Response:
    """Frames after ``after_seq``; with ``wait`` (seconds) hold until one arrives.
    At most ``max_bytes`` of payload (but always one frame); poll again from
    ``next_seq`` for the rest."""
    inst = await registry.find(instance_id)
    page = await inst.ring.wait_read(
        after_seq, session=session, limit=limit, max_bytes=max_bytes, timeout=wait
    )
    # In pieces: a poller that does not read holds one, not a copy of the whole answer.
    return StreamingResponse(page_pieces(page), media_type="application/json")


@router.get(
    "/instances/{instance_id}/tether/stream",
    response_class=StreamingResponse,
    responses={
        200: {
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
            "description": "frames as server-sent events; id is the seq",
        },
        400: _E[400],
        404: _E[404],
    },
)
async def stream(
    instance_id: _InstanceId,
    registry: Reg,
    request: Request,
    after_seq: Annotated[int | None, Query(ge=0)] = None,
    session: _Session = None,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
) -> StreamingResponse:
    """Frames as server-sent events from ``after_seq`` (or ``Last-Event-ID``, else 0)."""
    inst = await registry.find(instance_id)
    cursor = after_seq
    if cursor is None and last_event_id is not None:
        if not last_event_id.strip().isdigit():
            raise FrameError("Last-Event-ID: must be a seq (an integer)", field="Last-Event-ID")
        cursor = int(last_event_id)
    slots: StreamSlots = request.app.state.streams
    slots.check(inst.config.id)  # a 429 here, before the answer starts
    slot = functools.partial(slots.take, inst.config.id)
    stream = events(inst.ring, cursor or 0, session, lambda: inst.closed, slot)
    return StreamingResponse(
        metrics.streaming(request.app.state, stream),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    app.state.loop = asyncio.get_running_loop()  # for stop_streams from a signal
    app.state.stopping = asyncio.Event()  # set by stop_streams, on this loop
    registry: Registry = app.state.registry
    async with AsyncExitStack() as stack:
        if registry.shared:
            # Replicas on one database: the ring there, turns claimed by a worker here.
            from visus.tether.shared import TurnWorker

            store: Any = registry.store
            stack.push_async_callback(store.aclose)
            worker = TurnWorker(registry, store)
            await worker.start()
            registry.worker = worker
        hooks: list[Callable[[], AbstractAsyncContextManager[Any]]] = app.state.lifespan_hooks
        for hook in hooks:
            await stack.enter_async_context(hook())
        try:
            yield
        finally:
            if registry.worker is not None:  # first: its turns still use the runners
                await registry.worker.aclose()
            await registry.aclose()


def create_app(
    *,
    data_dir: Path,
    runner_factory: RunnerFactory,
    token: str | None = None,
    store: Store | None = None,
    open_metrics: bool = False,
) -> FastAPI:
    """Build the tether API over the instances persisted in ``data_dir`` (or in
    ``store``: a PostgreSQL store makes this app one replica among any number on the
    same database, see :mod:`visus.tether.shared`).

    ``runner_factory`` builds the agent behind each instance (see
    :mod:`visus.tether.runner`). With ``token`` set every route but the public ones
    (``app.state.public_paths``, ``public_prefixes``) needs it (:class:`TokenGate`,
    before the body is read); without one only loopback names are served
    (:class:`~visus.tether.guard.LoopbackGuard`). Either way a request from another
    origin, or a state-changing one whose body is not JSON, is refused
    (:class:`~visus.tether.guard.OriginGuard`). ``app.state.lifespan_hooks`` takes more
    async context managers to run for the app's lifetime (``visus.mcp_server.mount_mcp``
    uses it). ``/healthz`` and ``/readyz`` answer without the token, ``/metrics`` too
    when ``open_metrics`` (:mod:`visus.tether.ops`).
    """
    app = FastAPI(
        title="visus tether",
        version="1",
        summary="Images in and out of an agent over HTTP: frames, long poll, SSE.",
        lifespan=_lifespan,
        # FastAPI's /docs and /redoc pages load their scripts from a CDN: offline they
        # are blank, online they tell a third party who browses the API. The spec
        # itself is served at /openapi.json.
        docs_url=None,
        redoc_url=None,
    )
    app.state.registry = Registry(Path(data_dir), runner_factory, store=store)
    app.state.token = token
    app.state.lifespan_hooks = []
    #: Instance id -> what uses it; such an instance cannot be deleted over the API.
    app.state.protected_instances = {}
    #: Failed token checks per client address (TokenGate's, and the web chat's sign-in).
    app.state.auth_failures = Failures()
    #: The SSE streams open now (bounded per instance and in all).
    app.state.streams = StreamSlots()
    app.add_exception_handler(VisusError, _visus_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.include_router(router)
    app.router.routes.extend(ops.routes)
    app.state.open_streams = 0
    app.state.draining = False
    app.state.metrics = metrics.own_registry(lambda: ops.state_metrics(app.state))
    # Request bodies (/v1, /mcp, the web chat's uploads) count against the process's
    # memory budget (inside the gates: a request they refuse holds nothing).
    app.add_middleware(BodyBudget)
    #: Paths (and path prefixes) served without the token: nothing there holds data.
    app.state.public_paths = {"/openapi.json", *ops.PROBES}
    if open_metrics:
        app.state.public_paths.add("/metrics")
    app.state.public_prefixes = []
    #: Paths taking raw bytes rather than JSON (OriginGuard still refuses the body
    #: types a page may post blind there).
    app.state.raw_body_paths = set()
    # Another origin's page is refused whatever it carries (inside the gate: a request
    # without the token hears 401 first).
    app.add_middleware(OriginGuard)
    if token is not None:
        app.add_middleware(TokenGate, token=token, failures=app.state.auth_failures)
    else:
        # No token: only this machine's own clients, never a web page in its browser.
        app.add_middleware(LoopbackGuard)
    # Outermost: every answer (a 401 too) is counted and carries its request id.
    app.add_middleware(metrics.CountRequests, server="serve")
    app.add_middleware(RequestIds)
    return app


def tether_server(app: Any, *, drain_seconds: float | None = None, **config: Any) -> Any:
    """A ``uvicorn.Server`` for ``app`` that drains, then ends SSE streams, when asked
    to exit.

    On SIGTERM (what an orchestrator sends) the server first turns unready
    (``app.state.draining``: ``/readyz`` answers 503) and goes on taking requests and
    turns for ``drain_seconds`` (default ``limits.DRAIN_SECONDS``), so a load balancer
    probing it sends new work elsewhere before it stops; Ctrl-C (SIGINT) or a second
    signal stops it at once. Plain uvicorn waits for every connection to close before
    it shuts down, and an SSE stream never closes by itself; this server ends them
    first. ``config`` is passed to ``uvicorn.Config``.

    Example:
        >>> tether_server(app, host="127.0.0.1", port=8750).run()  # doctest: +SKIP
    """
    import signal
    import time

    import uvicorn

    drain = limits.DRAIN_SECONDS if drain_seconds is None else drain_seconds

    class _Server(uvicorn.Server):
        _drain_until: float | None = None

        def handle_exit(self, sig: int, frame: Any) -> None:
            first = self._drain_until is None and not self.should_exit
            if first and drain > 0 and sig == signal.SIGTERM:
                app.state.draining = True
                self._drain_until = time.monotonic() + drain
                log.warning("asked to stop: unready now, stopping in %.1f s", drain)
                return
            self._stop(sig, frame)

        def _stop(self, sig: int, frame: Any) -> None:
            app.state.draining = True
            # Not super().handle_exit: sse-starlette replaced it with one that ends
            # every SSE stream in the process for good (visus.tether.stopping).
            uvicorn_handle_exit(self, sig, frame)
            stop_streams(app)

        async def on_tick(self, counter: int) -> bool:
            if self._drain_until is not None and time.monotonic() >= self._drain_until:
                self._drain_until = None
                self._stop(signal.SIGTERM, None)
            return bool(await super().on_tick(counter))

    from visus.tether.headers_timeout import HeadersTimeoutH11

    # Half-sent requests are closed after HTTP_HEADERS_TIMEOUT_SECONDS (uvicorn has no
    # such bound of its own).
    config.setdefault("http", HeadersTimeoutH11)
    # A stop always completes: requests still open after the grace are cut (a trickled
    # body or an unread answer would hold plain uvicorn for ever). Connections past the
    # bound are answered 503 at once.
    config.setdefault("timeout_graceful_shutdown", limits.HTTP_SHUTDOWN_GRACE_SECONDS)
    config.setdefault("limit_concurrency", limits.HTTP_MAX_CONNECTIONS)
    return _Server(uvicorn.Config(app, **config))


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> None:
    """Refuse to listen beyond loopback without a token (raises ConfigError)."""
    if not token and not is_loopback(host):
        raise ConfigError(
            f"host: refusing to listen on {host!r} without a token; set a token "
            "(VISUS_TOKEN / --token) or bind 127.0.0.1"
        )


def serve_dir(explicit: Path | None = None) -> Path:
    """The tether server's folder: ``explicit``, else ``serve/`` in the data folder
    (:func:`visus.paths.data_dir`: ``$VISUS_DATA`` or the platform's user data dir),
    the same folder ``visus serve`` uses.

    Example:
        >>> serve_dir(Path("/srv/tether")).as_posix()
        '/srv/tether'
    """
    return explicit if explicit is not None else paths.data_dir() / "serve"


def serve(
    host: str = "127.0.0.1",
    port: int = 8750,
    token: str | None = None,
    *,
    runner_factory: RunnerFactory,
    data_dir: Path | None = None,
    log_level: str = "info",
    no_token: bool = False,
) -> None:
    """Run the tether API alone until interrupted.

    Without ``token`` a random one is made and printed (``no_token=True`` opts out, on
    loopback only). ``visus serve`` runs the composed app instead (tether, ``/mcp`` and
    the web chat): :func:`visus.app.create_main_app`. Tether itself knows no surface
    above it.

    Example:
        >>> # serve("127.0.0.1", 8750, runner_factory=lambda config: MyRunner())
    """
    if not no_token:
        token = token or secrets.token_urlsafe(32)
    check_bind(host, token)  # no token: loopback only
    folder = serve_dir(data_dir)
    app = create_app(data_dir=folder, runner_factory=runner_factory, token=token)
    base = f"http://{host if ':' not in host else f'[{host}]'}:{port}"
    print(f"visus tether API  {base}/v1  (OpenAPI: {base}/openapi.json)")
    if token:
        print(f"  token  {token}  (Authorization: Bearer <token>)")
    tether_server(app, host=host, port=port, log_level=log_level).run()
