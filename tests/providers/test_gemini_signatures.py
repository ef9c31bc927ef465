"""Gemini thought signatures: read from a reply, kept in the record, sent back on the call."""

from __future__ import annotations

import base64
import dataclasses
import json

from visus.models.spec import ModelSpec
from visus.providers.base import ProviderConfig
from visus.providers.gemini_client import GeminiClient
from visus.record.blobs import MemoryBlobStore
from visus.record.codec import message_from_dict, message_to_dict
from visus.record.messages import (
    AssistantMessage,
    ModelRequest,
    TextPart,
    ToolResult,
    ToolSpec,
    UserMessage,
)

from .stub import Reply, StubServer, track

SIGNATURE = b"\x00\x9f opaque thought state \xff"
SIG_B64 = base64.b64encode(SIGNATURE).decode()
TOOL = ToolSpec(
    "view", "see a file", {"type": "object", "properties": {"path": {"type": "string"}}}
)


def _reply(parts: list[dict[str, object]]) -> dict[str, object]:
    return {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP"}],
        "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5},
    }


CALL_REPLY = _reply(
    [
        {
            "functionCall": {"id": "fc_1", "name": "view", "args": {"path": "a.png"}},
            "thoughtSignature": SIG_B64,
        },
        {"functionCall": {"id": "fc_2", "name": "view", "args": {"path": "b.png"}}},
    ]
)


def _proto_bytes(text: str) -> bytes:
    # protobuf JSON bytes: the SDK writes URL-safe base64 without padding
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _client(stub: StubServer) -> GeminiClient:
    cfg = ProviderConfig(api_key="g-key", base_url=stub.url, backoff_base=0.0)
    return track(GeminiClient(dataclasses.replace(cfg)))


async def test_signature_is_read_kept_and_sent_back(stub: StubServer, spec: ModelSpec) -> None:
    gemini = dataclasses.replace(spec, provider="gemini")
    stub.script(Reply(body=CALL_REPLY), Reply(body=_reply([{"text": "done"}])))
    client = _client(stub)
    blobs = MemoryBlobStore()
    ask = UserMessage((TextPart("look at a.png and b.png"),), turn=1)
    first = await client.complete(
        ModelRequest(messages=(ask,), tools=(TOOL,)), model=gemini, blobs=blobs
    )
    assert [c.signature for c in first.tool_calls] == [SIG_B64, None]

    # the session log keeps it: a reloaded message carries the same signature
    reloaded = message_from_dict(json.loads(json.dumps(message_to_dict(first))))
    assert isinstance(reloaded, AssistantMessage)
    assert reloaded.tool_calls == first.tool_calls

    results = tuple(
        ToolResult(c.id, c.name, (TextPart(f"saw {c.arguments['path']}"),), turn=1)
        for c in reloaded.tool_calls
    )
    second = await client.complete(
        ModelRequest(messages=(ask, reloaded, *results), tools=(TOOL,)), model=gemini, blobs=blobs
    )
    assert second.text == "done"
    sent = stub.requests[1].json["contents"][1]
    assert sent["role"] == "model"
    signed, unsigned = sent["parts"]
    assert signed["functionCall"]["id"] == "fc_1"
    assert _proto_bytes(signed["thoughtSignature"]) == SIGNATURE
    assert unsigned["functionCall"]["id"] == "fc_2"
    assert "thoughtSignature" not in unsigned
    assert "thought_signature" not in unsigned


async def test_streamed_call_keeps_its_signature(stub: StubServer, spec: ModelSpec) -> None:
    chunk = CALL_REPLY
    stub.script(
        Reply(
            chunks=[f"data: {json.dumps(chunk)}\r\n\r\n".encode()],
            content_type="text/event-stream",
        )
    )
    ask = UserMessage((TextPart("look"),), turn=1)
    reply = await _client(stub).complete(
        ModelRequest(messages=(ask,), tools=(TOOL,)),
        model=spec,
        blobs=MemoryBlobStore(),
        on_delta=lambda _: None,
    )
    assert reply.tool_calls[0].signature == SIG_B64
