"""OpenAI client (chat and responses wires) against a loopback stub speaking OpenAI's API."""

from __future__ import annotations

import base64
import json
import time

import pytest

from tests.timing import within
from visus.errors import (
    AuthError,
    ContextLengthError,
    ImageRejectedError,
    ProviderError,
    RateLimitError,
)
from visus.models.spec import ModelSpec
from visus.providers.base import ProviderConfig
from visus.providers.openai_client import OpenAIClient
from visus.record.blobs import MemoryBlobStore
from visus.record.messages import (
    AttachmentOrigin,
    ImagePart,
    ModelRequest,
    TextPart,
    ToolSpec,
    UserMessage,
)

from .stub import Reply, StubServer, sse, track

CHAT_REPLY = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "test-model",
    "choices": [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": "Looking at it.",
                "tool_calls": [
                    {
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "view", "arguments": '{"path": "a.png"}'},
                    },
                    {
                        "id": "call_b",
                        "type": "function",
                        "function": {"name": "read", "arguments": '{"path": "b.txt", "limit": 3}'},
                    },
                ],
            },
        }
    ],
    "usage": {"prompt_tokens": 1000, "completion_tokens": 500, "total_tokens": 1500},
}


def _client(stub: StubServer, **kw: object) -> OpenAIClient:
    cfg = ProviderConfig(api_key="sk-test", base_url=f"{stub.url}/v1", backoff_base=0.0)
    wire = kw.pop("wire", "openai-chat")
    if kw:
        import dataclasses

        cfg = dataclasses.replace(cfg, **kw)  # type: ignore[arg-type]
    return track(OpenAIClient(cfg, wire=wire))  # type: ignore[arg-type]


def _chunk(delta: dict[str, object], usage: dict[str, int] | None = None) -> dict[str, object]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "test-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": None}] if delta else [],
        "usage": usage,
    }


async def test_chat_parses_text_tool_calls_usage_and_cost(
    stub: StubServer, spec: ModelSpec
) -> None:
    stub.script(Reply(body=CHAT_REPLY))
    payload = {"model": "ignored", "messages": [{"role": "user", "content": "hi"}]}
    reply = await _client(stub).send(payload, model=spec, turn=4)

    assert reply.text == "Looking at it."
    assert [(c.id, c.name, dict(c.arguments)) for c in reply.tool_calls] == [
        ("call_a", "view", {"path": "a.png"}),
        ("call_b", "read", {"path": "b.txt", "limit": 3}),
    ]
    assert reply.usage is not None
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (1000, 500)
    assert reply.usage.cost_usd == pytest.approx(0.006)
    assert reply.model == "test-model"
    assert reply.turn == 4
    seen = stub.requests[0]
    assert seen.path == "/v1/chat/completions"
    assert seen.headers["authorization"] == "Bearer sk-test"
    assert seen.json["model"] == "test-model"  # the spec's id, not whatever the body said
    assert seen.json["messages"] == payload["messages"]


