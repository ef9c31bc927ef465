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
    assert len(marks) == 4  # the 4 the API takes
    first_live = _first_image_message(body)
    last = len(body["messages"]) - 1
    # the ladder: the message holding the block 16 blocks (one each here) before the
    # window's breakpoint, so their lookbacks overlap
    ladder = first_live - 1 - 16
    assert marks == [
        ("system", 0),
        ("messages", ladder),
        ("messages", first_live - 1),
        ("messages", last),
    ]
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


def _accounted(wire: Any, spec: ModelSpec, screens: list[int]) -> list[tuple[int, int, int]]:
    """(cache read, cache write, first live message) of each step of a screen agent (step n
    sees screen ``screens[n]``: equal numbers, an unchanged screen) under visus's default
    retention, as the reference server's cache accounts them (the
    documented 20-block lookback, writes only at breakpoints). The system prompt and tool
    are under the model's minimum cacheable length, as visus's own agent's are."""
    from PIL import Image

    from visus.reference import wire_anthropic, wire_bedrock
    from visus.reference.cache import PromptCache
    from visus.reference.common import pixel_cost

    blobs = MemoryBlobStore()
    record: list[Message] = [UserMessage((TextPart("do the task"),), turn=1)]
    cache = PromptCache()
    cut = wire_anthropic.cache_blocks if wire == "anthropic" else wire_bedrock.cache_blocks
    shown = '"type": "image"' if wire == "anthropic" else '"image": {"format"'
    out: list[tuple[int, int, int]] = []
    for step, screen in enumerate(screens, 1):
        buf = io.BytesIO()
        Image.new("RGB", (1000, 625), (screen * 7 % 256, 0, 0)).save(buf, "PNG")
        digest = blobs.put(buf.getvalue(), "image/png")
        size = len(buf.getvalue())
        image = ImagePart(digest, "image/png", size, 1000, 625, PerceptionOrigin("s.png"))
        said = f"Step {step}: the dialog is still loading, so I look at the screen again. " * 6
        call = ToolCall(f"c{step}", "view", {"path": "s.png"})
        record.append(AssistantMessage((TextPart(said),), (call,), turn=1))
        seen = TextPart(f"s.png: raster 1000x625, sent as 1000x625 image/png; sha256:{digest[:16]}")
        record.append(ToolResult(f"c{step}", "view", (seen, image), turn=1))
        request = ModelRequest(model_view(record), system="You see.", tools=TOOLS)
        body = lower(request, wire=wire, model=spec, blobs=blobs)
        blocks = cut(body, pixel_cost(spec))
        use = cache.breakpoints(
            "m", blocks, total=sum(b.tokens for b in blocks), min_tokens=spec.cache_min_tokens
        )
        live = [i for i, m in enumerate(body["messages"]) if shown in json.dumps(m)]
        out.append((use.read, use.write, live[0] if live else -1))
    return out


def test_an_eviction_reads_the_history_the_last_window_cached_on_every_cache_wire() -> None:
    """An eviction changes the request from the first evicted image on; everything before
    it was cached by the last window's breakpoint, so the eviction request reads it and
    writes only the rest. (The window breakpoint used to be left out while the only live
    image was the newest message, as it is right after an eviction with visus's default
    batches, so that prefix was never written and every eviction rewrote the history.)"""
    from visus.models import get_model

    for wire, ref in (
        ("anthropic", "claude-sonnet-4-5"),
        ("bedrock", "bedrock:anthropic.claude-sonnet-4-5-20250929-v1:0"),
    ):
        steps = _accounted(wire, get_model(ref), list(range(1, 31)))
        evictions = [n for n in range(1, len(steps)) if steps[n][2] != steps[n - 1][2]]
        assert len(evictions) == 7, (wire, steps)
        # from the third eviction on, the history before the old window is past the
        # model's minimum cacheable length: it is read, and what is written is the new
        # window (one screenshot, 828 tokens) and the batch's descriptors, not the history
        for n in evictions[2:]:
            read, write, _ = steps[n]
            assert read > 0, (wire, n + 1, steps[n - 1], steps[n])
            assert write < read + 828, (wire, n + 1, steps[n - 1], steps[n])


def test_an_eviction_reads_the_last_window_when_it_spanned_more_than_the_lookback() -> None:
    """A slow screen (each one unchanged for a step) makes a window of four distinct images
    span 8 steps, 24 blocks (the model says something, then calls view): past the 20-block
    lookback of the breakpoint before the new window. The ladder breakpoint 16 blocks
    before it still reaches what the last window cached (up to about 36 blocks back)."""
    from visus.models import get_model

    for wire, ref in (
        ("anthropic", "claude-sonnet-4-5"),
        ("bedrock", "bedrock:anthropic.claude-sonnet-4-5-20250929-v1:0"),
    ):
        steps = _accounted(wire, get_model(ref), [n // 2 for n in range(2, 42)])
        evictions = [n for n in range(1, len(steps)) if steps[n][2] != steps[n - 1][2]]
        assert len(evictions) == 4, (wire, steps)
        # Each eviction after the first reads the history the last window cached and
        # writes only what changed (the batch's descriptors and the new window): the
        # same amount each time. Without the ladder: nothing read, the whole history
        # written again (3584, 4896, 6208 tokens on Anthropic, growing every eviction).
        writes = [steps[n][1] for n in evictions[1:]]
        assert all(steps[n][0] > 0 for n in evictions[1:]), (wire, steps)
        assert max(writes) - min(writes) <= 2, (wire, writes)
        for n in evictions[2:]:
            read, write, _ = steps[n]
            assert read > write, (wire, n + 1, steps[n - 1], steps[n])
