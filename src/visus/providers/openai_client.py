"""OpenAI (Chat Completions and Responses) and every OpenAI-compatible server.

The only module that imports the ``openai`` SDK. The same transport talks to OpenAI,
OpenRouter, vLLM, LM Studio, Ollama's ``/v1`` and the reference server: only the
base URL and key differ. The shapes are :mod:`visus.wire.openai_chat`'s and
:mod:`visus.wire.openai_responses`'s; this module only sends the codec's body with
the SDK (replies and stream events come back as the server's plain JSON) and maps
its errors.

Example:
    >>> client = OpenAIClient(ProviderConfig(api_key="x", base_url="http://127.0.0.1:1/v1"))
    >>> client.wire
    'openai-chat'
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, Literal

from visus.errors import ProviderError, WireError
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
    import openai
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "the OpenAI client needs: pip install -e '.[providers]' in the visus checkout"
    ) from e

__all__ = ["OpenAIClient", "OpenAITransport", "map_openai_error"]

OpenAIWire = Literal["openai-chat", "openai-responses"]


def map_openai_error(e: Exception, *, provider: str = "openai") -> MappedError | None:
    """The one place OpenAI SDK errors become visus errors."""
    if isinstance(e, openai.APIStatusError):
        return classify_http(
            e.status_code,
            _error_message(e),
            provider=provider,
            code=e.code,
            retry_after=parse_retry_after(dict(e.response.headers)),
        )
    if isinstance(e, openai.APIConnectionError):
        return classify_http(None, e.message or "connection error", provider=provider)
    if isinstance(e, openai.OpenAIError):
        return MappedError(ProviderError(f"{provider}: {e}", provider=provider))
    return None


def _error_message(e: openai.APIStatusError) -> str:
    body = e.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return str(inner["message"])
        if isinstance(body.get("message"), str):
            return str(body["message"])
    return e.message


class OpenAITransport:
    """``openai.AsyncOpenAI`` on one of its two wires.

    ``token_param`` names the output cap field on Chat Completions: OpenAI's newer
    models take only ``max_completion_tokens``; many compatible servers only know
    ``max_tokens`` (the name the codec writes).
    """

    def __init__(
        self,
        config: ProviderConfig,
        *,
        wire: OpenAIWire,
        token_param: Literal["max_tokens", "max_completion_tokens"] = "max_tokens",
    ) -> None:
        self.wire = wire
        self._token_param = token_param
        self._client = openai.AsyncOpenAI(
            api_key=config.api_key or "not-needed",
            base_url=config.base_url,
            timeout=config.timeout,
            max_retries=0,  # the Client owns retrying, the same way for every provider
            default_headers=dict(config.headers) or None,
            http_client=openai.DefaultAsyncHttpxClient(verify=tls_context()),
        )

    async def aclose(self) -> None:
        await self._client.close()

    def _fields(self, body: Body, model: str) -> Mapping[str, Any]:
        if (
            self.wire == "openai-chat"
            and self._token_param != "max_tokens"
            and "max_tokens" in body
            and self._token_param not in body
        ):
            renamed = {k: v for k, v in body.items() if k != "max_tokens"}
            return sdk_fields(renamed, model, **{self._token_param: body["max_tokens"]})
        return sdk_fields(body, model)

    # The wire codec's body is already the request's JSON, and the codec reads replies
    # as plain JSON: so the body goes through the SDK's ``post`` (its auth, headers,
    # errors and SSE decoding) and replies come back as the dicts the server sent
    # (``cast_to=object``). ``create()`` would walk the whole body against the SDK's
    # TypedDicts on every call (the history grows each step) and build a pydantic
    # model per stream chunk that was dumped back to a dict here: about 40% of a tether
    # replica's CPU per turn (py-spy, ``python -m benchmarks store``).

    def _path(self) -> str:
        return "/chat/completions" if self.wire == "openai-chat" else "/responses"

    async def call(self, body: Body, model: str) -> JSONObject:
        reply = await self._client.post(
            self._path(), body=dict(self._fields(body, model)), cast_to=object
        )
        return json_object(reply)

    async def events(self, body: Body, model: str) -> AsyncIterator[JSONObject]:
        fields = dict(self._fields(body, model), stream=True)
        if self.wire == "openai-chat":
            fields["stream_options"] = {"include_usage": True}
        stream = await self._client.post(
            self._path(),
            body=fields,
            cast_to=object,
            stream=True,
            stream_cls=openai.AsyncStream[object],
        )
        async for event in json_events(stream):
            yield event

    def map_error(self, e: Exception, provider: str) -> MappedError | None:
        return map_openai_error(e, provider=provider)


class OpenAIClient(Client):
    """The :class:`~visus.providers.base.Client` over :class:`OpenAITransport`.

    Example:
        >>> c = OpenAIClient(ProviderConfig(api_key="x", wire="openai-responses"))
        >>> c.wire
        'openai-responses'
    """

    def __init__(
        self,
        config: ProviderConfig,
        *,
        provider: str = "openai",
        wire: OpenAIWire = "openai-chat",
        token_param: Literal["max_tokens", "max_completion_tokens"] | None = None,
        official: bool = False,
    ) -> None:
        """``official``: OpenAI's own API (whose newer models take only
        ``max_completion_tokens``), not a compatible server."""
        if token_param is None:
            token_param = "max_completion_tokens" if official else "max_tokens"
        chosen = config.wire or wire
        if chosen != "openai-chat" and chosen != "openai-responses":
            raise WireError(
                f"the OpenAI client speaks openai-chat or openai-responses, not {chosen}"
            )
        transport = OpenAITransport(config, wire=chosen, token_param=token_param)
        super().__init__(transport, provider=provider, wire=chosen, config=config)
