"""visus's own agent on an Opus-5.5-like model: a long screen loop with no 400, its
reasoning replayed byte-for-byte, and what an eviction dropped counted in usage.

The reference server (over HTTP) enforces Anthropic's "Preserved thinking" rules for
``claude-opus-5-5`` as a new account sees them: a thinking block sent back after anything
before it changed is a 400, unless the request opts into ``drop_block`` with the beta
header. Retention turns old screenshots into descriptors (an edit before later thinking),
so the run only survives because visus sends the opt-in on every request; the control
without it fails at the first eviction.
"""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from visus.agent import build_agent
from visus.errors import ProviderError
from visus.models import image_tokens
from visus.providers import ProviderSettings
from visus.record.messages import AssistantMessage, ModelRequest, TextPart
from visus.reference.grid import make_grid
from visus.reference.server import serve_in_background
from visus.retention import RetentionPolicy
from visus.wire import lower

from .test_long_run import _Recording

STEPS = 24
#: Screens of a screenshot's tokens (1500 x 1040 px, ~2,000 on Opus 5.5): past the
#: break-even their reads soon cover the few reasoning tokens the reference spends.
GRID = (8, 5)
MODEL = "claude-opus-5-5"


@pytest.fixture(scope="module")
def reference_url() -> Iterator[str]:
    with serve_in_background() as url:
        yield url


def _screens(folder: Path) -> str:
    for step in range(1, STEPS + 1):
        (folder / f"s{step}.png").write_bytes(make_grid(*GRID, seed=100 + step)[0])
    return "each view " + json.dumps([{"path": f"s{i}.png"} for i in range(1, STEPS + 1)])


def _agent(tmp_path: Path, url: str, wire: str) -> Any:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    provider = "anthropic" if wire == "anthropic" else "bedrock"
    model = MODEL if wire == "anthropic" else f"global.anthropic.{MODEL}"
    settings = ProviderSettings(
        api_keys={provider: "k"},
        base_urls={provider: url},
        aws_secret_access_key="s",
        region="us-east-1",
        env={},
    )
    return build_agent(
        f"{provider}:{model}", data=tmp_path / "data", roots=[work], settings=settings
    )


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip(v) for v in value if not (isinstance(v, dict) and "cachePoint" in v)]
    return value


def _unthought(body: Any) -> Any:
    """``body``'s messages without their reasoning blocks (Anthropic and Bedrock)."""

    def reasoning(block: Any) -> bool:
        return block.get("type") in ("thinking", "redacted_thinking") or "reasoningContent" in block

    return {
        "messages": [
            {**m, "content": [b for b in m["content"] if not reasoning(b)]}
            for m in body["messages"]
        ]
    }


def _elided(request: ModelRequest) -> int:
    return sum(
        isinstance(p, TextPart) and p.text.startswith("[image elided")
        for m in request.messages
        for p in m.parts
    )


@pytest.mark.parametrize("wire", ["anthropic", "bedrock"])
async def test_a_long_screen_loop_keeps_its_reasoning_and_meets_no_400(
    reference_url: str, tmp_path: Path, wire: str
) -> None:
    agent = _agent(tmp_path, reference_url, wire)
    # A break-even of five screens, so 24 steps meet it more than once: the first
    # eviction waits until the reads cover the reasoning it drops, the rest do not.
    grid = make_grid(*GRID, seed=101)[0]
    width, height = Image.open(io.BytesIO(grid)).size
    agent.policy = RetentionPolicy(append_tokens=5 * image_tokens(agent.model, width, height))
    recorder = _Recording(agent.client)
    agent.client = recorder
    prompt = _screens(tmp_path / "work")
    try:
        result = await agent.run_turn("s", prompt)
    finally:
        await agent.aclose()
    assert (result.stopped, result.steps) == ("answer", STEPS + 1)
    steps = [m for m in result.messages if isinstance(m, AssistantMessage)]
    assert all(m.provider_state is not None for m in steps)  # every reply's reasoning kept
    # Append-only: images leave rarely, in large batches (half of what fits), and the
    # history between two evictions only grows.
    elided = [_elided(r) for r in recorder.requests]
    evictions = [k for k in range(1, len(elided)) if elided[k] > elided[k - 1]]
    assert 2 <= len(evictions) <= STEPS // 5
    assert all(elided[k] - elided[k - 1] >= 5 for k in evictions)
    for k in range(1, len(recorder.requests)):
        if k in evictions:
            continue
        before, after = (
            _strip(lower(recorder.requests[j], wire=wire, model=agent.model, blobs=agent.blobs))
            for j in (k - 1, k)
        )
        if k - 1 in evictions:  # the reasoning the eviction cost is not sent again
            before, after = _unthought(before), _unthought(after)
        assert after["messages"][: len(before["messages"]) - 1] == before["messages"][:-1]
    for request in recorder.requests[1:]:
        body = lower(request, wire=wire, model=agent.model, blobs=agent.blobs)
        sent = [m for m in body["messages"] if m["role"] == "assistant"]
        said = [m for m in request.messages if isinstance(m, AssistantMessage)]
        assert len(sent) == len(said)
        for turn, message in zip(sent, said, strict=True):
            state = message.provider_state
            if state is not None and not state.left_out:  # its blocks back as they came
                assert _strip(turn["content"]) == json.loads(message.provider_state.items)
        opt_in = (
            body["betas"]
            if wire == "anthropic"
            else (body["additionalModelRequestFields"]["anthropic_beta"])
        )
        assert "thinking-binding-controls-2026-08-01" in opt_in  # on every request
    # Each eviction dropped the reasoning made over the old prefix, once: the request
    # that evicts (not a 400), never the ones after it, and usage says how much.
    dropped = [m.usage.reasoning_dropped if m.usage else 0 for m in steps]
    assert [k for k, n in enumerate(dropped) if n] == evictions
    assert result.usage.reasoning_dropped == sum(dropped) > 0


