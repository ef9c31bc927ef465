"""Ollama (/api/chat) and Bedrock (Converse) clients against loopback stubs."""

from __future__ import annotations

import base64
import dataclasses

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
from visus.providers.bedrock_client import BedrockClient, to_boto_request
from visus.providers.ollama_client import OllamaClient
from visus.record.blobs import MemoryBlobStore
from visus.record.messages import (
    AssistantMessage,
    ImagePart,
    ModelRequest,
    PerceptionOrigin,
    TextPart,
    ToolCall,
    ToolResult,
    UserMessage,
)

from .stub import Reply, StubServer, aws_event, ndjson, track

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)
B64 = base64.b64encode(PNG).decode()

# --- Ollama -----------------------------------------------------------------------

OLLAMA_DONE = {
    "model": "test-model",
    "created_at": "2026-01-01T00:00:00Z",
    "message": {
        "role": "assistant",
        "content": "A dot.",
        "tool_calls": [{"function": {"name": "view", "arguments": {"path": "a.png"}}}],
    },
    "done": True,
    "done_reason": "stop",
    "prompt_eval_count": 1000,
    "eval_count": 500,
}


def _ollama(stub: StubServer, **kw: object) -> OllamaClient:
    cfg = ProviderConfig(base_url=stub.url, backoff_base=0.0)
    return track(OllamaClient(dataclasses.replace(cfg, **kw)))  # type: ignore[arg-type]


async def test_ollama_parses_reply_and_sends_images_as_base64(
    stub: StubServer, spec: ModelSpec
) -> None:
    stub.script(Reply(body=OLLAMA_DONE))
    payload = {
        "model": "x",
        "messages": [{"role": "user", "content": "what?", "images": [B64]}],
        "stream": False,
    }
    reply = await _ollama(stub).send(payload, model=spec)
    assert reply.text == "A dot."
    assert [(c.name, dict(c.arguments)) for c in reply.tool_calls] == [("view", {"path": "a.png"})]
    assert reply.usage is not None
    assert reply.usage.cost_usd == pytest.approx(0.006)
    seen = stub.requests[0]
    assert seen.path == "/api/chat"
    assert seen.json["model"] == "test-model"
    assert seen.json["stream"] is False
    assert base64.b64decode(seen.json["messages"][0]["images"][0]) == PNG


async def test_ollama_streams_ndjson(stub: StubServer, spec: ModelSpec) -> None:
    part = {"model": "test-model", "created_at": "2026-01-01T00:00:00Z", "done": False}
    lines = ndjson(
        {**part, "message": {"role": "assistant", "content": "A "}},
        {**part, "message": {"role": "assistant", "content": "dot."}},
        {**OLLAMA_DONE, "message": {"role": "assistant", "content": ""}},
    )
    stub.script(Reply(chunks=lines, content_type="application/x-ndjson"))
    deltas: list[str] = []
    reply = await _ollama(stub).send({"messages": []}, model=spec, on_delta=deltas.append)
    assert deltas == ["A ", "dot."]
    assert reply.text == "A dot."
    assert reply.usage is not None
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (1000, 500)
    assert stub.requests[0].json["stream"] is True


async def test_ollama_retries_503_then_maps_errors(stub: StubServer, spec: ModelSpec) -> None:
    stub.script(Reply(status=503, body={"error": "server busy"}), Reply(body=OLLAMA_DONE))
    assert (await _ollama(stub).send({"messages": []}, model=spec)).text == "A dot."
    assert len(stub.requests) == 2

    stub.script(Reply(status=429, body={"error": "too many requests"}))
    with pytest.raises(RateLimitError):
        await _ollama(stub, max_retries=1).send({"messages": []}, model=spec)
    assert len(stub.requests) == 2

    stub.script(Reply(status=401, body={"error": "unauthorized"}))
    with pytest.raises(AuthError):
        await _ollama(stub).send({"messages": []}, model=spec)

    stub.script(Reply(status=400, body={"error": "image: unknown format"}))
    with pytest.raises(ImageRejectedError):
        await _ollama(stub).send({"messages": []}, model=spec)

    stub.script(Reply(status=400, body={"error": "the input length exceeds the context length"}))
    with pytest.raises(ContextLengthError):
        await _ollama(stub).send({"messages": []}, model=spec)

    stub.script(Reply(status=404, body={"error": "model 'test-model' not found"}))
    with pytest.raises(ProviderError) as info:
        await _ollama(stub).send({"messages": []}, model=spec)
    assert info.value.status == 404
    assert "not found" in str(info.value)


