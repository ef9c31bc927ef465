"""Reply parsing pinned by snapshots: replies written from each provider's API
reference (``tests/wire/replies/<wire>.json``: JSON replies and streamed events),
parsed by the wire's codec with no SDK in between; text, tool calls, stop reason,
usage (and opaque provider state) are pinned per case."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from visus.errors import ProviderError
from visus.models.spec import ModelSpec
from visus.record.messages import AssistantMessage
from visus.wire import WIRES, ReplyContext, Wire

HERE = Path(__file__).parent / "replies"
SPEC = ModelSpec(name="m", provider="openai", input_price_per_mtok=1.0, output_price_per_mtok=2.0)


def _load(wire: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((HERE / f"{wire}.json").read_text())
    return data


def _cases(kind: str) -> list[Any]:
    return [
        pytest.param(wire, case, id=f"{wire}: {case['name']}")
        for wire in WIRES
        for case in _load(wire)[kind]
    ]


def _check(message: AssistantMessage, expect: dict[str, Any]) -> None:
    assert message.text == expect["text"]
    calls = []
    for call, want in zip(message.tool_calls, expect["tool_calls"], strict=True):
        if want[0] is None:  # the wire names no call: visus makes an id up
            assert call.id.startswith("call_")
        else:
            assert call.id == want[0]
        calls.append([call.name, dict(call.arguments)])
        if len(want) > 3:
            assert call.signature == want[3]
    assert calls == [w[1:3] for w in expect["tool_calls"]]
    assert message.stop_reason == expect["stop_reason"]
    assert message.truncated == (expect["stop_reason"] == "max_tokens")
    assert message.usage is not None
    assert [message.usage.input_tokens, message.usage.output_tokens] == expect["usage"]
    inp, out = expect["usage"]
    assert message.usage.cost_usd == pytest.approx((inp * 1.0 + out * 2.0) / 1e6)
    if "state" in expect:
        assert message.provider_state is not None
        assert json.loads(message.provider_state.items) == expect["state"]
    assert message.model == "m"
    assert message.turn == 3


def test_every_wire_has_replies_with_every_stop_reason_that_matters() -> None:
    for wire in WIRES:
        data = _load(wire)
        assert data["source"], wire
        stops = {c["expect"]["stop_reason"] for c in data["cases"]}
        assert {"end_turn", "tool_use", "max_tokens"} <= stops, wire
        assert "max_tokens" in {c["expect"]["stop_reason"] for c in data["streams"]}, wire


@pytest.mark.parametrize(("wire", "case"), _cases("cases"))
def test_json_reply(wire: Wire, case: dict[str, Any]) -> None:
    ctx = ReplyContext(SPEC, turn=3, provider=wire)
    _check(WIRES[wire].parse(case["reply"], ctx), case["expect"])


@pytest.mark.parametrize(("wire", "case"), _cases("streams"))
def test_streamed_reply(wire: Wire, case: dict[str, Any]) -> None:
    stream = WIRES[wire].stream(ReplyContext(SPEC, turn=3, provider=wire))
    deltas = [d for d in (stream.feed(e) for e in case["events"]) if d]
    assert deltas == case["deltas"]
    _check(stream.result(), case["expect"])


def test_malformed_and_failed_replies_are_provider_errors() -> None:
    ctx = ReplyContext(SPEC, provider="openai")
    with pytest.raises(ProviderError, match="openai: reply without choices"):
        WIRES["openai-chat"].parse({"choices": []}, ctx)
    with pytest.raises(ProviderError, match="response failed"):
        WIRES["openai-responses"].parse({"status": "failed", "error": {"code": "x"}}, ctx)
    stream = WIRES["openai-responses"].stream(ctx)
    with pytest.raises(ProviderError, match=r"without response\.completed"):
        stream.result()
    with pytest.raises(ProviderError, match="overloaded"):
        WIRES["anthropic"].stream(ctx).feed(
            {"type": "error", "error": {"type": "overloaded_error", "message": "overloaded"}}
        )
    with pytest.raises(ProviderError, match="function call without a name"):
        WIRES["gemini"].parse(
            {"candidates": [{"content": {"parts": [{"functionCall": {"args": {}}}]}}]}, ctx
        )


def test_gemini_text_signature_goes_back_on_gemini_only() -> None:
    from visus.record.blobs import MemoryBlobStore
    from visus.record.messages import ModelRequest, TextPart, UserMessage
    from visus.wire import lower

    stream = WIRES["gemini"].stream(ReplyContext(SPEC, provider="gemini"))
    for event in _load("gemini")["streams"][0]["events"]:
        stream.feed(event)
    said = stream.result()
    request = ModelRequest(
        messages=(UserMessage((TextPart("hi"),)), said, UserMessage((TextPart("more"),)))
    )
    spec = ModelSpec(name="gemini-2.5-flash", provider="gemini", vision=True)
    body = lower(request, wire="gemini", model=spec, blobs=MemoryBlobStore())
    assert body["contents"][1] == {
        "role": "model",
        "parts": [{"text": "A red square.", "thoughtSignature": "Q2lRQlZLaGM="}],
    }
    other = lower(request, wire="anthropic", model=spec, blobs=MemoryBlobStore())
    assert "Q2lRQlZLaGM=" not in json.dumps(other)
