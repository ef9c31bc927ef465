"""What every provider client shares: the protocol, its config, the one
:class:`Client`, retries and error classification.

A provider is a :class:`Transport` (its official SDK: a body in, a reply dict or
event dicts out, its errors mapped) under the one :class:`Client`, which lowers a
request with the wire's codec (``visus.wire``), sends it, and parses the reply with
the same codec. The SDK's own retries are switched off; :func:`with_retries` retries
429, 5xx and connection failures for every provider the same way (bounded,
exponential, honouring ``Retry-After``), so behaviour and tests do not depend on each
SDK's defaults.

Example:
    >>> cfg = ProviderConfig(api_key="k", max_retries=1, backoff_base=0.0)
    >>> backoff_delay(cfg, attempt=2, retry_after=None)
    0.0
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import inspect
import re
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias, TypeVar

from visus import limits
from visus.errors import (
    AuthError,
    ContextLengthError,
    ImageRejectedError,
    ProviderError,
    RateLimitError,
)
from visus.models.spec import ModelSpec
from visus.record.messages import AssistantMessage, JSONObject, ModelRequest
from visus.wire import WIRES, BlobReader, Body, RefitCache, ReplyContext, Wire, lower
from visus.wire._reply import decode_arguments, new_call_id, usage_for

__all__ = [
    "BlobReader",
    "Body",
    "Client",
    "DeltaGate",
    "MappedError",
    "NoStreaming",
    "OnDelta",
    "ProviderClient",
    "ProviderConfig",
    "RefitCache",
    "Transport",
    "Wire",
    "aclose",
    "backoff_delay",
    "classify_http",
    "decode_arguments",
    "json_events",
    "json_object",
    "new_call_id",
    "parse_retry_after",
    "request_turn",
    "sdk_fields",
    "tls_context",
    "usage_for",
    "with_retries",
]

#: Called with each text delta as it streams; may be sync or async. The one
#: delta-callback type of visus (the agent's ``on_delta`` is this too).
OnDelta: TypeAlias = Callable[[str], Awaitable[None] | None]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ProviderConfig:
    """How one client reaches its provider.

    ``wire`` overrides the client's default wire where it speaks several (OpenAI:
    ``openai-chat`` or ``openai-responses``). ``backoff_base`` is the first retry's
    wait in seconds (doubling after), small in tests. ``region`` and the ``aws_*``
    fields are for Bedrock; ``api_key`` is then the access key id.

    Example:
        >>> ProviderConfig(api_key="sk-x", base_url="http://127.0.0.1:8760/v1").max_retries
        3
    """

    api_key: str | None = None
    base_url: str | None = None
    timeout: float = limits.PROVIDER_TIMEOUT_SECONDS
    max_retries: int = limits.PROVIDER_MAX_RETRIES
    backoff_base: float = 0.5
    wire: Wire | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    region: str | None = None
    aws_secret_access_key: str | None = None
    aws_session_token: str | None = None


class ProviderClient(Protocol):
    """One provider behind one wire.

    Concrete clients also have ``async def aclose()`` to release their connection
    pool; :func:`aclose` calls it when present (it is not part of the protocol so
    test doubles need only ``complete``).

    Example:
        >>> async def ask(client: ProviderClient, req, spec, blobs):  # doctest: +SKIP
        ...     reply = await client.complete(req, model=spec, blobs=blobs, on_delta=print)
        ...     return reply.text, reply.tool_calls, reply.usage
    """

    provider: str
    wire: Wire

    async def complete(
        self,
        request: ModelRequest,
        *,
        model: ModelSpec,
        blobs: BlobReader,
        on_delta: OnDelta | None = None,
        refit_cache: RefitCache | None = None,
    ) -> AssistantMessage: ...


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The one TLS context of this process, for every SDK client's connections.

    Building a context loads the system's CA certificates: about 30 ms of CPU, which
    each ``AsyncOpenAI``/``AsyncAnthropic`` spent again when left to make its own. A
    server builds a client per tether instance, on its event loop, so that was most
    of what a new instance cost a replica. One context serves any number of clients,
    threads and loops; it trusts what ``ssl.create_default_context()`` trusts
    (``SSL_CERT_FILE``/``SSL_CERT_DIR`` as set when first used).

    Example:
        >>> tls_context() is tls_context()
        True
        >>> tls_context().verify_mode == ssl.CERT_REQUIRED
        True
    """
    return ssl.create_default_context()


async def aclose(client: object) -> None:
    """Close ``client``'s connections if it has an ``aclose`` (every visus client does)."""
    close = getattr(client, "aclose", None)
    if close is not None:
        await close()


# --- usage and replies ----------------------------------------------------------


