"""Gemini client against a loopback stub speaking generateContent."""

from __future__ import annotations

import base64
import dataclasses
import json

import pytest

from visus.errors import (
    AuthError,
    ContextLengthError,
    ImageRejectedError,
    ProviderError,
    RateLimitError,
)
from visus.models.spec import ModelSpec
from visus.providers.base import ProviderConfig
from visus.providers.gemini_client import GeminiClient, to_sdk_request

from .stub import Reply, StubServer, track

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)
REPLY = {
    "candidates": [
        {
            "content": {
                "role": "model",
                "parts": [
                    {"text": "I see a dot."},
                    {"functionCall": {"name": "view", "args": {"path": "a.png"}}},
                ],
            },
            "finishReason": "STOP",
        }
    ],
    "usageMetadata": {
        "promptTokenCount": 1000,
        "candidatesTokenCount": 400,
        "thoughtsTokenCount": 100,
    },
}
PAYLOAD = {
    "contents": [
        {
            "role": "user",
            "parts": [
                {"text": "what is this?"},
                {"inlineData": {"mimeType": "image/png", "data": base64.b64encode(PNG).decode()}},
            ],
        }
    ],
    "systemInstruction": {"parts": [{"text": "be brief"}]},
    "tools": [
        {
            "functionDeclarations": [
                {"name": "view", "description": "see", "parameters": {"type": "object"}}
            ]
        }
    ],
}


def _client(stub: StubServer, **kw: object) -> GeminiClient:
    cfg = ProviderConfig(api_key="g-key", base_url=stub.url, backoff_base=0.0)
    return track(GeminiClient(dataclasses.replace(cfg, **kw)))  # type: ignore[arg-type]


def test_rest_body_becomes_sdk_types_with_raw_image_bytes() -> None:
    contents, config = to_sdk_request(PAYLOAD, max_tokens=77)
    part = contents[0].parts[1]  # type: ignore[index]
    assert part.inline_data is not None
    assert part.inline_data.data == PNG
    assert config.max_output_tokens == 77
    assert config.system_instruction is not None
    assert config.tools is not None
    assert config.tools[0].function_declarations[0].name == "view"  # type: ignore[union-attr,index]


async def test_parses_text_function_call_usage(stub: StubServer, spec: ModelSpec) -> None:
    stub.script(Reply(body=REPLY))
    reply = await _client(stub).send(PAYLOAD, model=spec, max_tokens=50)
    assert reply.text == "I see a dot."
    assert [(c.name, dict(c.arguments)) for c in reply.tool_calls] == [("view", {"path": "a.png"})]
    assert reply.tool_calls[0].id  # Gemini sent none; one is made up so results can refer to it
    assert reply.usage is not None
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (1000, 500)
    assert reply.usage.cost_usd == pytest.approx(0.006)
    seen = stub.requests[0]
    assert seen.path == "/v1beta/models/test-model:generateContent"
    assert seen.headers["x-goog-api-key"] == "g-key"
    body = seen.json
    sent = body["contents"][0]["parts"][1]
    inline = sent.get("inlineData") or sent.get("inline_data")
    assert base64.b64decode(inline["data"]) == PNG  # the real bytes travel as an image part
    assert body["generationConfig"]["maxOutputTokens"] == 50
    assert body["systemInstruction"]["parts"][0]["text"] == "be brief"


async def test_streams_text(stub: StubServer, spec: ModelSpec) -> None:
    chunk1 = {"candidates": [{"content": {"role": "model", "parts": [{"text": "I see "}]}}]}
    chunk2 = {
        "candidates": [
            {"content": {"role": "model", "parts": [{"text": "a dot."}]}, "finishReason": "STOP"}
        ],
        "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 4},
    }
    stub.script(
        Reply(
            chunks=[f"data: {json.dumps(c)}\r\n\r\n".encode() for c in (chunk1, chunk2)],
            content_type="text/event-stream",
        )
    )
    deltas: list[str] = []
    reply = await _client(stub).send(PAYLOAD, model=spec, on_delta=deltas.append)
    assert deltas == ["I see ", "a dot."]
    assert reply.text == "I see a dot."
    assert reply.usage is not None
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (9, 4)
    assert ":streamGenerateContent" in stub.requests[0].path


def _error(code: int, status: str, message: str) -> dict[str, object]:
    return {"error": {"code": code, "message": message, "status": status}}


async def test_429_retried_then_success(stub: StubServer, spec: ModelSpec) -> None:
    stub.script(
        Reply(status=429, body=_error(429, "RESOURCE_EXHAUSTED", "Quota exceeded")),
        Reply(status=500, body=_error(500, "INTERNAL", "oops")),
        Reply(body=REPLY),
    )
    reply = await _client(stub).send(PAYLOAD, model=spec)
    assert reply.text == "I see a dot."
    assert len(stub.requests) == 3


async def test_429_exhausted(stub: StubServer, spec: ModelSpec) -> None:
    stub.script(Reply(status=429, body=_error(429, "RESOURCE_EXHAUSTED", "Quota exceeded")))
    with pytest.raises(RateLimitError):
        await _client(stub, max_retries=1).send(PAYLOAD, model=spec)
    assert len(stub.requests) == 2


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (
            400,
            {
                "error": {
                    "code": 400,
                    "message": "API key not valid. Please pass a valid API key.",
                    "status": "INVALID_ARGUMENT",
                    "details": [{"reason": "API_KEY_INVALID"}],
                }
            },
            AuthError,
        ),
        (403, _error(403, "PERMISSION_DENIED", "denied"), AuthError),
        (401, _error(401, "UNAUTHENTICATED", "Request had invalid credentials."), AuthError),
        (
            400,
            _error(
                400,
                "INVALID_ARGUMENT",
                "The input token count (1200000) exceeds the maximum number of tokens "
                "allowed (1048576).",
            ),
            ContextLengthError,
        ),
        (
            400,
            _error(400, "INVALID_ARGUMENT", "Unable to process input image."),
            ImageRejectedError,
        ),
        (404, _error(404, "NOT_FOUND", "models/x is not found"), ProviderError),
    ],
)
async def test_errors_map_to_visus_errors(
    stub: StubServer, spec: ModelSpec, status: int, body: dict[str, object], expected: type
) -> None:
    stub.script(Reply(status=status, body=body))
    with pytest.raises(expected) as info:
        await _client(stub).send(PAYLOAD, model=spec)
    assert type(info.value) is expected
    assert info.value.provider == "gemini"
    assert len(stub.requests) == 1