async def test_ollama_complete_hoists_tool_images_onto_a_user_message(
    stub: StubServer, spec: ModelSpec
) -> None:
    store = MemoryBlobStore()
    digest = store.put(PNG, "image/png")
    request = ModelRequest(
        messages=(
            UserMessage((TextPart("look"),)),
            AssistantMessage(tool_calls=(ToolCall("c1", "view", {"path": "a.png"}),)),
            ToolResult(
                "c1",
                "view",
                (ImagePart(digest, "image/png", len(PNG), 1, 1, PerceptionOrigin("a.png")),),
            ),
        ),
        max_tokens=64,
    )
    stub.script(Reply(body=OLLAMA_DONE))
    await _ollama(stub).complete(request, model=spec, blobs=store)
    body = stub.requests[0].json
    assert body["options"]["num_predict"] == 64
    with_images = [m for m in body["messages"] if m.get("images")]
    assert [m["role"] for m in with_images] == ["user"]
    assert base64.b64decode(with_images[0]["images"][0]) == PNG


# --- Bedrock ----------------------------------------------------------------------

CONVERSE = {
    "output": {
        "message": {
            "role": "assistant",
            "content": [
                {"text": "A dot."},
                {"toolUse": {"toolUseId": "tu_1", "name": "view", "input": {"path": "a.png"}}},
            ],
        }
    },
    "stopReason": "tool_use",
    "usage": {"inputTokens": 1000, "outputTokens": 500, "totalTokens": 1500},
    "metrics": {"latencyMs": 5},
}
CONVERSE_PAYLOAD = {
    "messages": [
        {
            "role": "user",
            "content": [
                {"text": "what?"},
                {"image": {"format": "png", "source": {"bytes": B64}}},
            ],
        }
    ],
    "system": [{"text": "be brief"}],
    "inferenceConfig": {"maxTokens": 99},
}


def _bedrock(stub: StubServer, **kw: object) -> BedrockClient:
    cfg = ProviderConfig(
        api_key="AKIDTEST",
        aws_secret_access_key="secret",
        region="us-east-1",
        base_url=stub.url,
        backoff_base=0.0,
    )
    return track(BedrockClient(dataclasses.replace(cfg, **kw)))  # type: ignore[arg-type]


def test_to_boto_request_decodes_media_bytes_only() -> None:
    req = to_boto_request(CONVERSE_PAYLOAD, model_id="m")
    assert req["modelId"] == "m"
    assert req["messages"][0]["content"][1]["image"]["source"]["bytes"] == PNG
    assert req["messages"][0]["content"][0] == {"text": "what?"}
    assert req["system"] == [{"text": "be brief"}]


async def test_bedrock_parses_converse_and_sends_real_image_bytes(
    stub: StubServer, spec: ModelSpec
) -> None:
    stub.script(Reply(body=CONVERSE))
    reply = await _bedrock(stub).send(CONVERSE_PAYLOAD, model=spec)
    assert reply.text == "A dot."
    assert [(c.id, c.name, dict(c.arguments)) for c in reply.tool_calls] == [
        ("tu_1", "view", {"path": "a.png"})
    ]
    assert reply.usage is not None
    assert reply.usage.cost_usd == pytest.approx(0.006)
    seen = stub.requests[0]
    assert seen.path == "/model/test-model/converse"
    assert seen.headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDTEST/")
    image = seen.json["messages"][0]["content"][1]["image"]
    assert base64.b64decode(image["source"]["bytes"]) == PNG  # encoded once, not twice
    assert seen.json["inferenceConfig"] == {"maxTokens": 99}


