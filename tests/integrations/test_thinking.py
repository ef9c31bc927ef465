"""Each framework's real loop on a model that binds its reasoning to the history, against
the reference server (which enforces it as Anthropic's API does for a new account: a
replayed thinking block after a changed prefix is a 400 unless the request opts into
``drop_block``; OpenAI's newer models drop such reasoning items without an error).

visus's evictions (an old screenshot becomes its descriptor) edit the history before
later reasoning. The frameworks replay the reasoning; every request the server sees is
recorded: none is refused, each one's earlier replies go back with their reasoning, and
the reasoning an eviction invalidates is dropped and counted by the server, not a 400.
The effort a caller gives the integration reaches the wire.
"""

from __future__ import annotations

import io
import json
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.integrations.test_long_runs import STEPS, _screens
from visus.errors import ConfigError
from visus.integrations.reasoning import BINDING_BETA


class Wire:
    """What the server saw and answered, request by request (an httpx client's hooks)."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.headers: list[httpx2.Headers] = []
        self.answers: list[tuple[int, dict[str, Any]]] = []

    async def request(self, request: httpx2.Request) -> None:
        self.sent.append(_json(request.content))
        self.headers.append(request.headers)

    async def response(self, response: httpx2.Response) -> None:
        self.answers.append((response.status_code, _json(await response.aread())))

    def client(self) -> httpx2.AsyncClient:
        hooks: Any = {"request": [self.request], "response": [self.response]}
        return httpx2.AsyncClient(event_hooks=hooks, timeout=120)

    def refused(self) -> list[tuple[int, dict[str, Any]]]:
        return [a for a in self.answers if a[0] >= 400]


def _json(data: bytes) -> dict[str, Any]:
    """A JSON body, or a stream's events (``{"events": [...]}``, each one's data)."""
    try:
        found = json.loads(data)
    except ValueError:
        lines = data.decode(errors="replace").splitlines()
        events = [json.loads(x[5:]) for x in lines if x.startswith("data:") and x[5:].strip()]
        return {"events": [e for e in events if isinstance(e, dict)]}
    return found if isinstance(found, dict) else {"json": found}


def _found(value: object, key: str) -> Iterator[object]:
    """Every value of ``key`` anywhere in ``value`` (a body or a stream's events)."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k == key:
                yield v
            yield from _found(v, key)
    elif isinstance(value, list):
        for v in value:
            yield from _found(v, key)


def _tokens(answer: dict[str, Any], key: str) -> list[int]:
    return [int(v) for v in _found(answer, key) if isinstance(v, int)]


@contextmanager
def _no_framework_recovery() -> Iterator[None]:
    """pydantic-ai warns when it had to retry a refused request without the stale
    block: the loud form of the 400 this test says never happens."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def _claude_thinking(message: dict[str, Any]) -> int:
    content = message.get("content")
    blocks = content if isinstance(content, list) else []
    return sum(1 for b in blocks if isinstance(b, dict) and b.get("type") == "thinking")


def _without_reasoning(messages: list[dict[str, Any]]) -> list[object]:
    """The messages as the prefix check compares them: no thinking, no cache markers."""
    out: list[object] = []
    for m in messages:
        content = m["content"] if isinstance(m["content"], list) else [m["content"]]
        for b in content:
            if isinstance(b, dict) and b.get("type") in ("thinking", "redacted_thinking"):
                continue
            out.append(
                json.dumps(b, sort_keys=True).replace(
                    ', "cache_control": {"type": "ephemeral"}', ""
                )
            )
    return out


def _dropped(answer: dict[str, Any]) -> int:
    return sum(
        1
        for listed in _found(answer, "input_transformations")
        for t in (listed if isinstance(listed, list) else ())
        if t.get("type") == "thinking_dropped"
    )


def _check_claude(wire: Wire) -> None:
    """No 400; every request opts into drop_block with its beta; the history only grows
    but at the rare evictions (append-only), the only requests whose reasoning the server
    dropped (an eviction's cost is paid once, not at every later step); the newest
    reply always goes back with its thinking."""
    assert wire.refused() == []
    assert len(wire.sent) >= STEPS + 1
    for body, headers in zip(wire.sent, wire.headers, strict=True):
        assert body["thinking"]["block_binding"] == {"prefix_mismatch_behavior": "drop_block"}
        assert BINDING_BETA in headers.get("anthropic-beta", "")
    sent = [_without_reasoning(b["messages"]) for b in wire.sent]
    evicting = [n for n in range(1, len(sent)) if sent[n][: len(sent[n - 1])] != sent[n - 1]]
    assert 1 <= len(evicting) <= 4, evicting
    dropped = [n for n, (_, answer) in enumerate(wire.answers) if _dropped(answer)]
    assert dropped == evicting
    for body in wire.sent[1:]:
        replies = [m for m in body["messages"] if m["role"] == "assistant"]
        assert _claude_thinking(replies[-1]) >= 1, replies[-1]


def _early_break_even(
    core: Any, model: str = "claude-opus-5-5", *, weigh_reasoning: bool = False
) -> None:
    """An append-only break-even of four of the test's screens (the family's is far
    larger), so twelve steps meet it (``weigh_reasoning``: the first eviction waits
    for the reads to cover the reasoning it drops)."""
    from PIL import Image

    from visus.models import get_model, image_tokens
    from visus.reference.grid import make_grid
    from visus.retention import RetentionPolicy

    with Image.open(io.BytesIO(make_grid(1, 2, seed=1)[0])) as im:
        width, height = im.size
    tokens = image_tokens(get_model(model), width, height)
    core.policy = RetentionPolicy(append_tokens=4 * tokens, weigh_reasoning=weigh_reasoning)


async def test_pydantic_ai_replaying_thinking_meets_no_400(
    reference_url: str, tmp_path: Path
) -> None:
    pytest.importorskip("pydantic_ai")
    from anthropic import AsyncAnthropic
    from pydantic_ai import Agent
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.providers.anthropic import AnthropicProvider

    from visus.integrations.pydantic_ai import Vision

    prompt = _screens(tmp_path)
    vision = Vision(roots=[tmp_path], data=tmp_path / "data")
    _early_break_even(vision.core)
    wire = Wire()
    async with wire.client() as http:
        client = AsyncAnthropic(base_url=reference_url, api_key="k", http_client=http)
        model = AnthropicModel(
            "claude-opus-5-5", provider=AnthropicProvider(anthropic_client=client)
        )
        agent = Agent(model, capabilities=[vision])
        with _no_framework_recovery():
            result = await agent.run(prompt)
    assert result.output
    _check_claude(wire)


async def test_pydantic_ai_effort_reaches_the_wire(reference_url: str, tmp_path: Path) -> None:
    pytest.importorskip("pydantic_ai")
    from anthropic import AsyncAnthropic
    from pydantic_ai import Agent
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.providers.anthropic import AnthropicProvider

    from visus.integrations.pydantic_ai import Vision

    wire = Wire()
    async with wire.client() as http:
        client = AsyncAnthropic(base_url=reference_url, api_key="k", http_client=http)
        model = AnthropicModel(
            "claude-opus-5-5", provider=AnthropicProvider(anthropic_client=client)
        )
        low = Vision(roots=[tmp_path], data=tmp_path / "data", effort="low")
        await Agent(model, capabilities=[low]).run("hello")
        # The run's own setting wins over the integration's.
        await Agent(model, capabilities=[low], model_settings={"thinking": "high"}).run("hello")
        wrong = Agent(model, capabilities=[Vision(roots=[tmp_path], data=tmp_path, effort="ultra")])
        with pytest.raises(ConfigError, match="its levels: low, medium, high, xhigh, max"):
            await wrong.run("hello")
    assert [b["output_config"]["effort"] for b in wire.sent] == ["low", "high"]
    # The server spent the reasoning each level stands for.
    spent = [max(_tokens(a, "output_tokens")) for _, a in wire.answers]
    assert spent[0] < spent[1]


def _chat_anthropic(url: str, wire: Wire, model: str, **kwargs: Any) -> Any:
    """LangChain's ChatAnthropic on the reference server, its requests on ``wire``
    (ChatAnthropic builds its own client; this one is the same with the wire's hooks)."""
    from anthropic import AsyncAnthropic
    from langchain_anthropic import ChatAnthropic

    chat = ChatAnthropic(model=model, base_url=url, api_key="k", **kwargs)  # type: ignore[call-arg]
    chat.__dict__["_async_client"] = AsyncAnthropic(
        base_url=url, api_key="k", http_client=wire.client()
    )
    return chat


async def test_langchain_replaying_thinking_meets_no_400(
    reference_url: str, tmp_path: Path
) -> None:
    pytest.importorskip("langchain")
    from langchain.agents import create_agent
    from langchain_core.messages import HumanMessage

    from visus.integrations.langchain import VisionMiddleware

    prompt = _screens(tmp_path)
    vision = VisionMiddleware(roots=[tmp_path], data=tmp_path / "data")
    _early_break_even(vision.core)
    wire = Wire()
    agent = create_agent(
        _chat_anthropic(reference_url, wire, "claude-opus-5-5"), tools=[], middleware=[vision]
    )
    state = await agent.ainvoke({"messages": [HumanMessage(prompt)]})
    assert state["messages"][-1].text
    _check_claude(wire)


async def test_langchain_effort_reaches_the_wire(reference_url: str, tmp_path: Path) -> None:
    pytest.importorskip("langchain")
    from langchain.agents import create_agent
    from langchain_core.messages import HumanMessage

    from visus.integrations.langchain import VisionMiddleware

    wire = Wire()
    low = VisionMiddleware(roots=[tmp_path], data=tmp_path / "data", effort="low")
    hello = {"messages": [HumanMessage("hello")]}
    chat = _chat_anthropic(reference_url, wire, "claude-opus-5-5")
    await create_agent(chat, tools=[], middleware=[low]).ainvoke(hello)
    # The chat model's own effort wins over the integration's.
    high = _chat_anthropic(reference_url, wire, "claude-opus-5-5", effort="high")
    await create_agent(high, tools=[], middleware=[low]).ainvoke(hello)
    wrong = VisionMiddleware(roots=[tmp_path], data=tmp_path / "data", effort="ultra")
    with pytest.raises(ConfigError, match="its levels: low, medium, high, xhigh, max"):
        await create_agent(chat, tools=[], middleware=[wrong]).ainvoke(hello)
    assert [b["output_config"]["effort"] for b in wire.sent] == ["low", "high"]
    spent = [max(_tokens(a, "output_tokens")) for _, a in wire.answers]
    assert spent[0] < spent[1]


async def _agents_run(
    url: str, wire: Wire, vision: Any, prompt: str, model: str, **settings: Any
) -> Any:
    """One Agents SDK run on the Responses wire of the reference server."""
    from agents import Agent, ModelSettings, OpenAIProvider, Runner, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=f"{url}/v1", api_key="k", http_client=wire.client())
    try:
        provider = OpenAIProvider(openai_client=client, use_responses=True)
        agent = Agent(
            name="screens",
            model=model,
            tools=vision.tools,
            model_settings=ModelSettings(**settings),
        )
        config = vision.run_config(model_provider=provider)
        return await Runner.run(agent, prompt, run_config=config, max_turns=STEPS + 5)
    finally:
        await client.close()


async def test_openai_agents_replaying_reasoning_meets_no_error(
    reference_url: str, tmp_path: Path
) -> None:
    """gpt-5.6-sol binds its reasoning items to the history (OpenAI "preserved
    reasoning"): the history only grows but at the rare evictions; the items an
    eviction invalidates are left out from the evicting request on, with their calls'
    item ids, so the server drops none (no error, no reasoning done again); every
    other reasoning item goes back."""
    pytest.importorskip("agents")
    from visus.integrations.openai_agents import Vision

    prompt = _screens(tmp_path)
    vision = Vision(roots=[tmp_path], data=tmp_path / "data")
    _early_break_even(vision.core, "gpt-5.6-sol")
    wire = Wire()
    result = await _agents_run(reference_url, wire, vision, prompt, "gpt-5.6-sol")
    assert result.final_output
    assert wire.refused() == []
    assert len(wire.sent) >= STEPS + 1
    inputs = [b["input"] if isinstance(b["input"], list) else [] for b in wire.sent]
    plain = [
        [json.dumps(i, sort_keys=True) for i in x if i.get("type") != "reasoning"] for x in inputs
    ]
    evicting = [n for n in range(1, len(plain)) if plain[n][: len(plain[n - 1])] != plain[n - 1]]
    assert 1 <= len(evicting) <= 4, evicting
    # What an eviction invalidates goes neither on the evicting request nor after, its
    # calls without their item ids (the API refuses an item id without its reasoning
    # item): the server never drops reasoning, none is done again.
    spent = [max(_tokens(a, "reasoning_tokens")) for _, a in wire.answers]
    assert len(set(spent)) == 1, spent
    for items in inputs:
        reasoned = False
        for item in items:
            kind = item.get("type")
            reasoned = kind == "reasoning" or (reasoned and kind == "function_call")
            if kind == "function_call" and "id" in item:
                assert reasoned, item
    for n, items in enumerate(inputs[1:], 1):  # the newest reply's reasoning goes back
        if n in evicting:
            continue  # unless this request's eviction invalidates it
        last = max(i for i, x in enumerate(items) if x.get("type") == "function_call")
        assert any(x.get("type") == "reasoning" for x in items[:last]), n


async def test_openai_agents_effort_reaches_the_wire(reference_url: str, tmp_path: Path) -> None:
    pytest.importorskip("agents")
    from openai.types.shared import Reasoning

    from visus.integrations.openai_agents import Vision

    wire = Wire()
    low = Vision(roots=[tmp_path], data=tmp_path / "data", effort="low")
    await _agents_run(reference_url, wire, low, "hello", "gpt-5.6-sol")
    # The agent's own setting wins over the integration's.
    high = Reasoning(effort="high")
    await _agents_run(reference_url, wire, low, "hello", "gpt-5.6-sol", reasoning=high)
    wrong = Vision(roots=[tmp_path], data=tmp_path / "data", effort="ultra")
    with pytest.raises(ConfigError, match="its levels: none, low, medium, high, xhigh, max"):
        await _agents_run(reference_url, wire, wrong, "hello", "gpt-5.6-sol")
    assert [b["reasoning"]["effort"] for b in wire.sent] == ["low", "high"]
    spent = [max(_tokens(a, "reasoning_tokens")) for _, a in wire.answers]
    assert spent[0] < spent[1]


async def _pydantic_ai_loop(url: str, wire: Wire, tmp_path: Path) -> None:
    from anthropic import AsyncAnthropic
    from pydantic_ai import Agent
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.providers.anthropic import AnthropicProvider

    from visus.integrations.pydantic_ai import Vision

    prompt = _screens(tmp_path)
    vision = Vision(roots=[tmp_path], data=tmp_path / "data")
    _early_break_even(vision.core, weigh_reasoning=True)
    async with wire.client() as http:
        client = AsyncAnthropic(base_url=url, api_key="k", http_client=http)
        model = AnthropicModel(
            "claude-opus-5-5", provider=AnthropicProvider(anthropic_client=client)
        )
        await Agent(model, capabilities=[vision]).run(prompt)


async def _langchain_loop(url: str, wire: Wire, tmp_path: Path) -> None:
    from langchain.agents import create_agent
    from langchain_core.messages import HumanMessage

    from visus.integrations.langchain import VisionMiddleware

    prompt = _screens(tmp_path)
    vision = VisionMiddleware(roots=[tmp_path], data=tmp_path / "data")
    _early_break_even(vision.core, weigh_reasoning=True)
    chat = _chat_anthropic(url, wire, "claude-opus-5-5")
    await create_agent(chat, tools=[], middleware=[vision]).ainvoke(
        {"messages": [HumanMessage(prompt)]}
    )


@pytest.mark.parametrize("framework", ["pydantic_ai", "langchain"])
async def test_reasoning_that_costs_more_than_small_screens_keeps_them_all(
    reference_url: str, tmp_path: Path, framework: str
) -> None:
    """``weigh_reasoning`` on, twelve steps past a break-even of four small screens:
    each reply's usage (its reasoning) reaches the plan, and the first eviction waits
    until the screens' reads cover the reasoning it would drop, which twelve steps of
    ~100-token screens never do. Every request only appends to the last; nothing is
    dropped. (With the replies' reasoning not counted, the first eviction comes at the
    break-even, as in test_*_replaying_thinking_meets_no_400.)"""
    pytest.importorskip(framework)
    wire = Wire()
    loop = _pydantic_ai_loop if framework == "pydantic_ai" else _langchain_loop
    await loop(reference_url, wire, tmp_path)
    assert wire.refused() == []
    assert len(wire.sent) >= STEPS + 1
    assert max(_tokens(wire.answers[1][1], "output_tokens")) >= 48  # it did reason
    sent = [_without_reasoning(b["messages"]) for b in wire.sent]
    assert all(sent[n][: len(sent[n - 1])] == sent[n - 1] for n in range(1, len(sent)))
    assert not any(_dropped(answer) for _, answer in wire.answers)
