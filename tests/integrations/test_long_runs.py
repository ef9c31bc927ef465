"""Many views inside one run, in each framework's real loop, against the reference server.

The reference model's ``each`` line makes it call ``view`` once per step through a list
of screenshots (a third of them unchanged from the step before) before it answers, so
one ``agent.run`` makes a request per screenshot. Each request the integration prepares
is recorded: live images stay within ``live_images`` (4 here, the oldest leaving 2 at a
time), the newest screen is live unless it repeats the one before (then it is a note),
and the framework's own usage shows the tokens the provider's prompt cache read.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from visus.reference.grid import make_grid

STEPS = 12
LIVE, CHUNK = 4, 2


def _unchanged(step: int) -> bool:
    return step % 3 == 0


def _screens(folder: Path) -> str:
    """The screenshots in ``folder`` and the prompt that views them one per step."""
    shown = b""
    for step in range(1, STEPS + 1):
        if not _unchanged(step):
            shown = make_grid(1, 2, seed=100 + step)[0]
        (folder / f"s{step}.png").write_bytes(shown)
    return "each view " + json.dumps([{"path": f"s{i}.png"} for i in range(1, STEPS + 1)])


def _spy(obj: Any, name: str, after: Callable[[Any], Any]) -> list[Any]:
    """Record ``after(result)`` for each call of ``obj.name`` (an instance attribute
    shadows the method, so the framework's hook calls the spy)."""
    seen: list[Any] = []
    method = getattr(obj, name)

    def spy(*args: Any, **kwargs: Any) -> Any:
        result = method(*args, **kwargs)
        seen.append(after(result))
        return result

    setattr(obj, name, spy)
    return seen


def _check(stats: list[Any], newest_live: list[bool]) -> None:
    """Bounded, the newest live (or a repeat of a live one), unchanged screens not resent."""
    assert len(stats) == STEPS + 1  # a request per view, then the answer
    for step, (s, live) in enumerate(zip(stats[1:], newest_live[1:], strict=True), 1):
        assert 1 <= s.live <= LIVE, (step, s)
        assert live is not _unchanged(step), step
        if _unchanged(step):  # sent as a note pointing at the live copy
            assert s.repeated >= 1, (step, s)
    assert max(s.elided for s in stats) >= STEPS - LIVE - STEPS // 3  # old screens left


async def test_pydantic_ai(reference_url: str, tmp_path: Path) -> None:
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.messages import BinaryContent, ModelRequest, ToolReturnPart
    from pydantic_ai.models.anthropic import AnthropicModel, AnthropicModelSettings
    from pydantic_ai.providers.anthropic import AnthropicProvider

    from visus.integrations.pydantic_ai import Vision

    prompt = _screens(tmp_path)
    vision = Vision(roots=[tmp_path], data=tmp_path / "data", live_images=LIVE, image_chunk=CHUNK)

    def newest_is_live(out: Any) -> Any:
        last = next(m for m in reversed(out[0]) if isinstance(m, ModelRequest))
        parts = [p for p in last.parts if isinstance(p, ToolReturnPart)]
        content = parts[-1].content if parts else None
        live = isinstance(content, list) and any(isinstance(i, BinaryContent) for i in content)
        return out[1], live

    recorded = _spy(vision, "model_view", newest_is_live)
    model = AnthropicModel(
        "reference", provider=AnthropicProvider(base_url=reference_url, api_key="k")
    )
    # The client's own breakpoints (pydantic-ai's setting) pass through visus's view.
    settings = AnthropicModelSettings(anthropic_cache_messages=True)
    agent = Agent(model, capabilities=[vision], model_settings=settings)
    result = await agent.run(prompt)
    _check([s for s, _ in recorded], [live for _, live in recorded])
    usage = result.usage
    assert usage.cache_read_tokens > 0  # the cache hit, as pydantic-ai itself counts it
    assert usage.cache_write_tokens > 0


async def test_openai_agents_sdk(reference_url: str, tmp_path: Path) -> None:
    pytest.importorskip("agents")
    from agents import Agent, OpenAIProvider, Runner, set_tracing_disabled
    from openai import AsyncOpenAI

    from visus.integrations.openai_agents import Vision

    set_tracing_disabled(True)
    prompt = _screens(tmp_path)
    vision = Vision(roots=[tmp_path], data=tmp_path / "data", live_images=LIVE, image_chunk=CHUNK)

    def newest_is_live(items: list[Any]) -> Any:
        outputs = [
            i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"
        ]
        output = outputs[-1]["output"] if outputs else None
        live = isinstance(output, list) and any(c.get("type") == "input_image" for c in output)
        return vision.last_request, live

    recorded = _spy(vision, "model_input", newest_is_live)
    client = AsyncOpenAI(base_url=f"{reference_url}/v1", api_key="k")
    try:
        provider = OpenAIProvider(openai_client=client, use_responses=True)
        agent = Agent(name="screens", model="reference", tools=vision.tools)
        run_config = vision.run_config(model_provider=provider)
        result = await Runner.run(agent, prompt, run_config=run_config, max_turns=STEPS + 5)
    finally:
        await client.close()
    _check([s for s, _ in recorded], [live for _, live in recorded])
    usage = result.context_wrapper.usage
    assert usage.input_tokens_details.cached_tokens > 0  # OpenAI's automatic cache


async def test_langchain(reference_url: str, tmp_path: Path) -> None:
    pytest.importorskip("langchain")
    from langchain.agents import create_agent
    from langchain_anthropic import ChatAnthropic
    from langchain_anthropic.middleware import AnthropicPromptCachingMiddleware
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    from visus.integrations.langchain import VisionMiddleware

    prompt = _screens(tmp_path)
    vision = VisionMiddleware(
        roots=[tmp_path], data=tmp_path / "data", live_images=LIVE, image_chunk=CHUNK
    )

    def newest_is_live(out: list[Any]) -> Any:
        tools = [m for m in out if isinstance(m, ToolMessage)]
        content = tools[-1].content if tools else None
        live = isinstance(content, list) and any(
            isinstance(b, dict) and b.get("type") == "image" for b in content
        )
        return vision.last_request, live

    recorded = _spy(vision, "model_messages", newest_is_live)
    model = ChatAnthropic(model="reference", base_url=reference_url, api_key="k")  # type: ignore[call-arg]
    # LangChain's own caching middleware sets the breakpoints; they survive visus's view.
    caching = AnthropicPromptCachingMiddleware()
    agent = create_agent(model, tools=[], middleware=[caching, vision])
    state = await agent.ainvoke({"messages": [HumanMessage(prompt)]})
    _check([s for s, _ in recorded], [live for _, live in recorded])
    replies = [m for m in state["messages"] if isinstance(m, AIMessage)]
    details = [m.usage_metadata.get("input_token_details", {}) for m in replies if m.usage_metadata]
    assert sum(d.get("cache_read", 0) for d in details) > 0
