"""Anthropic Messages API transport. The only module that imports the ``anthropic`` SDK.

The request and reply shapes are :mod:`visus.wire.anthropic`'s; this module only
calls the SDK (replies and stream events as plain dicts) and maps its errors.

Example:
    >>> AnthropicClient(ProviderConfig(api_key="x")).wire
    'anthropic'
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

from visus.errors import ProviderError
from visus.providers.base import (
    Body,
    Client,
    MappedError,
    ProviderConfig,
    classify_http,
    json_events,
    json_object,
    parse_retry_after,
    sdk_fields,
    tls_context,
)
from visus.record.messages import JSONObject

try:
    import anthropic
    from anthropic import RequestOptions
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "the Anthropic client needs: pip install -e '.[providers]' in the visus checkout"
    ) from e

__all__ = ["AnthropicClient", "AnthropicTransport", "map_anthropic_error"]


def map_anthropic_error(e: Exception, *, provider: str = "anthropic") -> MappedError | None:
    """The one place Anthropic SDK errors become visus errors."""
    if isinstance(e, anthropic.APIStatusError):
        message, kind = e.message, None
        body = e.body
        if isinstance(body, dict) and isinstance(body.get("error"), dict):
            message = str(body["error"].get("message") or message)
            kind = body["error"].get("type")
        return classify_http(
            e.status_code,
            message,
            provider=provider,
            code=str(kind) if kind else None,
            retry_after=parse_retry_after(dict(e.response.headers)),
        )
    if isinstance(e, anthropic.APIConnectionError):
        return classify_http(None, e.message or "connection error", provider=provider)
    if isinstance(e, anthropic.AnthropicError):
        return MappedError(ProviderError(f"{provider}: {e}", provider=provider))
    return None


def _split_betas(fields: Mapping[str, object]) -> tuple[dict[str, object], RequestOptions]:
    """The body without its ``betas`` list, and the ``anthropic-beta`` header that carries
    them (as the SDK's own ``betas`` parameter sends them).

    Example:
        >>> _split_betas({"model": "m", "betas": ["a-1", "b-2"]})
        ({'model': 'm'}, {'headers': {'anthropic-beta': 'a-1,b-2'}})
    """
    body = {k: v for k, v in fields.items() if k != "betas"}
    betas = fields.get("betas")
    if not isinstance(betas, list) or not betas:
        return body, {}
    return body, {"headers": {"anthropic-beta": ",".join(str(b) for b in betas)}}


class AnthropicTransport:
    """``anthropic.AsyncAnthropic``: a Messages body in, a reply or event dicts out."""

    def __init__(self, config: ProviderConfig) -> None:
        self._client = anthropic.AsyncAnthropic(
            api_key=config.api_key,
            base_url=config.base_url,
            timeout=config.timeout,
            max_retries=0,  # the Client owns retrying, the same way for every provider
            default_headers=dict(config.headers) or None,
            http_client=anthropic.DefaultAsyncHttpxClient(verify=tls_context()),
        )

    async def aclose(self) -> None:
        await self._client.close()

    # The codec's body is the request's JSON and the codec reads plain JSON back: the
    # SDK's ``post`` sends it (auth, headers, errors, SSE and its ``error`` events) and
    # ``cast_to=object`` hands back what the server sent, with no pydantic model built
    # per stream event only to be dumped to a dict again (as the OpenAI transport).

    async def call(self, body: Body, model: str) -> JSONObject:
        fields, options = _split_betas(sdk_fields(body, model))
        reply = await self._client.post(
            "/v1/messages", body=fields, cast_to=object, options=options
        )
        return json_object(reply)

    async def events(self, body: Body, model: str) -> AsyncIterator[JSONObject]:
        fields, options = _split_betas(sdk_fields(body, model))
        stream = await self._client.post(
            "/v1/messages",
            body=dict(fields, stream=True),
            cast_to=object,
            options=options,
            stream=True,
            stream_cls=anthropic.AsyncStream[object],
        )
        async for event in json_events(stream):
            yield event

    def map_error(self, e: Exception, provider: str) -> MappedError | None:
        return map_anthropic_error(e, provider=provider)


class AnthropicClient(Client):
    """The :class:`~visus.providers.base.Client` over :class:`AnthropicTransport`."""

    def __init__(self, config: ProviderConfig, *, provider: str = "anthropic") -> None:
        super().__init__(
            AnthropicTransport(config), provider=provider, wire="anthropic", config=config
        )
