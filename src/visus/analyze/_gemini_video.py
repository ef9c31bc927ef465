"""A video sent natively to Gemini: one ``generateContent`` call with an inline part.

The record and the wires have no video part, so this small path speaks Gemini's REST
API itself (``POST {base}/v1beta/models/{model}:generateContent`` with
``x-goog-api-key``), with the shared retry policy and HTTP error mapping of
``visus.providers.base``. The key and base URL are the Gemini provider's settings.

Example:
    >>> body = request_body(b"...", "video/mp4", "What happens?")
    >>> body["contents"][0]["parts"][0]["inlineData"]["mimeType"]
    'video/mp4'
"""

from __future__ import annotations

import base64
from typing import Any

import httpx

from visus.analyze._values import fail
from visus.errors import ProviderError
from visus.models import ModelSpec
from visus.providers import ProviderSettings
from visus.providers.base import MappedError, classify_http, with_retries
from visus.record.messages import Usage
from visus.wire import ReplyContext, gemini

__all__ = ["DEFAULT_GEMINI_URL", "ask_gemini_video", "request_body"]

DEFAULT_GEMINI_URL = "https://generativelanguage.googleapis.com"

_SYSTEM = (
    "You answer one question about the video given. Refer to moments by their time "
    "(m:ss) in the video."
)


def request_body(data: bytes, media_type: str, prompt: str) -> gemini.Request:
    """The generateContent body (the Gemini wire's own request type): the video inline,
    then the prompt."""
    return {
        "systemInstruction": {"parts": [{"text": _SYSTEM}]},
        "contents": [
            {
                "role": "user",
                "parts": [
                    {
                        "inlineData": {
                            "mimeType": media_type,
                            "data": base64.b64encode(data).decode("ascii"),
                        }
                    },
                    {"text": prompt},
                ],
            }
        ],
    }


def _map(e: Exception) -> MappedError | None:
    if isinstance(e, httpx.HTTPStatusError):
        try:
            message = str(e.response.json().get("error", {}).get("message", ""))
        except ValueError:
            message = e.response.text[:500]
        return classify_http(e.response.status_code, message or str(e), provider="gemini")
    if isinstance(e, httpx.TransportError):
        return classify_http(None, f"{type(e).__name__}: {e}", provider="gemini")
    return None


def _parse(spec: ModelSpec, reply: Any) -> tuple[str, Usage]:
    if not isinstance(reply, dict):
        raise fail("LLM_ERROR", "gemini: the reply is not a JSON object")
    # The Gemini codec reads the reply, as it does for every Gemini chat step.
    try:
        message = gemini.parse(reply, ReplyContext(spec, provider="gemini"))
    except ProviderError as e:
        raise fail("LLM_ERROR", str(e)) from e
    if not message.text:
        raise fail("LLM_ERROR", f"gemini returned no text ({message.stop_reason})")
    assert message.usage is not None
    return message.text, message.usage


async def ask_gemini_video(
    data: bytes, media_type: str, prompt: str, *, spec: ModelSpec, settings: ProviderSettings
) -> tuple[str, Usage]:
    """Ask ``spec`` (a Gemini model) about the video; ``(text, usage)`` or ``LLM_ERROR``."""
    key = settings.key("gemini")
    if not key:
        raise fail("LLM_ERROR", "gemini needs an API key: set GEMINI_API_KEY")
    base = (settings.url("gemini") or DEFAULT_GEMINI_URL).rstrip("/")
    url = f"{base}/v1beta/models/{spec.name}:generateContent"
    config = settings.config()
    headers = {"x-goog-api-key": key, **dict(config.headers)}
    body = request_body(data, media_type, prompt)
    try:
        async with httpx.AsyncClient(timeout=config.timeout, trust_env=False) as http:

            async def attempt() -> Any:
                response = await http.post(url, json=body, headers=headers)
                response.raise_for_status()
                return response.json()

            reply = await with_retries(attempt, config=config, map_error=_map)
    except ProviderError as e:
        raise fail("LLM_ERROR", f"{spec.name}: {e}") from e
    except ValueError as e:  # a 200 whose body is not JSON
        raise fail("LLM_ERROR", f"{spec.name}: the reply is not JSON: {e}") from e
    return _parse(spec, reply)
