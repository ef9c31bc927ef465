"""Anthropic client against a loopback stub speaking the Messages API."""

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
from visus.providers.anthropic_client import AnthropicClient
from visus.providers.base import ProviderConfig
from visus.record.blobs import MemoryBlobStore
from visus.record.messages import (
    AssistantMessage,
    ImagePart,
    ModelRequest,
    PerceptionOrigin,
    TextPart,
    ToolCall,
    ToolResult,
    ToolSpec,
    UserMessage,
)

from .stub import Reply, StubServer, sse, track

MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "test-model",
    "content": [
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "toolu_1", "name": "view", "input": {"path": "a.png"}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {"input_tokens": 600, "output_tokens": 500, "cache_read_input_tokens": 400},
}


def _client(stub: StubServer, **kw: object) -> AnthropicClient:
    cfg = ProviderConfig(api_key="sk-ant-test", base_url=stub.url, backoff_base=0.0)
    return track(AnthropicClient(dataclasses.replace(cfg, **kw)))  # type: ignore[arg-type]


def _error(kind: str, message: str) -> dict[str, object]:
    return {"type": "error", "error": {"type": kind, "message": message}}


async def test_parses_text_tool_use_and_counts_cached_prompt_tokens(
    stub: StubServer, spec: ModelSpec
) -> None:
    stub.script(Reply(body=MESSAGE))
    payload = {"max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}
    reply = await _client(stub).send(payload, model=spec)
    assert reply.text == "Let me look."
    assert [(c.id, c.name, dict(c.arguments)) for c in reply.tool_calls] == [
        ("toolu_1", "view", {"path": "a.png"})
    ]
    assert reply.usage is not None
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (1000, 500)
    assert reply.usage.cost_usd == pytest.approx(0.006)
    seen = stub.requests[0]
    assert seen.path == "/v1/messages"
    # The SDK sends the key as x-api-key (older) or as a bearer token (newer releases).
    assert seen.headers.get("x-api-key") == "sk-ant-test" or (
        seen.headers.get("authorization") == "Bearer sk-ant-test"
    )
    assert seen.json["model"] == "test-model"


async def test_streams_text_deltas_and_tool_input_json(stub: StubServer, spec: ModelSpec) -> None:
    start = {**MESSAGE, "content": [], "usage": {"input_tokens": 42, "output_tokens": 1}}
    events = [
        {"type": "message_start", "message": start},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": "Let "},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": "me look."},
        },
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": "toolu_9", "name": "view", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": '{"path": '},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": '"z.png"}'},
        },
        {"type": "content_block_stop", "index": 1},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 17},
        },
        {"type": "message_stop"},
    ]
    stub.script(Reply(chunks=sse(*events, event_names=True), content_type="text/event-stream"))
    deltas: list[str] = []
    reply = await _client(stub).send(
        {"max_tokens": 100, "messages": []}, model=spec, on_delta=deltas.append
    )
    assert deltas == ["Let ", "me look."]
    assert reply.text == "Let me look."
    assert [(c.id, dict(c.arguments)) for c in reply.tool_calls] == [("toolu_9", {"path": "z.png"})]
    assert reply.usage is not None
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (42, 17)
    assert stub.requests[0].json["stream"] is True


async def test_overloaded_529_is_retried(stub: StubServer, spec: ModelSpec) -> None:
    stub.script(
        Reply(status=529, body=_error("overloaded_error", "Overloaded")), Reply(body=MESSAGE)
    )
    reply = await _client(stub).send({"max_tokens": 10, "messages": []}, model=spec)
    assert reply.tool_calls
    assert len(stub.requests) == 2


async def test_429_then_success_counts_attempts(stub: StubServer, spec: ModelSpec) -> None:
    limited = Reply(
        status=429,
        headers={"retry-after": "0"},
        body=_error("rate_limit_error", "Number of requests exceeded"),
    )
    stub.script(limited, limited, Reply(body=MESSAGE))
    reply = await _client(stub).send({"max_tokens": 10, "messages": []}, model=spec)
    assert reply.text == "Let me look."
    assert len(stub.requests) == 3


async def test_429_retried_then_exhausted(stub: StubServer, spec: ModelSpec) -> None:
    stub.script(Reply(status=429, body=_error("rate_limit_error", "Number of requests exceeded")))
    with pytest.raises(RateLimitError):
        await _client(stub, max_retries=2).send({"max_tokens": 10, "messages": []}, model=spec)
    assert len(stub.requests) == 3


@pytest.mark.parametrize(
    ("status", "kind", "message", "expected"),
    [
        (401, "authentication_error", "invalid x-api-key", AuthError),
        (
            400,
            "invalid_request_error",
            "prompt is too long: 210000 tokens > 200000 maximum",
            ContextLengthError,
        ),
        (
            400,
            "invalid_request_error",
            "messages.0.content.1.image.source.base64: image exceeds 5 MB maximum",
            ImageRejectedError,
        ),
        (
            413,
            "request_too_large",
            "Request exceeds the maximum allowed number of bytes: too large",
            ImageRejectedError,
        ),
        (400, "invalid_request_error", "messages: roles must alternate", ProviderError),
    ],
)
async def test_errors_map_to_visus_errors(
    stub: StubServer, spec: ModelSpec, status: int, kind: str, message: str, expected: type
) -> None:
    stub.script(Reply(status=status, body=_error(kind, message)))
    with pytest.raises(expected) as info:
        await _client(stub).send({"max_tokens": 10, "messages": []}, model=spec)
    assert type(info.value) is expected
    assert message in str(info.value)
    assert info.value.provider == "anthropic"
    assert len(stub.requests) == 1


async def test_complete_puts_the_viewed_image_inside_tool_result(
    stub: StubServer, spec: ModelSpec
) -> None:
    png = base64.b64decode(
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
    )
    store = MemoryBlobStore()
    digest = store.put(png, "image/png")
    claude = dataclasses.replace(
        spec, name="claude-sonnet-4-6", provider="anthropic", images_in_tool_results=True
    )
    request = ModelRequest(
        messages=(
            UserMessage((TextPart("look at dot.png"),), turn=1),
            AssistantMessage(tool_calls=(ToolCall("toolu_1", "view", {"path": "dot.png"}),)),
            ToolResult(
                "toolu_1",
                "view",
                (ImagePart(digest, "image/png", len(png), 1, 1, PerceptionOrigin("dot.png")),),
            ),
        ),
        system="You can see.",
        tools=(ToolSpec("view", "See a file", {"type": "object", "properties": {}}),),
        max_tokens=200,
    )
    stub.script(Reply(body=MESSAGE))
    await _client(stub).complete(request, model=claude, blobs=store)
    body = stub.requests[0].json
    assert body["max_tokens"] == 200
    assert body["model"] == "claude-sonnet-4-6"
    result = body["messages"][-1]["content"][0]
    assert result["type"] == "tool_result"
    blocks = result["content"]
    image = next(b for b in blocks if b["type"] == "image")
    assert base64.b64decode(image["source"]["data"]) == png
