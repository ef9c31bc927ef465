"""The transports send the wire codec's body as it is and hand back the server's JSON as
it is: a field the installed SDK's ``create()`` does not know (a newer API field the
codec writes, such as ``prompt_cache_key`` on an older ``openai``) reaches the server,
and reply fields the SDK's models do not declare reach the codec."""

from __future__ import annotations

import pytest

from visus.providers.anthropic_client import AnthropicTransport
from visus.providers.base import ProviderConfig
from visus.providers.openai_client import OpenAITransport

from .stub import Reply, StubServer, sse, track

NEW = {"visus_newer_field": {"kept": [1, None]}}


def _config(stub: StubServer, path: str = "") -> ProviderConfig:
    return ProviderConfig(api_key="sk-test", base_url=f"{stub.url}{path}", backoff_base=0.0)


@pytest.mark.parametrize("wire", ["openai-chat", "openai-responses"])
async def test_openai_body_and_reply_pass_through(stub: StubServer, wire: str) -> None:
    reply = {"id": "r1", "object": "x", "output": [], "choices": [], "novel": {"a": None}}
    stub.replies = [Reply(body=reply)]
    transport = track(OpenAITransport(_config(stub, "/v1"), wire=wire))  # type: ignore[arg-type]
    body = {"model": "m", "messages": [], "input": [], **NEW}
    got = await transport.call(body, "m")  # type: ignore[arg-type]
    assert got == reply
    sent = stub.requests[-1]
    assert sent.path == ("/v1/chat/completions" if wire == "openai-chat" else "/v1/responses")
    assert sent.json["visus_newer_field"] == NEW["visus_newer_field"]
    assert sent.headers["authorization"] == "Bearer sk-test"


async def test_openai_stream_events_pass_through(stub: StubServer) -> None:
    events = [{"id": "c", "choices": [{"index": 0, "delta": {"content": "hi"}}], "odd": None}]
    stub.replies = [Reply(chunks=sse(*events, done=True), content_type="text/event-stream")]
    transport = track(OpenAITransport(_config(stub, "/v1"), wire="openai-chat"))
    got = [e async for e in transport.events({"messages": [], **NEW}, "m")]  # type: ignore[arg-type]
    assert got == events
    sent = stub.requests[-1].json
    assert sent["stream"] is True
    assert sent["stream_options"] == {"include_usage": True}
    assert sent["visus_newer_field"] == NEW["visus_newer_field"]


async def test_anthropic_body_and_stream_pass_through(stub: StubServer) -> None:
    events = [
        {"type": "message_start", "message": {"id": "m1", "content": [], "novel": 1}},
        {"type": "message_stop"},
    ]
    chunks = sse(*events, event_names=True)
    stub.replies = [Reply(chunks=chunks, content_type="text/event-stream")]
    transport = track(AnthropicTransport(_config(stub)))
    body = {"max_tokens": 5, "messages": [], **NEW}
    got = [e async for e in transport.events(body, "claude-x")]  # type: ignore[arg-type]
    assert got == events
    sent = stub.requests[-1]
    assert sent.path == "/v1/messages"
    assert sent.json["visus_newer_field"] == NEW["visus_newer_field"]
    assert sent.json["stream"] is True
    # The key as the SDK sends it (x-api-key, or a bearer token in newer releases).
    assert "sk-test" in sent.headers.get("x-api-key", sent.headers.get("authorization", ""))
