"""Gemini generateContent. The only module that imports ``google-genai``.

``visus.wire`` lowers to the REST body (``contents``, ``systemInstruction``,
``tools``, ``generationConfig``; camelCase). The SDK's pydantic types accept those
aliases, so the body becomes ``types.Content`` and ``types.GenerateContentConfig``
without a second, hand-written lowering.

Thought signatures: Gemini 3 (and 2.5 with thinking) puts an opaque
``thought_signature`` on ``functionCall`` parts and answers 400 when a later request
leaves it off that call. It is kept on :attr:`ToolCall.signature` (base64 text, so
the record stays JSON) and the wire sends it back as ``thoughtSignature``.

Example:
    >>> GeminiClient(ProviderConfig(api_key="x")).wire
    'gemini'
"""

from __future__ import annotations

import base64
from typing import Any

from visus.errors import AuthError, ProviderError
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
    from google import genai
    from google.genai import errors as genai_errors
    from google.genai import types as genai_types
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("the Gemini client needs: pip install 'visus[providers]'") from e

__all__ = ["GeminiClient", "map_gemini_error", "to_sdk_request"]

# REST body keys that belong in GenerateContentConfig (camelCase and snake_case).
_CONFIG_KEYS = {
    "systemInstruction": "system_instruction",
    "system_instruction": "system_instruction",
    "tools": "tools",
    "toolConfig": "tool_config",
    "tool_config": "tool_config",
    "safetySettings": "safety_settings",
    "safety_settings": "safety_settings",
    "cachedContent": "cached_content",
    "cached_content": "cached_content",
}
_TRANSPORT_MODULES = {"httpx", "httpx2", "aiohttp"}


def map_gemini_error(e: Exception, *, provider: str = "gemini") -> MappedError | None:
    """The one place google-genai errors become visus errors."""
    if isinstance(e, genai_errors.APIError):
        message = str(e.message or e)
        status = int(e.code) if e.code else None
        # Gemini answers a bad key with 400 INVALID_ARGUMENT, not 401.
        if "API_KEY_INVALID" in str(e.details) or "API key not valid" in message:
            return MappedError(
                AuthError(f"{provider}: {message}", provider=provider, status=status)
            )
        headers = getattr(e.response, "headers", None)
        return classify_http(
            status,
            message,
            provider=provider,
            code=str(e.status) if e.status else None,
            retry_after=parse_retry_after(dict(headers) if headers is not None else None),
        )
    if type(e).__module__.split(".")[0] in _TRANSPORT_MODULES:
        return classify_http(None, f"{type(e).__name__}: {e}", provider=provider)
    return None


def to_sdk_request(
    payload: dict[str, Any], *, max_tokens: int | None = None
) -> tuple[list[genai_types.Content], genai_types.GenerateContentConfig]:
    """The lowered REST body as the SDK's ``contents`` and ``config``.

    Example:
        >>> contents, config = to_sdk_request(
        ...     {"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
        ...      "systemInstruction": {"parts": [{"text": "be brief"}]}}, max_tokens=64)
        >>> contents[0].parts[0].text, config.max_output_tokens
        ('hi', 64)
    """
    contents = [genai_types.Content.model_validate(c) for c in payload.get("contents", ())]
    generation = payload.get("generationConfig") or payload.get("generation_config") or {}
    cfg: dict[str, Any] = dict(generation)
    for key, field_name in _CONFIG_KEYS.items():
        if payload.get(key) is not None:
            cfg[field_name] = payload[key]
    if max_tokens is not None and not {"maxOutputTokens", "max_output_tokens"} & cfg.keys():
        cfg["max_output_tokens"] = max_tokens
    # Declarations only: the SDK must never try to call tools itself.
    cfg["automatic_function_calling"] = {"disable": True}
    return contents, genai_types.GenerateContentConfig.model_validate(cfg)


