"""Prompt-cache fields in lowering: Anthropic and Bedrock breakpoints placed so that a
retention eviction rewrites as little as possible, OpenAI's prompt_cache_key.

A screen agent's record (one instruction, a distinct screenshot per step) goes through
``model_view`` and ``lower`` step by step, as the agent sends it.
"""

from __future__ import annotations

import io
import itertools
import json
from typing import Any

from visus.models.spec import ModelSpec
from visus.record.blobs import MemoryBlobStore
from visus.record.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    ModelRequest,
    PerceptionOrigin,
    TextPart,
    ToolCall,
    ToolResult,
    ToolSpec,
    UserMessage,
)
from visus.retention import RetentionPolicy, model_view
from visus.wire import lower

from .corpus import BEDROCK_HOISTED, BEDROCK_NATIVE, CLAUDE, GPT

TOOLS = (ToolSpec("view", "See a file.", {"type": "object", "properties": {}}),)


def _screens(blobs: MemoryBlobStore, steps: int) -> list[Message]:
    """One instruction, then a view of a new screen at each step."""
    from PIL import Image

    record: list[Message] = [UserMessage((TextPart("do the task"),), turn=1)]
    for step in range(1, steps + 1):
        buf = io.BytesIO()
        Image.new("RGB", (8, 8), (step * 7 % 256, 0, 0)).save(buf, "PNG")
        digest = blobs.put(buf.getvalue(), "image/png")
        image = ImagePart(digest, "image/png", len(buf.getvalue()), 8, 8, PerceptionOrigin("s.png"))
        call = ToolCall(f"c{step}", "view", {"path": "s.png"})
        record.append(AssistantMessage(tool_calls=(call,), turn=1))
        record.append(ToolResult(f"c{step}", "view", (TextPart("Viewed"), image), turn=1))
    return record


def _body(record: list[Message], spec: ModelSpec, wire: Any, blobs: MemoryBlobStore) -> Any:
    view = model_view(record, RetentionPolicy(live_images=10, image_chunk=5))
    request = ModelRequest(view, system="You see.", tools=TOOLS, cache_key="visus-abc")
    return lower(request, wire=wire, model=spec, blobs=blobs)


def _marked(body: dict[str, Any]) -> list[tuple[str, int]]:
    """Where the breakpoints are: ("system"|"tools"|"messages", index)."""
    out = [("system", i) for i, b in enumerate(body.get("system", [])) if "cache_control" in b]
    out += [("tools", i) for i, t in enumerate(body.get("tools", [])) if "cache_control" in t]
    out += [
        ("messages", i)
        for i, m in enumerate(body["messages"])
        if any("cache_control" in b for b in m["content"])
    ]
    return out


def _first_image_message(body: dict[str, Any]) -> int:
    return next(i for i, m in enumerate(body["messages"]) if '"type": "image"' in json.dumps(m))


def test_anthropic_breakpoints_sit_at_the_head_the_window_and_the_end() -> None:
    blobs = MemoryBlobStore()
    body = _body(_screens(blobs, 23), CLAUDE, "anthropic", blobs)
    marks = _marked(body)
    assert len(marks) == 3  # of the 4 the API takes
    first_live = _first_image_message(body)
    last = len(body["messages"]) - 1
    assert marks == [("system", 0), ("messages", first_live - 1), ("messages", last)]
    # the window's breakpoint ends the history whose images are descriptors by now
    before = json.dumps(body["messages"][:first_live])
    assert '"type": "image"' not in before
    assert "[image elided:" in before


def _prefix(body: dict[str, Any], upto: int) -> str:
    """The request's bytes up to and including message ``upto``, without cache markers
    (moving a breakpoint does not change what is cached)."""
    text = json.dumps({"system": body["system"], "messages": body["messages"][: upto + 1]})
    return text.replace(', "cache_control": {"type": "ephemeral"}', "")


def test_an_eviction_keeps_the_prefix_up_to_the_last_window_breakpoint() -> None:
    blobs = MemoryBlobStore()
    record = _screens(blobs, 40)
    window_marks: list[int] = []
    for step in range(11, 41):
        body = _body(record[: 1 + 2 * step], CLAUDE, "anthropic", blobs)
        window_marks.append(_marked(body)[1][1])
        if len(window_marks) > 1 and window_marks[-1] != window_marks[-2]:
            # an eviction: the request still begins with the bytes the previous window
            # breakpoint cached, so it reads them and writes only from there on
            previous = _body(record[: 1 + 2 * (step - 1)], CLAUDE, "anthropic", blobs)
            upto = window_marks[-2]
            assert _prefix(body, upto) == _prefix(previous, upto), step
    # the window breakpoint moves once per batch of 5 images, not every step
    moves = sum(a != b for a, b in itertools.pairwise(window_marks))
    assert moves == 5  # at steps 16, 21, 26, 31, 36


def test_bedrock_cache_points_only_for_models_that_take_them() -> None:
    blobs = MemoryBlobStore()
    record = _screens(blobs, 15)
    claude = _body(record, BEDROCK_NATIVE, "bedrock", blobs)
    points = json.dumps(claude).count('"cachePoint"')
    assert points == 3
    assert claude["system"][-1] == {"cachePoint": {"type": "default"}}
    assert claude["messages"][-1]["content"][-1] == {"cachePoint": {"type": "default"}}
    nova_without = _body(record, BEDROCK_HOISTED, "bedrock", blobs)
    assert "cachePoint" not in json.dumps(nova_without)


def test_openai_gets_the_session_cache_key_and_compatible_servers_do_not() -> None:
    blobs = MemoryBlobStore()
    record = _screens(blobs, 3)
    for wire in ("openai-chat", "openai-responses"):
        assert _body(record, GPT, wire, blobs)["prompt_cache_key"] == "visus-abc"
        other = ModelSpec(name="llama", provider="openai-compatible", vision=True)
        assert "prompt_cache_key" not in _body(record, other, wire, blobs)