async def test_bedrock_streams_text_and_tool_input(stub: StubServer, spec: ModelSpec) -> None:
    frames = [
        aws_event("messageStart", {"role": "assistant"}),
        aws_event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "A "}}),
        aws_event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "dot."}}),
        aws_event("contentBlockStop", {"contentBlockIndex": 0}),
        aws_event(
            "contentBlockStart",
            {"contentBlockIndex": 1, "start": {"toolUse": {"toolUseId": "tu_2", "name": "view"}}},
        ),
        aws_event(
            "contentBlockDelta",
            {"contentBlockIndex": 1, "delta": {"toolUse": {"input": '{"path": '}}},
        ),
        aws_event(
            "contentBlockDelta",
            {"contentBlockIndex": 1, "delta": {"toolUse": {"input": '"b.png"}'}}},
        ),
        aws_event("contentBlockStop", {"contentBlockIndex": 1}),
        aws_event("messageStop", {"stopReason": "tool_use"}),
        aws_event(
            "metadata",
            {
                "usage": {"inputTokens": 11, "outputTokens": 7, "totalTokens": 18},
                "metrics": {"latencyMs": 1},
            },
        ),
    ]
    stub.script(Reply(chunks=frames, content_type="application/vnd.amazon.eventstream"))
    deltas: list[str] = []
    reply = await _bedrock(stub).send(CONVERSE_PAYLOAD, model=spec, on_delta=deltas.append)
    assert deltas == ["A ", "dot."]
    assert reply.text == "A dot."
    assert [(c.id, dict(c.arguments)) for c in reply.tool_calls] == [("tu_2", {"path": "b.png"})]
    assert reply.usage is not None
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (11, 7)
    assert stub.requests[0].path == "/model/test-model/converse-stream"


async def test_bedrock_falls_back_to_converse_when_streaming_is_unavailable(
    stub: StubServer, spec: ModelSpec
) -> None:
    stub.script(
        _aws_error(
            400, "ValidationException", "This model doesn't support tool use in streaming mode."
        ),
        Reply(body=CONVERSE),
    )
    deltas: list[str] = []
    client = _bedrock(stub)
    reply = await client.send(CONVERSE_PAYLOAD, model=spec, on_delta=deltas.append)
    assert deltas == ["A dot."]
    assert reply.tool_calls[0].name == "view"
    assert [r.path for r in stub.requests] == [
        "/model/test-model/converse-stream",
        "/model/test-model/converse",
    ]
    # Once known, the client does not try streaming again.
    stub.script(Reply(body=CONVERSE))
    await client.send(CONVERSE_PAYLOAD, model=spec, on_delta=deltas.append)
    assert [r.path for r in stub.requests] == ["/model/test-model/converse"]


async def test_bedrock_stream_validation_errors_are_not_swallowed(
    stub: StubServer, spec: ModelSpec
) -> None:
    stub.script(_aws_error(400, "ValidationException", "Input is too long for requested model."))
    with pytest.raises(ContextLengthError):
        await _bedrock(stub).send(CONVERSE_PAYLOAD, model=spec, on_delta=lambda t: None)
    assert len(stub.requests) == 1


def _aws_error(status: int, code: str, message: str) -> Reply:
    return Reply(status=status, headers={"x-amzn-ErrorType": code}, body={"message": message})


async def test_bedrock_throttling_retried_then_exhausted(stub: StubServer, spec: ModelSpec) -> None:
    stub.script(_aws_error(429, "ThrottlingException", "Too many requests"), Reply(body=CONVERSE))
    assert (await _bedrock(stub).send(CONVERSE_PAYLOAD, model=spec)).text == "A dot."
    assert len(stub.requests) == 2  # botocore's own retries are off: one request per attempt

    stub.script(
        _aws_error(503, "ServiceUnavailableException", "try again"),
        _aws_error(500, "InternalServerException", "oops"),
        Reply(body=CONVERSE),
    )
    assert (await _bedrock(stub).send(CONVERSE_PAYLOAD, model=spec)).text == "A dot."
    assert len(stub.requests) == 3

    stub.script(_aws_error(429, "ThrottlingException", "Too many requests"))
    with pytest.raises(RateLimitError):
        await _bedrock(stub, max_retries=2).send(CONVERSE_PAYLOAD, model=spec)
    assert len(stub.requests) == 3


@pytest.mark.parametrize(
    ("status", "code", "message", "expected"),
    [
        (403, "AccessDeniedException", "not authorized", AuthError),
        (403, "UnrecognizedClientException", "The security token is invalid", AuthError),
        (400, "ValidationException", "Input is too long for requested model.", ContextLengthError),
        (
            400,
            "ValidationException",
            "The model returned the following errors: image exceeds max pixels",
            ImageRejectedError,
        ),
        (404, "ResourceNotFoundException", "Model not found", ProviderError),
    ],
)
async def test_bedrock_errors_map(
    stub: StubServer, spec: ModelSpec, status: int, code: str, message: str, expected: type
) -> None:
    stub.script(_aws_error(status, code, message))
    with pytest.raises(expected) as info:
        await _bedrock(stub).send(CONVERSE_PAYLOAD, model=spec)
    assert type(info.value) is expected
    assert code in str(info.value)
    assert len(stub.requests) == 1
