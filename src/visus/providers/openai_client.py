"""OpenAI (Chat Completions and Responses) and every OpenAI-compatible server.

The only module that imports the ``openai`` SDK. The same client talks to OpenAI,
OpenRouter, vLLM, LM Studio, Ollama's ``/v1`` and the reference server: only the
base URL and key differ. Chat Completions is the wire compatible servers share;
Responses is OpenAI's own, where tool results carry images natively.

Example:
    >>> client = OpenAIClient(ProviderConfig(api_key="x", base_url="http://127.0.0.1:1/v1"))
    >>> client.wire
    'openai-chat'
"""

from __future__ import annotations

from typing import Any, Literal

from visus.errors import ProviderError, WireError
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
    import openai
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("the OpenAI client needs: pip install 'visus[providers]'") from e

__all__ = ["OpenAIClient", "map_openai_error"]


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


class OpenAIClient:
    """A :class:`~visus.providers.base.ProviderClient` on ``openai.AsyncOpenAI``.

    ``token_param`` names the output cap field on Chat Completions: OpenAI's newer
    models take only ``max_completion_tokens``; many compatible servers only know
    ``max_tokens``.

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
        wire: Literal["openai-chat", "openai-responses"] = "openai-chat",
        token_param: Literal["max_tokens", "max_completion_tokens"] = "max_tokens",
    ) -> None:
        chosen = config.wire or wire
        if chosen not in ("openai-chat", "openai-responses"):
            raise WireError(
                f"the OpenAI client speaks openai-chat or openai-responses, not {chosen}"
            )
        self.provider = provider
        self.wire: Wire = chosen
        self.config = config
        self._token_param = token_param
        self._client = openai.AsyncOpenAI(
            api_key=config.api_key or "not-needed",
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
        """Lower ``request`` onto this client's wire, send it, parse the reply."""
        payload = lower_request(
            request, wire=self.wire, model=model, blobs=blobs, refit_cache=refit_cache
        )
        if self.wire == "openai-chat":
            payload.setdefault(self._token_param, request.max_tokens)
        else:
            payload.setdefault("max_output_tokens", request.max_tokens)
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
        gate = DeltaGate(on_delta)
        if self.wire == "openai-chat":
            run = self._chat_stream if on_delta else self._chat
        else:
            run = self._responses_stream if on_delta else self._responses

        async def attempt() -> AssistantMessage:
            return await run(body, model, gate, turn)

        return await with_retries(
            attempt,
            config=self.config,
            map_error=lambda e: map_openai_error(e, provider=self.provider),
            gate=gate,
        )

    # --- Chat Completions -------------------------------------------------------

    async def _chat(
        self, body: dict[str, Any], model: ModelSpec, gate: DeltaGate, turn: int
    ) -> AssistantMessage:
        reply = await self._client.chat.completions.create(**body)
        if not reply.choices:
            raise ProviderError(f"{self.provider}: reply without choices", provider=self.provider)
        message = reply.choices[0].message
        calls = [
            ToolCall(
                id=tc.id or new_call_id(),
                name=tc.function.name,
                arguments=decode_arguments(tc.function.arguments),
            )
            for tc in message.tool_calls or ()
            if tc.type == "function"
        ]
        usage = reply.usage
        # A refusal arrives in its own field with no content; the model's words still count.
        text = message.content or getattr(message, "refusal", None) or ""
        return assistant_message(
            model,
            text,
            calls,
            usage_for(
                model,
                usage.prompt_tokens if usage else 0,
                usage.completion_tokens if usage else 0,
            ),
            turn=turn,
        )

    async def _chat_stream(
        self, body: dict[str, Any], model: ModelSpec, gate: DeltaGate, turn: int
    ) -> AssistantMessage:
        stream = await self._client.chat.completions.create(
            **body, stream=True, stream_options={"include_usage": True}
        )
        text: list[str] = []
        slots: dict[int, dict[str, Any]] = {}
        prompt_tokens = completion_tokens = 0
        async for chunk in stream:
            if chunk.usage is not None:
                prompt_tokens = chunk.usage.prompt_tokens
                completion_tokens = chunk.usage.completion_tokens
            for choice in chunk.choices:
                delta = choice.delta
                if delta.content:
                    text.append(delta.content)
                    await gate(delta.content)
                for tc in delta.tool_calls or ():
                    slot = slots.setdefault(tc.index, {"id": "", "name": "", "args": []})
                    if tc.id:
                        slot["id"] = tc.id
                    if tc.function is not None:
                        if tc.function.name and not slot["name"]:
                            slot["name"] = tc.function.name
                        if tc.function.arguments:
                            slot["args"].append(tc.function.arguments)
        calls = [
            ToolCall(
                id=slot["id"] or new_call_id(),
                name=slot["name"],
                arguments=decode_arguments("".join(slot["args"])),
            )
            for _, slot in sorted(slots.items())
        ]
        return assistant_message(
            model,
            "".join(text),
            calls,
            usage_for(model, prompt_tokens, completion_tokens),
            turn=turn,
        )

    # --- Responses --------------------------------------------------------------

    async def _responses(
        self, body: dict[str, Any], model: ModelSpec, gate: DeltaGate, turn: int
    ) -> AssistantMessage:
        reply = await self._client.responses.create(**body)
        return self._parse_response(reply, model, turn)

    async def _responses_stream(
        self, body: dict[str, Any], model: ModelSpec, gate: DeltaGate, turn: int
    ) -> AssistantMessage:
        stream = await self._client.responses.create(**body, stream=True)
        final: Any = None
        async for event in stream:
            if event.type == "response.output_text.delta":
                await gate(event.delta)
            elif event.type in ("response.completed", "response.incomplete"):
                # incomplete = stopped at max_output_tokens: still an answer, cut short.
                final = event.response
            elif event.type in ("response.failed", "error"):
                raise ProviderError(f"{self.provider}: {event}", provider=self.provider)
        if final is None:
            raise ProviderError(
                f"{self.provider}: stream ended without response.completed",
                provider=self.provider,
            )
        return self._parse_response(final, model, turn)

    def _parse_response(self, reply: Any, model: ModelSpec, turn: int) -> AssistantMessage:
        text: list[str] = []
        calls: list[ToolCall] = []
        for item in reply.output or ():
            if item.type == "message":
                text.extend(c.text for c in item.content if c.type == "output_text")
            elif item.type == "function_call":
                calls.append(
                    ToolCall(
                        id=item.call_id or new_call_id(),
                        name=item.name,
                        arguments=decode_arguments(item.arguments),
                    )
                )
        usage = reply.usage
        return assistant_message(
            model,
            "".join(text),
            calls,
            usage_for(
                model,
                usage.input_tokens if usage else 0,
                usage.output_tokens if usage else 0,
            ),
            turn=turn,
        )