async def test_chat_streams_deltas_and_assembles_tool_call_fragments(
    stub: StubServer, spec: ModelSpec
) -> None:
    chunks = sse(
        _chunk({"role": "assistant", "content": ""}),
        _chunk({"content": "Hel"}),
        _chunk({"content": "lo"}),
        _chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_z",
                        "type": "function",
                        "function": {"name": "view", "arguments": '{"pa'},
                    }
                ]
            }
        ),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'th": "x.png"}'}}]}),
        _chunk({}, usage={"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}),
        done=True,
    )
    stub.script(Reply(chunks=chunks, content_type="text/event-stream"))
    deltas: list[str] = []

    async def on_delta(text: str) -> None:
        deltas.append(text)

    reply = await _client(stub).send(
        {"messages": [{"role": "user", "content": "hi"}]}, model=spec, on_delta=on_delta
    )
    assert deltas == ["Hel", "lo"]
    assert reply.text == "Hello"
    assert [(c.id, c.name, dict(c.arguments)) for c in reply.tool_calls] == [
        ("call_z", "view", {"path": "x.png"})
    ]
    assert reply.usage is not None
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (7, 3)
    body = stub.requests[0].json
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


async def test_sync_on_delta_callback_works(stub: StubServer, spec: ModelSpec) -> None:
    stub.script(
        Reply(
            chunks=sse(_chunk({"content": "a"}), _chunk({"content": "b"}), done=True),
            content_type="text/event-stream",
        )
    )
    seen: list[str] = []
    reply = await _client(stub).send({"messages": []}, model=spec, on_delta=seen.append)
    assert seen == ["a", "b"]
    assert reply.text == "ab"


async def test_retries_429_then_succeeds(stub: StubServer, spec: ModelSpec) -> None:
    limited = Reply(
        status=429, body={"error": {"message": "Rate limit reached", "type": "requests"}}
    )
    stub.script(limited, limited, Reply(body=CHAT_REPLY))
    reply = await _client(stub, max_retries=3).send({"messages": []}, model=spec)
    assert reply.text == "Looking at it."
    assert len(stub.requests) == 3


async def test_retries_5xx_then_succeeds(stub: StubServer, spec: ModelSpec) -> None:
    stub.script(
        Reply(status=503, body={"error": {"message": "overloaded"}}), Reply(body=CHAT_REPLY)
    )
    reply = await _client(stub).send({"messages": []}, model=spec)
    assert reply.tool_calls
    assert len(stub.requests) == 2


async def test_429_exhausted_raises_rate_limit_after_bounded_attempts(
    stub: StubServer, spec: ModelSpec
) -> None:
    stub.script(Reply(status=429, body={"error": {"message": "Rate limit reached"}}))
    with pytest.raises(RateLimitError) as info:
        await _client(stub, max_retries=2).send({"messages": []}, model=spec)
    assert len(stub.requests) == 3
    assert info.value.status == 429
    assert info.value.provider == "openai"


async def test_retry_after_header_is_honoured(stub: StubServer, spec: ModelSpec) -> None:
    # With backoff_base 30 s, finishing fast proves the 50 ms Retry-After was used.
    stub.script(
        Reply(status=429, headers={"retry-after-ms": "50"}, body={"error": {"message": "slow"}}),
        Reply(body=CHAT_REPLY),
    )
    start = time.monotonic()
    await _client(stub, backoff_base=30.0).send({"messages": []}, model=spec)
    assert time.monotonic() - start < min(within(5), 20)
    assert len(stub.requests) == 2


async def test_backoff_waits_between_attempts(stub: StubServer, spec: ModelSpec) -> None:
    stub.script(Reply(status=500, body={"error": {"message": "boom"}}), Reply(body=CHAT_REPLY))
    start = time.monotonic()
    await _client(stub, backoff_base=0.3).send({"messages": []}, model=spec)
    assert time.monotonic() - start >= 0.3


@pytest.mark.parametrize(
    ("status", "error", "expected"),
    [
        (401, {"message": "Incorrect API key provided", "code": "invalid_api_key"}, AuthError),
        (403, {"message": "forbidden"}, AuthError),
        (
            400,
            {
                "message": "This model's maximum context length is 128000 tokens.",
                "code": "context_length_exceeded",
            },
            ContextLengthError,
        ),
        (
            400,
            {
                "message": "Image URLs are only allowed for messages with role 'user', but "
                "this message with role 'tool' contains an image URL.",
                "param": "messages.[2].content.[1].type",
            },
            ImageRejectedError,
        ),
        (400, {"message": "Invalid image: image too large (dimensions)"}, ImageRejectedError),
        (404, {"message": "The model does not exist"}, ProviderError),
    ],
)
async def test_errors_map_to_visus_errors(
    stub: StubServer, spec: ModelSpec, status: int, error: dict[str, str], expected: type
) -> None:
    stub.script(Reply(status=status, body={"error": {"type": "invalid_request_error", **error}}))
    with pytest.raises(expected) as info:
        await _client(stub).send({"messages": []}, model=spec)
    assert type(info.value) is expected
    assert info.value.status == status
    assert error["message"] in str(info.value)
    assert len(stub.requests) == 1  # none of these is retried


async def test_connection_refused_is_a_provider_error_after_retries(spec: ModelSpec) -> None:
    from .stub import StubServer

    dead = StubServer()  # bound, never started, then closed: nothing listens on the port
    url = dead.url
    dead._server.server_close()
    client = track(
        OpenAIClient(
            ProviderConfig(api_key="k", base_url=f"{url}/v1", max_retries=1, backoff_base=0.0)
        )
    )
    with pytest.raises(ProviderError) as info:
        await client.send({"messages": []}, model=spec)
    assert info.value.status is None
    assert not isinstance(info.value, AuthError | RateLimitError)


RESPONSE = {
    "id": "resp_1",
    "object": "response",
    "created_at": 1,
    "model": "test-model",
    "status": "completed",
    "output": [
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "A red square.", "annotations": []}],
        },
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_r",
            "name": "view",
            "arguments": '{"path": "c.png"}',
            "status": "completed",
        },
    ],
    "usage": {
        "input_tokens": 1000,
        "output_tokens": 500,
        "total_tokens": 1500,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 0},
    },
}


