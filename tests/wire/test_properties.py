"""Random conversations on every wire: SDK types accept them, nothing is lost, stable."""

from __future__ import annotations

import itertools
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from visus.record.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    ModelRequest,
    Part,
    TextPart,
    ToolCall,
    ToolResult,
    UserMessage,
)
from visus.wire import lower

from .corpus import (
    BLUE,
    GREEN_ATTACHMENT,
    MISSING_DIGEST,
    RED,
    VARIANTS,
    VIEW_TOOL,
    store,
)
from .sdk_check import CHECKS, check_bedrock
from .test_lowering import _image_payloads

GONE = ImagePart(MISSING_DIGEST, "image/png", 10, 2, 2, RED.origin)
images = st.sampled_from([RED, BLUE, GREEN_ATTACHMENT, GONE])
texts = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12
)
parts = st.lists(st.one_of(texts.map(TextPart), images), min_size=0, max_size=3)
user_parts = st.lists(st.one_of(texts.map(TextPart), images), min_size=1, max_size=3)


@st.composite
def conversations(draw: st.DrawFn) -> ModelRequest:
    ids = itertools.count()
    messages: list[Message] = []
    turns = draw(st.integers(1, 3))
    for turn in range(1, turns + 1):
        messages.append(UserMessage(tuple[Part, ...](draw(user_parts)), turn=turn))
        for _ in range(draw(st.integers(0, 2))):
            n_calls = draw(st.integers(1, 3))
            names = [draw(st.sampled_from(["view", "shot", "read"])) for _ in range(n_calls)]
            calls = tuple(ToolCall(f"c{next(ids)}", name, {"n": i}) for i, name in enumerate(names))
            text = draw(st.one_of(st.just(()), texts.map(lambda t: (TextPart(t),))))
            messages.append(AssistantMessage(text, tool_calls=calls, turn=turn))
            for c in calls:
                messages.append(
                    ToolResult(
                        c.id,
                        c.name,
                        tuple[Part, ...](draw(parts)),
                        is_error=draw(st.booleans()),
                        turn=turn,
                    )
                )
        if turn < turns or draw(st.booleans()):
            messages.append(AssistantMessage((TextPart(draw(texts)),), turn=turn))
    return ModelRequest(
        messages=tuple(messages), system=draw(st.none() | texts), tools=(VIEW_TOOL,)
    )


def _roles(body: dict[str, Any]) -> list[str]:
    if "contents" not in body:
        return [m["role"] for m in body["messages"]]
    # What follows a tool run on Gemini (visus's notes, 2.x's images) is a user content of
    # its own right after the function responses: the one place two user contents meet.
    contents = body["contents"]
    return [
        c["role"]
        for c, before in zip(contents, [None, *contents], strict=False)
        if before is None
        or not any("functionResponse" in p for p in before["parts"])
        or c["role"] != "user"
    ]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversations())
def test_random_conversations_on_every_wire(request: ModelRequest) -> None:
    expected = sum(
        1
        for m in request.messages
        if not isinstance(m, AssistantMessage)
        for p in m.parts
        if isinstance(p, ImagePart) and p.digest != MISSING_DIGEST
    )
    for v in VARIANTS:
        body = lower(request, wire=v.wire, model=v.spec, blobs=store())
        assert json.dumps(body) == json.dumps(
            lower(request, wire=v.wire, model=v.spec, blobs=store())
        )
        if v.wire == "bedrock":
            check_bedrock(body, model_id=v.spec.name)
        else:
            CHECKS[v.wire](body)
        assert len(_image_payloads(body)) == expected, v.name
        if v.wire in {"anthropic", "gemini", "bedrock"}:
            roles = _roles(body)
            assert roles[0] == "user"
            assert all(a != b for a, b in itertools.pairwise(roles)), (v.name, roles)
        if v.wire in {"openai-chat", "ollama"}:
            messages = body["messages"]
            for i, m in enumerate(messages):
                if m["role"] != "user":
                    assert not _image_payloads(m), (v.name, m["role"])
                if m["role"] == "assistant" and m.get("tool_calls"):
                    n = len(m["tool_calls"])
                    assert [f["role"] for f in messages[i + 1 : i + 1 + n]] == ["tool"] * n
