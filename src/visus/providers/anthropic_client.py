"""Anthropic Messages API. The only module that imports the ``anthropic`` SDK.

Example:
    >>> AnthropicClient(ProviderConfig(api_key="x")).wire
    'anthropic'
"""

from __future__ import annotations

from typing import Any

from visus.errors import ProviderError
from visus.models.spec import ModelSpec
from visus.providers.base import (
    BlobReader,
    DeltaGate,
    MappedError,
    OnDelta,
    ProviderConfig,
    RefitCache,
    Wire,
    assistant_message,
    classify_http,
    decode_arguments,
    lower_request,
    new_call_id,
    parse_retry_after,
    request_turn,
    usage_for,
    with_retries,
)
from visus.record.messages import AssistantMessage, ModelRequest, ToolCall

try:
    import anthropic
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("the Anthropic client needs: pip install 'visus[providers]'") from e

__all__ = ["AnthropicClient", "map_anthropic_error"]


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


class AnthropicClient:
    """A :class:`~visus.providers.base.ProviderClient` on ``anthropic.AsyncAnthropic``."""

    def __init__(self, config: ProviderConfig, *, provider: str = "anthropic") -> None:
        self.provider = provider
        self.wire: Wire = "anthropic"
        self.config = config
        self._client = anthropic.AsyncAnthropic(
            api_key=config.api_key,
            base_url=config.base_url,
            timeout=config.timeout,
            max_retries=0,  # with_retries owns retrying, the same way for every provider
            default_headers=dict(config.headers) or None,
        )

    async def aclose(self) -> None:
        """Close the SDK's connection pool (call before the event loop ends)."""
        await self._client.close()

    async def complete(
        self,
        request: ModelRequest,
        *,
        model: ModelSpec,
        blobs: BlobReader,
        on_delta: OnDelta | None = None,
        refit_cache: RefitCache | None = None,
    ) -> AssistantMessage:
        """Lower ``request`` onto the Anthropic wire, send it, parse the reply."""
        payload = lower_request(
            request, wire=self.wire, model=model, blobs=blobs, refit_cache=refit_cache
        )
        payload.setdefault("max_tokens", request.max_tokens)
        return await self.send(payload, model=model, on_delta=on_delta, turn=request_turn(request))

    async def send(
        self,
        payload: dict[str, Any],
        *,
        model: ModelSpec,
        on_delta: OnDelta | None = None,
        turn: int = 1,
    ) -> AssistantMessage:
        """Send an already lowered body; stream text to ``on_delta`` when given."""
        body = {**payload, "model": model.name}
        body.pop("stream", None)
        gate = DeltaGate(on_delta)

        async def attempt() -> AssistantMessage:
            if on_delta is None:
                reply = await self._client.messages.create(**body)
            else:
                async with self._client.messages.stream(**body) as stream:
                    async for text in stream.text_stream:
                        await gate(text)
                    reply = await stream.get_final_message()
            return self._parse(reply, model, turn)

        return await with_retries(
            attempt,
            config=self.config,
            map_error=lambda e: map_anthropic_error(e, provider=self.provider),
            gate=gate,
        )

    def _parse(self, reply: Any, model: ModelSpec, turn: int) -> AssistantMessage:
        text: list[str] = []
        calls: list[ToolCall] = []
        for block in reply.content:
            if block.type == "text":
                text.append(block.text)
            elif block.type == "tool_use":
                calls.append(
                    ToolCall(
                        id=block.id or new_call_id(),
                        name=block.name,
                        arguments=decode_arguments(block.input),
                    )
                )
        u = reply.usage
        # Cached prompt tokens are still prompt tokens; count them so context use is honest.
        prompt = (
            u.input_tokens
            + (getattr(u, "cache_creation_input_tokens", None) or 0)
            + (getattr(u, "cache_read_input_tokens", None) or 0)
        )
        return assistant_message(
            model, "".join(text), calls, usage_for(model, prompt, u.output_tokens), turn=turn
        )