def request_turn(request: ModelRequest) -> int:
    """The turn a reply to ``request`` belongs to: that of its last message."""
    return request.messages[-1].turn if request.messages else 1


class DeltaGate:
    """Forwards text deltas and remembers whether any left, so a retry never repeats one."""

    def __init__(self, on_delta: OnDelta | None) -> None:
        self._on_delta = on_delta
        self.emitted = False

    async def __call__(self, text: str) -> None:
        if not text or self._on_delta is None:
            return
        self.emitted = True
        result = self._on_delta(text)
        if inspect.isawaitable(result):
            await result


# --- errors and retries ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MappedError:
    """A provider failure as visus sees it: the error to raise and whether to retry."""

    error: ProviderError
    retryable: bool = False
    retry_after: float | None = None


_CONTEXT_PATTERNS = re.compile(
    r"context[_ ]length|context window|maximum context|prompt is too long|too many tokens"
    r"|input is too long|too many input tokens|exceeds the maximum number of tokens"
    r"|input token count|reduce the length|maximum prompt length",
    re.IGNORECASE,
)
_IMAGE_PATTERNS = re.compile(
    r"image|media|too large|dimension|\bformat\b|base64|inline_?data", re.IGNORECASE
)


def classify_http(
    status: int | None,
    message: str,
    *,
    provider: str,
    code: str | None = None,
    retry_after: float | None = None,
) -> MappedError:
    """Map an HTTP failure to the visus error tree (shared by every client's mapper).

    401/403 -> AuthError; 429 -> RateLimitError (retryable); 5xx and no status
    (connection, timeout) -> ProviderError (retryable); context-length wording ->
    ContextLengthError; 400/413/422 that talks about an image -> ImageRejectedError.

    Example:
        >>> classify_http(400, "Invalid image: too large", provider="openai").error
        ImageRejectedError('openai: Invalid image: too large')
    """
    text = f"{provider}: {message}" if provider else message
    hint = f"{code or ''} {message}"
    if status in (401, 403):
        return MappedError(AuthError(text, provider=provider, status=status))
    if status == 429:
        if _CONTEXT_PATTERNS.search(hint):
            # OpenAI answers a too-large request on a low tier with 429 and this wording.
            return MappedError(ContextLengthError(text, provider=provider, status=status))
        return MappedError(
            RateLimitError(text, provider=provider, status=status), True, retry_after
        )
    if status is None or status >= 500 or status in (408, 409):
        return MappedError(ProviderError(text, provider=provider, status=status), True, retry_after)
    if _CONTEXT_PATTERNS.search(hint):
        return MappedError(ContextLengthError(text, provider=provider, status=status))
    if status in (400, 413, 422) and _IMAGE_PATTERNS.search(hint):
        return MappedError(ImageRejectedError(text, provider=provider, status=status))
    return MappedError(ProviderError(text, provider=provider, status=status))


