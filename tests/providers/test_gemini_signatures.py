"""Gemini thought signatures: read from a reply, kept in the record, sent back on the call."""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Iterator
from dataclasses import replace

import pytest

from visus.errors import ProviderError
from visus.models import get_model
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
from visus.reference.server import serve_in_background

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


# --- against the reference server, which signs gemini-3 calls and requires them back ---


@pytest.fixture(scope="module")
def reference_url() -> Iterator[str]:
    with serve_in_background() as url:
        yield url


async def test_reference_gemini_3_round_trip_needs_the_signature(reference_url: str) -> None:
    cfg = ProviderConfig(api_key="k", base_url=reference_url, max_retries=0)
    client = track(GeminiClient(cfg))
    spec = get_model("gemini-3-flash")
    blobs = MemoryBlobStore()
    ask = UserMessage((TextPart('call view {"path": "a.png"}'),), turn=1)
    first = await client.complete(
        ModelRequest(messages=(ask,), tools=(TOOL,)), model=spec, blobs=blobs
    )
    (call,) = first.tool_calls
    assert call.signature  # the server signed the call; the client kept it

    result = ToolResult(call.id, call.name, (TextPart("a.png: 1x1 png"),), turn=1)
    ok = await client.complete(
        ModelRequest(messages=(ask, first, result), tools=(TOOL,)), model=spec, blobs=blobs
    )
    assert ok.text  # accepted: the signature went back on the call

    unsigned = replace(first, tool_calls=(replace(call, signature=None),))
    with pytest.raises(ProviderError, match="thought_signature"):
        await client.complete(
            ModelRequest(messages=(ask, unsigned, result), tools=(TOOL,)), model=spec, blobs=blobs
        )
    forged = replace(first, tool_calls=(replace(call, signature=SIG_B64),))
    with pytest.raises(ProviderError, match="Corrupted thought signature"):
        await client.complete(
            ModelRequest(messages=(ask, forged, result), tools=(TOOL,)), model=spec, blobs=blobs
        )
