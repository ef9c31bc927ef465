"""OpenAI Responses reasoning round trip: a reasoning model's reasoning items (encrypted,
``store: false``) and its function calls' item ids are kept on the assistant message as
opaque provider state and sent back, verbatim and in order, on the next step of the same
wire; lowering the same record onto another wire drops them."""

from __future__ import annotations

import json

from visus.models import get_model
from visus.models.spec import ModelSpec
from visus.providers.base import ProviderConfig
from visus.providers.openai_client import OpenAIClient
from visus.record.blobs import MemoryBlobStore
from visus.record.codec import message_from_dict, message_to_dict
from visus.record.messages import (
    AssistantMessage,
    ModelRequest,
    ProviderState,
    TextPart,
    ToolResult,
    ToolSpec,
    UserMessage,
)
from visus.wire import lower

from .stub import Reply, StubServer, track

REASONING = {
    "type": "reasoning",
    "id": "rs_6820f383d7c08191846711c5df8233bc",
    "summary": [],
    "encrypted_content": "gAAAAABoISQ24OyVRYbkYfukT8a2...",
}
CALL = {
    "type": "function_call",
    "id": "fc_6820f3856f3c8191a9e6ab9e1f1a2e1c",
    "call_id": "call_Tl4SktRX8NzOOAy7V8FfT1Mc",
    "name": "view",
    "arguments": '{"path": "a.png"}',
    "status": "completed",
}
FIRST = {
    "id": "resp_1",
    "object": "response",
    "status": "completed",
    "output": [REASONING, CALL],
    "usage": {"input_tokens": 10, "output_tokens": 200},
}
SECOND = {
    "id": "resp_2",
    "object": "response",
    "status": "completed",
    "output": [
        {
            "type": "message",
            "id": "msg_2",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "A red square.", "annotations": []}],
        }
    ],
    "usage": {"input_tokens": 20, "output_tokens": 5},
}
VIEW = ToolSpec("view", "Look at an image.", {"type": "object", "properties": {}})


async def test_reasoning_items_and_call_ids_go_back_on_the_next_step(stub: StubServer) -> None:
    spec: ModelSpec = get_model("openai:gpt-5")
    assert spec.reasoning
    stub.script(Reply(body=FIRST), Reply(body=SECOND))
    cfg = ProviderConfig(api_key="sk", base_url=f"{stub.url}/v1", backoff_base=0.0)
    client = track(OpenAIClient(cfg, wire="openai-responses", official=True))
    blobs = MemoryBlobStore()
    ask = UserMessage((TextPart("what is in a.png?"),))
    first = await client.complete(
        ModelRequest(messages=(ask,), tools=(VIEW,)), model=spec, blobs=blobs
    )
    assert first.stop_reason == "tool_use"
    assert first.provider_state is not None
    # The record keeps it (and reads it back) unchanged.
    kept = message_from_dict(json.loads(json.dumps(message_to_dict(first))))
    assert isinstance(kept, AssistantMessage)
    assert kept.provider_state == first.provider_state
    result = ToolResult(CALL["call_id"], "view", (TextPart("a red square"),))
    history = (ask, kept, result)
    second = await client.complete(
        ModelRequest(messages=history, tools=(VIEW,)), model=spec, blobs=blobs
    )
    assert second.text == "A red square."
    sent = [r.json for r in stub.requests]
    for body in sent:  # stateless reasoning, asked for encrypted
        assert body["store"] is False
        assert body["include"] == ["reasoning.encrypted_content"]
    items = sent[1]["input"]
    assert items[1] == REASONING  # verbatim, before the call it led to
    assert items[2] == {
        "type": "function_call",
        "id": CALL["id"],
        "call_id": CALL["call_id"],
        "name": "view",
        "arguments": '{"path":"a.png"}',
    }
    assert items[3]["type"] == "function_call_output"


def test_other_wires_and_non_reasoning_models_send_no_state() -> None:
    spec = get_model("openai:gpt-5")
    state_msg = AssistantMessage(
        tool_calls=(),
        parts=(TextPart("thinking done"),),
        provider_state=ProviderState("openai-responses", json.dumps([REASONING])),
    )
    req = ModelRequest(messages=(UserMessage((TextPart("hi"),)), state_msg))
    chat = lower(req, wire="openai-chat", model=spec, blobs=MemoryBlobStore())
    assert "encrypted_content" not in json.dumps(chat)
    responses = lower(req, wire="openai-responses", model=spec, blobs=MemoryBlobStore())
    assert REASONING in responses["input"]
    plain = lower(
        req, wire="openai-responses", model=get_model("openai:gpt-4.1"), blobs=MemoryBlobStore()
    )
    assert "include" not in plain
    assert "store" not in plain