def parse_retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` / ``Retry-After`` (seconds or HTTP date).

    Example:
        >>> parse_retry_after({"retry-after": "2"}), parse_retry_after({})
        (2.0, None)
    """
    if not headers:
        return None
    lower = {k.lower(): v for k, v in headers.items()}
    ms = lower.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = lower.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def backoff_delay(config: ProviderConfig, *, attempt: int, retry_after: float | None) -> float:
    """Wait before retry number ``attempt`` (1-based): Retry-After if given, else doubling.

    Bounded by ``limits.PROVIDER_MAX_BACKOFF_SECONDS`` either way.
    """
    delay = retry_after if retry_after is not None else config.backoff_base * 2 ** (attempt - 1)
    return float(min(delay, limits.PROVIDER_MAX_BACKOFF_SECONDS))


async def with_retries(
    attempt: Callable[[], Awaitable[T]],
    *,
    config: ProviderConfig,
    map_error: Callable[[Exception], MappedError | None],
    gate: DeltaGate | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> T:
    """Run ``attempt`` with up to ``config.max_retries`` retries; raise visus errors only.

    ``map_error`` turns an SDK exception into a :class:`MappedError` (None: not the
    provider's, re-raised as is). Once ``gate`` has streamed text, a failure is not
    retried: the caller has already shown those words.
    """
    tries = 0
    while True:
        try:
            return await attempt()
        except Exception as e:
            if isinstance(e, ProviderError):
                raise
            mapped = map_error(e)
            if mapped is None:
                raise
            streamed = gate is not None and gate.emitted
            if not mapped.retryable or tries >= config.max_retries or streamed:
                raise mapped.error from e
            tries += 1
            await sleep(backoff_delay(config, attempt=tries, retry_after=mapped.retry_after))


# --- the one client -------------------------------------------------------------


class NoStreaming(Exception):
    """Raised by a transport's ``events`` before any event when the provider cannot
    stream this request: the client then asks for the whole reply instead."""


def sdk_fields(body: Body, model: str, **override: object) -> Mapping[str, Any]:
    """``body`` as keyword arguments for an official SDK call: ``model`` set,
    ``stream`` left out (the transport asks for it), ``override`` applied.

    Typed ``Any`` on purpose, at this one boundary: the wire codec's ``Request``
    TypedDict owns the body's shape, and the SDK's own parameter types only restate
    it (and differ between SDK releases).

    Example:
        >>> dict(sdk_fields({"model": "x", "stream": True, "messages": []}, "m"))
        {'model': 'm', 'messages': []}
    """
    fields = {k: v for k, v in body.items() if k != "stream"}
    fields["model"] = model
    fields.update(override)
    return fields


def json_object(reply: object, what: str = "the reply") -> JSONObject:
    """``reply`` (JSON an SDK handed back untyped) as an object, or a clear error.

    Example:
        >>> json_object({"id": "r1"})
        {'id': 'r1'}
        >>> json_object([1])
        Traceback (most recent call last):
        ...
        visus.errors.ProviderError: the reply is not a JSON object: '[1]'
    """
    if not isinstance(reply, dict):
        raise ProviderError(f"{what} is not a JSON object: {str(reply)[:200]!r}")
    return reply


async def json_events(stream: AsyncIterator[object]) -> AsyncIterator[JSONObject]:
    """An SDK stream's events (JSON handed back untyped), each checked an object."""
    async for event in stream:
        yield json_object(event, "a stream event")


class Transport(Protocol):
    """One provider's SDK call: a wire body in, the reply as a dict (or its stream as
    event dicts) out. No parsing: that is the wire codec's."""

    async def call(self, body: Body, model: str) -> JSONObject: ...

    def events(self, body: Body, model: str) -> AsyncIterator[JSONObject]: ...

    def map_error(self, e: Exception, provider: str) -> MappedError | None: ...

    async def aclose(self) -> None: ...


class Client:
    """A :class:`ProviderClient`: lower -> send -> parse over one transport and wire,
    with the shared retry loop and delta gate.

    Example:
        >>> client = Client(transport, provider="openai", wire="openai-chat",
        ...                 config=ProviderConfig())  # doctest: +SKIP
        >>> reply = await client.complete(request, model=spec, blobs=store)  # doctest: +SKIP
    """

    def __init__(
        self, transport: Transport, *, provider: str, wire: Wire, config: ProviderConfig
    ) -> None:
        self.transport = transport
        self.provider = provider
        self.wire: Wire = wire
        self.config = config

    async def aclose(self) -> None:
        """Close the transport's connection pool (call before the event loop ends)."""
        await self.transport.aclose()

    async def complete(
        self,
        request: ModelRequest,
        *,
        model: ModelSpec,
        blobs: BlobReader,
        on_delta: OnDelta | None = None,
        refit_cache: RefitCache | None = None,
    ) -> AssistantMessage:
        """Lower ``request`` onto this client's wire, send it, parse the reply.

        Lowering reads every live image's blob (on PostgreSQL, a query each) and
        base64-encodes it: in a thread, never on the event loop other turns share.
        """
        body = await asyncio.to_thread(
            lower, request, wire=self.wire, model=model, blobs=blobs, refit_cache=refit_cache
        )
        return await self.send(
            body,
            model=model,
            on_delta=on_delta,
            turn=request_turn(request),
            max_tokens=request.max_tokens,
        )

    async def send(
        self,
        payload: Body,
        *,
        model: ModelSpec,
        on_delta: OnDelta | None = None,
        turn: int = 1,
        max_tokens: int | None = None,
    ) -> AssistantMessage:
        """Send an already lowered body (its cap set to ``max_tokens`` if it has none);
        stream text to ``on_delta`` when given."""
        codec = WIRES[self.wire]
        body = codec.cap(payload, max_tokens) if max_tokens is not None else dict(payload)
        ctx = ReplyContext(model, turn, self.provider)
        gate = DeltaGate(on_delta)

        async def attempt() -> AssistantMessage:
            if on_delta is not None:
                stream = codec.stream(ctx)
                try:
                    async for event in self.transport.events(body, model.name):
                        await gate(stream.feed(event))
                    return stream.result()
                except NoStreaming:
                    pass  # answer in one piece rather than not at all
            reply = codec.parse(await self.transport.call(body, model.name), ctx)
            if on_delta is not None:
                await gate(reply.text)
            return reply

        return await with_retries(
            attempt,
            config=self.config,
            map_error=lambda e: self.transport.map_error(e, self.provider),
            gate=gate,
        )
