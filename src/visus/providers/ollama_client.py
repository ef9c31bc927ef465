"""Ollama's native ``/api/chat``. The only module that imports the ``ollama`` SDK.

Images travel as ``images`` on user messages (lowered by ``visus.wire``). They are
handed to the SDK as raw bytes: given a string, the SDK first asks the file system
whether it names a file, which a model's request has no business doing.

Example:
    >>> OllamaClient(ProviderConfig(base_url="http://127.0.0.1:11434")).wire
    'ollama'
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from visus.errors import InvalidInputError
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
    request_turn,
    usage_for,
    with_retries,
)
from visus.record.messages import AssistantMessage, ModelRequest, ToolCall

try:
    import ollama
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("the Ollama client needs: pip install 'visus[providers]'") from e

__all__ = ["OllamaClient", "map_ollama_error"]

_TRANSPORT_MODULES = {"httpx", "httpx2"}


def map_ollama_error(e: Exception, *, provider: str = "ollama") -> MappedError | None:
    """The one place ollama SDK errors become visus errors."""
    if isinstance(e, ollama.ResponseError):
        if e.status_code and e.status_code > 0:
            return classify_http(e.status_code, str(e.error), provider=provider)
        # No status: the stream reported the error in-band after a 200; judge it by its
        # words as a request error, never retried.
        mapped = classify_http(400, str(e.error), provider=provider)
        return MappedError(mapped.error, retryable=False)
    if isinstance(e, ConnectionError) or type(e).__module__.split(".")[0] in _TRANSPORT_MODULES:
        return classify_http(None, f"{type(e).__name__}: {e}", provider=provider)
    return None


def _raw_images(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for m in messages:
        images = m.get("images")
        if images:
            m = {**m, "images": [_image_bytes(i) for i in images]}
        out.append(m)
    return out


def _image_bytes(image: object) -> bytes:
    if isinstance(image, bytes):
        return image
    if isinstance(image, str):
        try:
            return base64.b64decode(image, validate=True)
        except (binascii.Error, ValueError) as e:
            raise InvalidInputError("ollama: an image in the request is not base64") from e
    raise InvalidInputError(f"ollama: unexpected image value of type {type(image).__name__}")


class OllamaClient:
    """A :class:`~visus.providers.base.ProviderClient` on ``ollama.AsyncClient``."""

    def __init__(self, config: ProviderConfig, *, provider: str = "ollama") -> None:
        self.provider = provider
        self.wire: Wire = "ollama"
        self.config = config
        headers = dict(config.headers)
        if config.api_key:
            headers.setdefault("Authorization", f"Bearer {config.api_key}")
        self._client = ollama.AsyncClient(
            host=config.base_url, timeout=config.timeout, headers=headers or None
        )

    async def aclose(self) -> None:
        """Close the SDK's connection pool (call before the event loop ends)."""
        await self._client.close()  # type: ignore[no-untyped-call]

    async def complete(
        self,
        request: ModelRequest,
        *,
        model: ModelSpec,
        blobs: BlobReader,
        on_delta: OnDelta | None = None,
        refit_cache: RefitCache | None = None,
    ) -> AssistantMessage:
        """Lower ``request`` onto ``/api/chat``, send it, parse the reply."""
        payload = lower_request(
            request, wire=self.wire, model=model, blobs=blobs, refit_cache=refit_cache
        )
        options = dict(payload.get("options") or {})
        options.setdefault("num_predict", request.max_tokens)
        payload["options"] = options
        return await self.send(payload, model=model, on_delta=on_delta, turn=request_turn(request))

    async def send(
        self,
        payload: dict[str, Any],
        *,
        model: ModelSpec,
        on_delta: OnDelta | None = None,
        turn: int = 1,
    ) -> AssistantMessage:
        """Send an already lowered ``/api/chat`` body; stream text when ``on_delta`` is given."""
        messages = _raw_images(list(payload.get("messages", ())))
        extra = {
            k: payload[k]
            for k in ("tools", "options", "format", "keep_alive", "think")
            if payload.get(k) is not None
        }
        gate = DeltaGate(on_delta)

        async def attempt() -> AssistantMessage:
            text: list[str] = []
            calls: list[ToolCall] = []
            prompt = output = 0
            if on_delta is None:
                parts = [await self._client.chat(model.name, messages, stream=False, **extra)]
            else:
                parts = []
                async for part in await self._client.chat(
                    model.name, messages, stream=True, **extra
                ):
                    parts.append(part)
                    if part.message.content:
                        await gate(part.message.content)
            for part in parts:
                if part.message.content:
                    text.append(part.message.content)
                for tc in part.message.tool_calls or ():
                    calls.append(
                        ToolCall(
                            id=new_call_id(),
                            name=tc.function.name,
                            arguments=decode_arguments(tc.function.arguments),
                        )
                    )
                prompt = part.prompt_eval_count or prompt
                output = part.eval_count or output
            return assistant_message(
                model, "".join(text), calls, usage_for(model, prompt, output), turn=turn
            )

        return await with_retries(
            attempt,
            config=self.config,
            map_error=lambda e: map_ollama_error(e, provider=self.provider),
            gate=gate,
        )