async def test_responses_parses_text_calls_usage(stub: StubServer, spec: ModelSpec) -> None:
    stub.script(Reply(body=RESPONSE))
    payload = {
        "model": "x",
        "input": [{"role": "user", "content": "hi"}],
        "instructions": "be brief",
    }
    reply = await _client(stub, wire="openai-responses").send(payload, model=spec)
    assert reply.text == "A red square."
    assert [(c.id, c.name, dict(c.arguments)) for c in reply.tool_calls] == [
        ("call_r", "view", {"path": "c.png"})
    ]
    assert reply.usage is not None
    assert reply.usage.cost_usd == pytest.approx(0.006)
    seen = stub.requests[0]
    assert seen.path == "/v1/responses"
    assert seen.json["instructions"] == "be brief"


async def test_responses_streams_text_and_uses_completed_response(
    stub: StubServer, spec: ModelSpec
) -> None:
    events = [
        {"type": "response.created", "sequence_number": 0, "response": {**RESPONSE, "output": []}},
        {
            "type": "response.output_text.delta",
            "sequence_number": 1,
            "item_id": "msg_1",
            "output_index": 0,
            "content_index": 0,
            "delta": "A red ",
            "logprobs": [],
        },
        {
            "type": "response.output_text.delta",
            "sequence_number": 2,
            "item_id": "msg_1",
            "output_index": 0,
            "content_index": 0,
            "delta": "square.",
            "logprobs": [],
        },
        {"type": "response.completed", "sequence_number": 3, "response": RESPONSE},
    ]
    stub.script(Reply(chunks=sse(*events, event_names=True), content_type="text/event-stream"))
    deltas: list[str] = []
    reply = await _client(stub, wire="openai-responses").send(
        {"input": []}, model=spec, on_delta=deltas.append
    )
    assert deltas == ["A red ", "square."]
    assert reply.text == "A red square."
    assert reply.tool_calls[0].name == "view"


async def test_complete_lowers_the_request_with_the_image_as_a_real_part(
    stub: StubServer, spec: ModelSpec
) -> None:
    png = base64.b64decode(
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
    )
    store = MemoryBlobStore()
    digest = store.put(png, "image/png")
    request = ModelRequest(
        messages=(
            UserMessage(
                (
                    TextPart("what is this?"),
                    ImagePart(digest, "image/png", len(png), 1, 1, AttachmentOrigin("dot.png")),
                ),
                turn=2,
            ),
        ),
        tools=(ToolSpec("view", "See a file", {"type": "object", "properties": {}}),),
        max_tokens=321,
    )
    stub.script(Reply(body=CHAT_REPLY))
    reply = await _client(stub).complete(request, model=spec, blobs=store)
    assert reply.turn == 2
    body = stub.requests[0].json
    assert body["max_tokens"] == 321
    content = body["messages"][-1]["content"]
    images = [p for p in content if p.get("type") == "image_url"]
    assert images
    assert images[0]["image_url"]["url"].startswith("data:image/png;base64,")
    assert base64.b64decode(images[0]["image_url"]["url"].split(",", 1)[1]) == png
    assert body["tools"][0]["function"]["name"] == "view"
    assert json.dumps(body).count("base64,") == 1


async def test_chat_refusal_is_the_reply_text(stub: StubServer, spec: ModelSpec) -> None:
    refused = {
        **CHAT_REPLY,
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": None, "refusal": "I can't help."},
            }
        ],
    }
    stub.script(Reply(body=refused))
    reply = await _client(stub).send({"messages": []}, model=spec)
    assert reply.text == "I can't help."
    assert reply.tool_calls == ()


async def test_responses_stream_cut_at_max_tokens_still_answers(
    stub: StubServer, spec: ModelSpec
) -> None:
    cut = {**RESPONSE, "status": "incomplete", "output": RESPONSE["output"][:1]}
    events = [
        {
            "type": "response.output_text.delta",
            "sequence_number": 1,
            "item_id": "msg_1",
            "output_index": 0,
            "content_index": 0,
            "delta": "A red square.",
            "logprobs": [],
        },
        {"type": "response.incomplete", "sequence_number": 2, "response": cut},
    ]
    stub.script(Reply(chunks=sse(*events, event_names=True), content_type="text/event-stream"))
    reply = await _client(stub, wire="openai-responses").send(
        {"input": []}, model=spec, on_delta=lambda t: None
    )
    assert reply.text == "A red square."
    assert reply.usage is not None
    assert reply.usage.output_tokens == 500