async def test_without_the_opt_in_the_first_eviction_is_a_400(
    reference_url: str, tmp_path: Path
) -> None:
    agent = _agent(tmp_path, reference_url, "anthropic")
    # The same model, as if the catalog did not know it binds its thinking.
    agent.model = dataclasses.replace(agent.model, preserved_thinking=False)
    prompt = _screens(tmp_path / "work")
    try:
        with pytest.raises(ProviderError, match="bound to a different conversation"):
            await agent.run_turn("s", prompt)
    finally:
        await agent.aclose()


def _other(tmp_path: Path, url: str, ref: str, provider: str, base: str) -> Any:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    settings = ProviderSettings(api_keys={provider: "k"}, base_urls={provider: base}, env={})
    return build_agent(ref, data=tmp_path / "data", roots=[work], settings=settings)


async def test_responses_reasoning_items_go_back_as_returned(
    reference_url: str, tmp_path: Path
) -> None:
    """GPT-5.6 (preserved reasoning): every reply's reasoning item, with its encrypted
    content, goes back verbatim; after an eviction the server drops the later ones
    without an error (OpenAI "Keep the prefix unchanged"), so the run goes on."""
    agent = _other(tmp_path, reference_url, "openai:gpt-5.6-sol", "openai", f"{reference_url}/v1")
    recorder = _Recording(agent.client)
    agent.client = recorder
    prompt = _screens(tmp_path / "work")
    try:
        result = await agent.run_turn("s", prompt)
    finally:
        await agent.aclose()
    assert (result.stopped, result.steps) == ("answer", STEPS + 1)
    for request in recorder.requests[1:]:
        body = lower(request, wire="openai-responses", model=agent.model, blobs=agent.blobs)
        assert body["store"] is False
        assert body["include"] == ["reasoning.encrypted_content"]
        sent = [i for i in body["input"] if i.get("type") == "reasoning"]
        kept = [
            i
            for m in request.messages
            if isinstance(m, AssistantMessage)
            and m.provider_state is not None
            and not (m.provider_state.left_out or m.provider_state.invalidated)
            for i in json.loads(m.provider_state.items)
            if i.get("type") == "reasoning"
        ]
        assert sent == kept
        assert all(i["encrypted_content"] for i in sent)
    # What an eviction invalidates goes neither on the evicting request nor after it,
    # its calls without their item ids (the API refuses an item id without its reasoning
    # item), so what each later reply was made over stays the same: the server never
    # drops a reasoning item (none is done again: no reply spends more than another).
    bodies = [
        lower(r, wire="openai-responses", model=agent.model, blobs=agent.blobs)
        for r in recorder.requests
    ]
    plain = [
        [json.dumps(i, sort_keys=True) for i in b["input"] if i.get("type") != "reasoning"]
        for b in bodies
    ]
    evicting = [n for n in range(1, len(plain)) if plain[n][: len(plain[n - 1])] != plain[n - 1]]
    assert evicting  # the 6k break-even is met
    for body in bodies:
        reasoned = False
        for item in body["input"]:
            kind = item.get("type")
            reasoned = kind == "reasoning" or (reasoned and kind == "function_call")
            if kind == "function_call" and "id" in item:
                assert reasoned, item  # an item id only with its reasoning item
    spent = [  # each call's reply (the last, the answer, writes more)
        m.usage.output_tokens if m.usage else 0
        for m in result.messages
        if isinstance(m, AssistantMessage) and m.tool_calls
    ]
    assert len(set(spent)) == 1, spent


async def test_gemini_thought_signatures_go_back_on_their_calls(
    reference_url: str, tmp_path: Path
) -> None:
    agent = _other(tmp_path, reference_url, "gemini:gemini-4-argon", "gemini", reference_url)
    prompt = _screens(tmp_path / "work")
    try:
        result = await agent.run_turn("s", prompt)  # a missing signature would be a 400
    finally:
        await agent.aclose()
    assert (result.stopped, result.steps) == ("answer", STEPS + 1)
    calls = [c for m in result.messages if isinstance(m, AssistantMessage) for c in m.tool_calls]
    assert calls
    assert all(c.signature for c in calls)
