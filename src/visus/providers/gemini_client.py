"""Gemini generateContent transport. The only module that imports ``google-genai``.

``visus.wire`` lowers to the REST body (``contents``, ``systemInstruction``,
``tools``, ``generationConfig``; camelCase). The SDK's pydantic types accept those
aliases, so the body becomes ``types.Content`` and ``types.GenerateContentConfig``
without a second, hand-written lowering.

Replies are dumped to camelCase dicts (bytes as base64) and parsed by
:mod:`visus.wire.gemini`, which keeps thought signatures (on function calls and on
text) for the next request.

Example:
    >>> GeminiClient(ProviderConfig(api_key="x")).wire
    'gemini'
"""

from __future__ import annotations

import base64
import datetime
import enum
from collections.abc import AsyncIterator, Mapping

from visus.errors import AuthError
from visus.providers.base import (
    Body,
    Client,
    MappedError,
    ProviderConfig,
    classify_http,
    parse_retry_after,
)
from visus.record.messages import JSONObject

try:
    from google import genai
    from google.genai import errors as genai_errors
    from google.genai import types as genai_types
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "the Gemini client needs: pip install -e '.[providers]' in the visus checkout"
    ) from e

__all__ = ["GeminiClient", "GeminiTransport", "map_gemini_error", "to_sdk_request"]

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
    payload: Mapping[str, object], *, max_tokens: int | None = None
) -> tuple[list[genai_types.Content], genai_types.GenerateContentConfig]:
    """The lowered REST body as the SDK's ``contents`` and ``config``.

    Example:
        >>> contents, config = to_sdk_request(
        ...     {"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
        ...      "systemInstruction": {"parts": [{"text": "be brief"}]}}, max_tokens=64)
        >>> contents[0].parts[0].text, config.max_output_tokens
        ('hi', 64)
    """
    raw_contents = payload.get("contents")
    contents = [
        genai_types.Content.model_validate(c)
        for c in (raw_contents if isinstance(raw_contents, list) else ())
    ]
    generation = payload.get("generationConfig") or payload.get("generation_config") or {}
    cfg: dict[str, object] = dict(generation) if isinstance(generation, Mapping) else {}
    for key, field_name in _CONFIG_KEYS.items():
        if payload.get(key) is not None:
            cfg[field_name] = payload[key]
    if max_tokens is not None and not {"maxOutputTokens", "max_output_tokens"} & cfg.keys():
        cfg["max_output_tokens"] = max_tokens
    # Declarations only: the SDK must never try to call tools itself.
    cfg["automatic_function_calling"] = {"disable": True}
    return contents, genai_types.GenerateContentConfig.model_validate(cfg)


class GeminiTransport:
    """``genai.Client(...).aio``: a REST body in, replies as camelCase dicts out (the
    shape :mod:`visus.wire.gemini` parses, whatever the SDK's own field names)."""

    def __init__(self, config: ProviderConfig) -> None:
        self._client = genai.Client(
            api_key=config.api_key,
            http_options=genai_types.HttpOptions(
                base_url=config.base_url,
                # v1beta: the version that takes systemInstruction and tools everywhere.
                api_version="v1beta",
                timeout=int(config.timeout * 1000),
                headers=dict(config.headers) or None,
                # One attempt: the Client owns retrying, the same way for every provider.
                retry_options=genai_types.HttpRetryOptions(attempts=1),
            ),
        )

    async def aclose(self) -> None:
        await self._client.aio.aclose()

    async def call(self, body: Body, model: str) -> JSONObject:
        contents, config = to_sdk_request(body)
        reply = await self._client.aio.models.generate_content(
            model=model, contents=contents, config=config
        )
        return _dump(reply)

    async def events(self, body: Body, model: str) -> AsyncIterator[JSONObject]:
        contents, config = to_sdk_request(body)
        stream = await self._client.aio.models.generate_content_stream(
            model=model, contents=contents, config=config
        )
        async for chunk in stream:
            yield _dump(chunk)

    def map_error(self, e: Exception, provider: str) -> MappedError | None:
        return map_gemini_error(e, provider=provider)


def _dump(reply: genai_types.GenerateContentResponse) -> JSONObject:
    """The reply as REST JSON: camelCase names, bytes (thought signatures) as standard
    base64 (the SDK's own JSON mode writes the URL-safe alphabet, which REST does not)."""
    out = _rest(reply.model_dump(by_alias=True, exclude_none=True))
    assert isinstance(out, dict)
    return out


def _rest(value: object) -> object:
    if isinstance(value, dict):
        return {str(k): _rest(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_rest(v) for v in value]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    return value


class GeminiClient(Client):
    """The :class:`~visus.providers.base.Client` over :class:`GeminiTransport`."""

    def __init__(self, config: ProviderConfig, *, provider: str = "gemini") -> None:
        super().__init__(GeminiTransport(config), provider=provider, wire="gemini", config=config)
