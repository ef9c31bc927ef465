"""A long screen run through pydantic-ai with its own Anthropic caching on reads as much
from the prompt cache as visus's own agent on the same steps (issue 35).

Both run against the reference server, whose cache accounting follows Anthropic's guide
(breakpoints, the 20-block lookback, the model's minimum), each on a fresh server (an
empty cache): one instruction, then a ``view`` per step through 24 screenshots (a third
unchanged from the step before), at visus's default retention. pydantic-ai's own
breakpoint sits on the newest block: at each eviction the images before it change, and
without a breakpoint ending the history before the live window the whole prompt was
written again (85.8% of input tokens read against visus's 92.9%, ``anthropic_cache_
messages``). The capability places that breakpoint as visus's wire does; LangChain's
middleware does the same with ``cache_control``.

The Agents SDK speaks OpenAI's wires (Responses and Chat Completions), whose caching is
automatic: no breakpoint can be placed; the prefix the SDK sends through visus's model
wrapper must stay as stable as visus's own, which the same measure shows on gpt-5.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from visus.agent import build_agent
from visus.providers import ProviderSettings
from visus.reference.grid import make_grid
from visus.reference.server import serve_in_background

STEPS = 24
MODEL = "claude-sonnet-4-6"
#: A screen agent's instructions (~2,500 tokens): over the model's cacheable minimum.
SYSTEM = "You operate a computer through screenshots.\n" + "\n".join(
    f"Rule {i}: check that the screen shows element {i} enabled, act once, look again."
    for i in range(1, 121)
)


def _screens(folder: Path) -> str:
    shown = b""
    for step in range(1, STEPS + 1):
        if step % 3:
            shown = make_grid(1, 2, seed=300 + step)[0]
        (folder / f"s{step}.png").write_bytes(shown)
    return "each view " + json.dumps([{"path": f"s{i}.png"} for i in range(1, STEPS + 1)])


def _share(read: int, total: int) -> float:
    assert total > 0
    return read / total


async def _visus(url: str, tmp: Path, provider: str = "anthropic", model: str = MODEL) -> float:
    work = tmp / "work"
    work.mkdir(parents=True)
    prompt = _screens(work)
    base = url if provider == "anthropic" else f"{url}/v1"
    settings = ProviderSettings(api_keys={provider: "k"}, base_urls={provider: base}, env={})
    agent = build_agent(
        f"{provider}:{model}",
        data=tmp / "data",
        roots=[work],
        system=SYSTEM,
        settings=settings,
        max_steps=STEPS + 5,
    )
    try:
        usage = (await agent.run_turn("s", prompt)).usage
    finally:
        await agent.aclose()
    return _share(usage.cache_read_tokens, usage.input_tokens)


async def _pydantic_ai(url: str, tmp: Path, settings: dict[str, Any], unified: bool) -> float:
    from pydantic_ai import Agent
    from pydantic_ai.capabilities import Caching
    from pydantic_ai.models.anthropic import AnthropicModel, AnthropicModelSettings
    from pydantic_ai.providers.anthropic import AnthropicProvider
    from pydantic_ai.usage import UsageLimits

    from visus.integrations.pydantic_ai import Vision

    work = tmp / "work"
    work.mkdir(parents=True)
    prompt = _screens(work)
    vision = Vision(roots=[work], data=tmp / "data")
    model = AnthropicModel(MODEL, provider=AnthropicProvider(base_url=url, api_key="k"))
    agent = Agent(
        model,
        capabilities=[vision, *([Caching()] if unified else [])],
        instructions=SYSTEM,
        model_settings=AnthropicModelSettings(**settings),  # type: ignore[typeddict-item]
    )
    result = await agent.run(prompt, usage_limits=UsageLimits(request_limit=STEPS + 5))
    usage = result.usage
    return _share(usage.cache_read_tokens, usage.input_tokens)


async def _langchain(url: str, tmp: Path) -> float:
    from langchain.agents import create_agent
    from langchain_anthropic import ChatAnthropic
    from langchain_anthropic.middleware import AnthropicPromptCachingMiddleware
    from langchain_core.messages import AIMessage, HumanMessage

    from visus.integrations.langchain import VisionMiddleware

    work = tmp / "work"
    work.mkdir(parents=True)
    prompt = _screens(work)
    vision = VisionMiddleware(roots=[work], data=tmp / "data")
    model = ChatAnthropic(model=MODEL, base_url=url, api_key="k")  # type: ignore[call-arg]
    caching = AnthropicPromptCachingMiddleware()
    agent = create_agent(model, tools=[], system_prompt=SYSTEM, middleware=[caching, vision])
    state = await agent.ainvoke(
        {"messages": [HumanMessage(prompt)]}, {"recursion_limit": 4 * STEPS}
    )
    read = total = 0
    for m in state["messages"]:
        if isinstance(m, AIMessage) and m.usage_metadata:
            read += m.usage_metadata.get("input_token_details", {}).get("cache_read", 0)
            total += m.usage_metadata["input_tokens"]
    return _share(read, total)


async def test_langchain_reads_the_cache_within_5_points_of_visuss_agent(tmp_path: Path) -> None:
    # LangChain's own caching middleware marks the system prompt, the tools and (top
    # level) the newest block; the middleware adds the window's mark in the one left.
    pytest.importorskip("langchain")
    with serve_in_background() as url:
        own = await _visus(url, tmp_path / "visus")
    with serve_in_background() as url:
        theirs = await _langchain(url, tmp_path / "lc")
    assert own > 0.85
    assert abs(own - theirs) <= 0.05, (own, theirs)


@pytest.mark.parametrize(
    ("settings", "unified"),
    [({"anthropic_cache_messages": True}, False), ({}, True)],
    ids=["anthropic_cache_messages", "Caching"],
)
async def test_pydantic_ai_reads_the_cache_within_5_points_of_visuss_agent(
    tmp_path: Path, settings: dict[str, Any], unified: bool
) -> None:
    pytest.importorskip("pydantic_ai")
    with serve_in_background() as url:
        own = await _visus(url, tmp_path / "visus")
    with serve_in_background() as url:
        theirs = await _pydantic_ai(url, tmp_path / "pai", settings, unified)
    assert own > 0.85  # the harness caches at all
    assert abs(own - theirs) <= 0.05, (own, theirs)


async def _openai_agents(url: str, tmp: Path, model: str, *, responses: bool) -> float:
    from agents import Agent, OpenAIProvider, Runner, set_tracing_disabled
    from openai import AsyncOpenAI

    from visus.integrations.openai_agents import Vision

    set_tracing_disabled(True)
    work = tmp / "work"
    work.mkdir(parents=True)
    prompt = _screens(work)
    vision = Vision(roots=[work], data=tmp / "data")
    client = AsyncOpenAI(base_url=f"{url}/v1", api_key="k")
    try:
        provider = OpenAIProvider(openai_client=client, use_responses=responses)
        agent = Agent(name="screens", model=model, instructions=SYSTEM, tools=vision.tools)  # type: ignore[arg-type]
        config = vision.run_config(model_provider=provider)
        result = await Runner.run(agent, prompt, run_config=config, max_turns=STEPS + 5)
    finally:
        await client.close()
    usage = result.context_wrapper.usage
    return _share(usage.input_tokens_details.cached_tokens, usage.input_tokens)


@pytest.mark.parametrize("responses", [True, False], ids=["responses", "chat"])
async def test_openai_agents_reads_the_cache_within_5_points_of_visuss_agent(
    tmp_path: Path, responses: bool
) -> None:
    pytest.importorskip("agents")
    with serve_in_background() as url:
        own = await _visus(url, tmp_path / "visus", "openai", "gpt-5")
    with serve_in_background() as url:
        theirs = await _openai_agents(url, tmp_path / "sdk", "gpt-5", responses=responses)
    assert own > 0.7  # the harness caches at all
    assert abs(own - theirs) <= 0.05, (own, theirs)
