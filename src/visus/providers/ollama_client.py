"""Ollama's native ``/api/chat`` transport. The only module that imports the ``ollama`` SDK.

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
from collections.abc import AsyncIterator, Mapping

from visus.errors import InvalidInputError
from visus.providers.base import Body, Client, MappedError, ProviderConfig, classify_http
from visus.record.messages import JSONObject

try:
    import ollama
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "the Ollama client needs: pip install -e '.[providers]' in the visus checkout"
    ) from e

__all__ = ["OllamaClient", "OllamaTransport", "map_ollama_error"]

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


def _raw_images(messages: list[object]) -> list[Mapping[str, object]]:
    out: list[Mapping[str, object]] = []
    for m in messages:
        if not isinstance(m, Mapping):
            raise InvalidInputError("ollama: a message in the request is not an object")
        images = m.get("images")
        if isinstance(images, list) and images:
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


class OllamaTransport:
    """``ollama.AsyncClient``: an ``/api/chat`` body in, replies (lines) as dicts out."""

    def __init__(self, config: ProviderConfig) -> None:
        headers = dict(config.headers)
        if config.api_key:
            headers.setdefault("Authorization", f"Bearer {config.api_key}")
        self._client = ollama.AsyncClient(
            host=config.base_url, timeout=config.timeout, headers=headers or None
        )

    async def aclose(self) -> None:
        await self._client.close()  # type: ignore[no-untyped-call]

    @staticmethod
    def _args(body: Body) -> tuple[list[Mapping[str, object]], dict[str, object]]:
        messages = body.get("messages")
        extra = {
            k: body[k]
            for k in ("tools", "options", "format", "keep_alive", "think")
            if body.get(k) is not None
        }
        return _raw_images(messages if isinstance(messages, list) else []), extra

    async def call(self, body: Body, model: str) -> JSONObject:
        messages, extra = self._args(body)
        reply = await self._client.chat(model, messages, stream=False, **extra)  # type: ignore[call-overload]
        out: JSONObject = reply.model_dump(mode="json")
        return out

    async def events(self, body: Body, model: str) -> AsyncIterator[JSONObject]:
        messages, extra = self._args(body)
        lines = await self._client.chat(model, messages, stream=True, **extra)  # type: ignore[call-overload]
        async for line in lines:
            yield line.model_dump(mode="json")

    def map_error(self, e: Exception, provider: str) -> MappedError | None:
        return map_ollama_error(e, provider=provider)


class OllamaClient(Client):
    """The :class:`~visus.providers.base.Client` over :class:`OllamaTransport`."""

    def __init__(self, config: ProviderConfig, *, provider: str = "ollama") -> None:
        super().__init__(OllamaTransport(config), provider=provider, wire="ollama", config=config)