class GeminiClient:
    """A :class:`~visus.providers.base.ProviderClient` on ``genai.Client(...).aio``."""

    def __init__(self, config: ProviderConfig, *, provider: str = "gemini") -> None:
        self.provider = provider
        self.wire: Wire = "gemini"
        self.config = config
        self._client = genai.Client(
            api_key=config.api_key,
            http_options=genai_types.HttpOptions(
                base_url=config.base_url,
                # v1beta: the version that takes systemInstruction and tools everywhere.
                api_version="v1beta",
                timeout=int(config.timeout * 1000),
                headers=dict(config.headers) or None,
                # One attempt: with_retries owns retrying, the same way for every provider.
                retry_options=genai_types.HttpRetryOptions(attempts=1),
            ),
        )

    async def aclose(self) -> None:
        """Close the SDK's connection pool (call before the event loop ends)."""
        await self._client.aio.aclose()

    async def complete(
        self,
        request: ModelRequest,
        *,
        model: ModelSpec,
        blobs: BlobReader,
        on_delta: OnDelta | None = None,
        refit_cache: RefitCache | None = None,
    ) -> AssistantMessage:
        """Lower ``request`` onto the Gemini wire, send it, parse the reply."""
        payload = lower_request(
            request, wire=self.wire, model=model, blobs=blobs, refit_cache=refit_cache
        )
        return await self.send(
            payload,
            model=model,
            on_delta=on_delta,
            turn=request_turn(request),
            max_tokens=request.max_tokens,
        )

    async def send(
        self,
        payload: dict[str, Any],
        *,
        model: ModelSpec,
        on_delta: OnDelta | None = None,
        turn: int = 1,
        max_tokens: int | None = None,
    ) -> AssistantMessage:
        """Send an already lowered REST body; stream text to ``on_delta`` when given."""
        contents, config = to_sdk_request(payload, max_tokens=max_tokens)
        gate = DeltaGate(on_delta)
        models = self._client.aio.models

        async def attempt() -> AssistantMessage:
            text: list[str] = []
            calls: list[ToolCall] = []
            usage: Any = None
            if on_delta is None:
                reply = await models.generate_content(
                    model=model.name,
                    contents=contents,
                    config=config,
                )
                self._collect(reply, text, calls, None)
                usage = reply.usage_metadata
            else:
                stream = await models.generate_content_stream(
                    model=model.name,
                    contents=contents,
                    config=config,
                )
                async for chunk in stream:
                    for delta in self._collect(chunk, text, calls, gate):
                        await gate(delta)
                    if chunk.usage_metadata is not None:
                        usage = chunk.usage_metadata
            prompt = (usage.prompt_token_count or 0) if usage else 0
            output = (
                (usage.candidates_token_count or 0) + (usage.thoughts_token_count or 0)
                if usage
                else 0
            )
            return assistant_message(
                model, "".join(text), calls, usage_for(model, prompt, output), turn=turn
            )

        return await with_retries(
            attempt,
            config=self.config,
            map_error=lambda e: map_gemini_error(e, provider=self.provider),
            gate=gate,
        )

    @staticmethod
    def _collect(
        reply: genai_types.GenerateContentResponse,
        text: list[str],
        calls: list[ToolCall],
        gate: DeltaGate | None,
    ) -> list[str]:
        """Add the first candidate's text and calls; return this chunk's new text."""
        new: list[str] = []
        candidates = reply.candidates or []
        if not candidates or candidates[0].content is None:
            return new
        for part in candidates[0].content.parts or ():
            if part.text and not part.thought:
                text.append(part.text)
                new.append(part.text)
            if part.function_call is not None:
                fc = part.function_call
                if not fc.name:
                    raise ProviderError("gemini: function call without a name", provider="gemini")
                signature = part.thought_signature
                calls.append(
                    ToolCall(
                        id=fc.id or new_call_id(),
                        name=fc.name,
                        arguments=decode_arguments(fc.args),
                        signature=base64.b64encode(signature).decode("ascii")
                        if signature
                        else None,
                    )
                )
        return new
