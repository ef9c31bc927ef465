"""``visus proxy`` with no window of the operator's, for a model that binds its reasoning
to the prefix: the history stays append-only, and past the family's break-even in image
tokens the oldest screenshots leave in one batch, the first time only once the cache
reads they cost cover the reasoning the client replays after them (``retention.Hold``),
which the proxy estimates from the sealed payloads it passes on (a thinking block's
``signature``, a Responses reasoning item's ``encrypted_content``:
``retention.sealed_reasoning``). Real SDK clients against a loopback upstream that mints
payloads of a chosen size and checks each thinking block's prefix, as Anthropic does:
a block after a changed prefix is a 400 unless the request opts into ``drop_block``."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from PIL import Image
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from visus.models import get_model, image_tokens
from visus.proxy import ProxyConfig
from visus.retention import (
    Ceiling,
    RetentionPolicy,
    Shown,
    evicted_over,
    policy_for,
    sealed_reasoning,
)
from visus.wire._prepare import max_images
from visus.wire.anthropic import RULES as MESSAGES
from visus.wire.openai_responses import RULES as RESPONSES

from .conftest import cli_port, serve_app, serve_proxy
from .test_replayed_thinking import BETA, TOOLS, _changes, _images

_REASONING = ("thinking", "redacted_thinking")


def _prefix(messages: list[Any]) -> str:
    """What a thinking block after ``messages`` is bound to: their values, reasoning
    blocks and ``cache_control`` markers left out."""

    def bare(block: Any) -> Any:
        if not isinstance(block, dict):
            return block
        return {k: v for k, v in block.items() if k != "cache_control"}

    out = []
    for m in messages:
        content = m["content"]
        if isinstance(content, list):
            content = [bare(b) for b in content if bare(b).get("type") not in _REASONING]
        out.append([m["role"], content])
    return json.dumps(out, sort_keys=True)


class Thinker:
    """An Anthropic-shaped upstream answering each request with a thinking block (its
    signature ``signature`` characters long: the reasoning it stands for) and a tool
    call. Each block is bound to the messages before it: one sent back after a changed
    prefix is a 400, or, with ``drop_block`` and its beta, dropped and listed in
    ``input_transformations`` (Anthropic "Preserved thinking"). Keeps every body."""

    def __init__(self, signature: int = 8) -> None:
        self.signature = signature
        self.bodies: list[dict[str, Any]] = []
        self.bound: dict[str, str] = {}  # signature -> its prefix
        self.dropped: list[int] = []  # per request

    def _check(self, body: dict[str, Any], beta: str) -> list[dict[str, Any]] | None:
        """The blocks dropped (None: a 400)."""
        binding = (body.get("thinking") or {}).get("block_binding") or {}
        drop = binding.get("prefix_mismatch_behavior") == "drop_block" and BETA in beta
        dropped = []
        messages = body["messages"]
        for i, m in enumerate(messages):
            if m["role"] != "assistant" or not isinstance(m["content"], list):
                continue
            for j, block in enumerate(m["content"]):
                if block.get("type") != "thinking":
                    continue
                if self.bound.get(block["signature"]) != _prefix(messages[:i]):
                    if not drop:
                        return None
                    path = f"messages.{i}.content.{j}"
                    dropped.append({"type": "thinking_dropped", "path": path})
        return dropped

    def app(self) -> Starlette:
        async def messages(request: Request) -> Response:
            body = json.loads(await request.body())
            self.bodies.append(body)
            dropped = self._check(body, request.headers.get("anthropic-beta", ""))
            if dropped is None:
                error = {"type": "invalid_request_error", "message": "bound to a different prefix"}
                return JSONResponse({"type": "error", "error": error}, status_code=400)
            self.dropped.append(len(dropped))
            n = len(self.bodies)
            signature = f"sig{n}-".ljust(self.signature, "A")
            self.bound[signature] = _prefix(body["messages"])
            reply = {
                "id": f"msg_{n}",
                "type": "message",
                "role": "assistant",
                "model": "claude-opus-5-5",
                "content": [
                    {"type": "thinking", "thinking": "", "signature": signature},
                    {"type": "tool_use", "id": f"t{n}", "name": "screenshot", "input": {}},
                ],
                "stop_reason": "tool_use",
                "stop_sequence": None,
                "usage": {"input_tokens": 1, "output_tokens": 1},
                "input_transformations": dropped,
            }
            return Response(json.dumps(reply), media_type="application/json")

        return Starlette(routes=[Route("/v1/messages", messages, methods=["POST"])])


def _screen(n: int, size: tuple[int, int] = (2000, 1733)) -> bytes:
    """A screenshot, small in bytes (one colour), every pixel unlike the step before (a
    small change would go as a crop of the changed area, issue 35): the break-even
    counts image tokens, and dozens of them must fit a request's bytes."""
    img = Image.new("RGB", size, (n * 37 % 256, n * 11 % 256, 255 - n % 256))
    out = io.BytesIO()
    img.save(out, "PNG")
    return out.getvalue()


def _expected(
    model: str, rules: Any, each: int, reasoning: int, steps: int, *, weigh: bool = True
) -> list[int]:
    """What the proxy evicts at each request (request n carries n screenshots, each
    after a reply replaying ``reasoning`` tokens), by the rule visus's agent applies
    (``weigh``: with ``weigh_reasoning``, as ``--weigh-reasoning`` asks)."""
    spec = get_model(model)
    policy = policy_for(spec, RetentionPolicy(weigh_reasoning=weigh))
    ceiling = policy.ceiling(spec).tighter(Ceiling(images=max_images(spec, rules)))
    shots = [Shown(str(n), 0, each, reasoning) for n in range(steps)]
    hold = policy.hold(spec)
    return [evicted_over(shots[:n], ceiling, share=policy.share, hold=hold) for n in range(steps)]


def _first(gone: list[int]) -> int:
    return next(n for n, g in enumerate(gone) if g)


def _messages_loop(signature: int, steps: int, *, weigh: bool = True) -> Thinker:
    """A client replaying each reply as returned, then a screenshot as the tool's result
    (``weigh``: the proxy runs with ``--weigh-reasoning``)."""
    thinker = Thinker(signature)
    with (
        serve_app(thinker.app()) as upstream,
        serve_proxy(ProxyConfig(upstream=upstream, weigh_reasoning=weigh)) as url,
    ):
        client = anthropic.Anthropic(base_url=url, api_key="k", max_retries=0)
        messages: list[Any] = [{"role": "user", "content": "go"}]
        for n in range(steps):
            reply = client.messages.create(  # a 400 raises here
                model="claude-opus-5-5", max_tokens=100, tools=TOOLS, messages=messages
            )
            content = [b.model_dump(exclude_none=True) for b in reply.content]
            messages.append({"role": "assistant", "content": content})
            data = base64.b64encode(_screen(n)).decode()
            source = {"type": "base64", "media_type": "image/png", "data": data}
            image = {"type": "image", "source": source}
            result = {"type": "tool_result", "tool_use_id": f"t{n + 1}", "content": [image]}
            messages.append({"role": "user", "content": [result]})
    assert len(thinker.bodies) == steps
    return thinker


def _check_evictions(thinker: Thinker, gone: list[int]) -> None:
    """The forwarded history is append-only but at the evictions, each in one batch;
    from the first on every request opts into drop_block; blocks are dropped only at an
    eviction (those it invalidated are left out of the requests after it)."""
    steps, first = len(gone), _first(gone)
    assert [_images(b) for b in thinker.bodies] == [n - gone[n] for n in range(steps)]
    evictions = [n for n in range(1, steps) if gone[n] != gone[n - 1]]
    assert _changes(thinker.bodies, without_reasoning=True) == evictions
    opted = [b.get("thinking", {}).get("block_binding") is not None for b in thinker.bodies]
    assert opted == [n >= first for n in range(steps)]
    assert [n for n, d in enumerate(thinker.dropped) if d] == evictions
    # After it, the replies between the first evicted screenshot and the eviction go
    # without their blocks: only the first reply's (before every screenshot) and the
    # eviction's own reply (made over the new prefix) are sent.
    after = thinker.bodies[first + 1]["messages"]
    kept = [b for m in after if m["role"] == "assistant" for b in m["content"]]
    assert sum(b["type"] == "thinking" for b in kept) == 2


def test_without_a_window_the_history_stays_append_only_until_the_break_even() -> None:
    """By default (no --weigh-reasoning) the first eviction comes at the family's
    break-even in image tokens whatever the replies reason, the family's share of what
    fits leaving in one batch, with the opt-in from then on."""
    each = image_tokens(get_model("claude-opus-5-5"), 2000, 1733)
    signature = 16 * 1000 // 3  # ~1,000 reasoning tokens a reply: not weighed
    at_break_even = _first(_expected("claude-opus-5-5", MESSAGES, each, 0, 40))
    steps = at_break_even + 6
    reasoning = sealed_reasoning("A" * signature)
    gone = _expected("claude-opus-5-5", MESSAGES, each, reasoning, steps, weigh=False)
    first = _first(gone)
    assert 1 < at_break_even == first
    assert gone[first] >= first // 3  # a large batch, not an image a step
    _check_evictions(_messages_loop(signature, steps, weigh=False), gone)


def test_replies_that_reason_much_keep_every_screenshot_well_past_the_break_even() -> None:
    """--weigh-reasoning, replies of ~1,000 reasoning tokens: evicting at the break-even
    would drop more reasoning than the cache reads of keeping the screenshots cost, so
    they all stay
    until those reads cover it, then leave in one batch; no 400, and the blocks that
    eviction dropped are left out after it."""
    each = image_tokens(get_model("claude-opus-5-5"), 2000, 1733)
    signature = 16 * 1000 // 3  # ~1,000 reasoning tokens a reply
    at_break_even = _first(_expected("claude-opus-5-5", MESSAGES, each, 0, 40))
    probe = _expected("claude-opus-5-5", MESSAGES, each, sealed_reasoning("A" * signature), 200)
    steps = _first(probe) + 3
    gone = probe[:steps]
    first = _first(gone)
    assert first >= 2 * at_break_even  # every screenshot kept well past it
    assert gone[first] >= first // 2  # then one large batch
    _check_evictions(_messages_loop(signature, steps), gone)


class Reasoner:
    """A Responses upstream answering each request with a reasoning item (its
    ``encrypted_content`` ``sealed`` characters long) and a function call; keeps every
    body (the provider drops reasoning after a changed prefix without an error)."""

    def __init__(self, sealed: int) -> None:
        self.sealed = sealed
        self.bodies: list[dict[str, Any]] = []

    def app(self) -> Starlette:
        async def responses(request: Request) -> Response:
            self.bodies.append(json.loads(await request.body()))
            n = len(self.bodies)
            reply = {
                "id": f"resp_{n}",
                "object": "response",
                "created_at": 0,
                "status": "completed",
                "model": "gpt-5.6-sol",
                "output": [
                    {
                        "type": "reasoning",
                        "id": f"rs_{n}",
                        "summary": [],
                        "encrypted_content": f"enc{n}-".ljust(self.sealed, "A"),
                    },
                    {
                        "type": "function_call",
                        "id": f"fc_{n}",
                        "call_id": f"call_{n}",
                        "name": "screenshot",
                        "arguments": "{}",
                        "status": "completed",
                    },
                ],
                "parallel_tool_calls": True,
                "tool_choice": "auto",
                "tools": [],
                "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2},
            }
            return Response(json.dumps(reply), media_type="application/json")

        return Starlette(routes=[Route("/v1/responses", responses, methods=["POST"])])


def _input_images(body: dict[str, Any]) -> int:
    return sum(
        1
        for item in body["input"]
        if item.get("type") == "function_call_output"
        for part in item["output"]
        if part.get("type") == "input_image"
    )


def test_responses_reasoning_items_hold_the_first_eviction_too() -> None:
    """On Responses (GPT-5.6, whose reasoning items after a changed prefix are dropped)
    the replayed reasoning items' ``encrypted_content`` holds the first eviction past
    the break-even the same way."""
    size = (3200, 2400)
    each = image_tokens(get_model("gpt-5.6-sol"), *size)
    sealed = 16 * 2000 // 3  # ~2,000 reasoning tokens a reply
    at_break_even = _first(_expected("gpt-5.6-sol", RESPONSES, each, 0, 100))
    probe = _expected("gpt-5.6-sol", RESPONSES, each, sealed_reasoning("A" * sealed), 200)
    steps = _first(probe) + 2
    gone = probe[:steps]
    assert _first(gone) >= at_break_even + 3  # held past the break-even
    reasoner = Reasoner(sealed)
    schema = {"type": "object"}
    tools: list[Any] = [{"type": "function", "name": "screenshot", "parameters": schema}]
    with (
        serve_app(reasoner.app()) as upstream,
        serve_proxy(ProxyConfig(upstream=upstream, weigh_reasoning=True)) as url,
    ):
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0)
        items: list[Any] = [{"role": "user", "content": "go"}]
        for n in range(steps):
            reply = client.responses.create(
                model="gpt-5.6-sol", input=items, tools=tools, store=False
            )
            out = [o.model_dump(exclude_none=True) for o in reply.output]
            items.extend(out)
            data = base64.b64encode(_screen(n, size)).decode()
            image = {"type": "input_image", "image_url": f"data:image/png;base64,{data}"}
            result = {"type": "function_call_output", "call_id": f"call_{n + 1}", "output": [image]}
            items.append(result)
    assert [_input_images(b) for b in reasoner.bodies] == [n - gone[n] for n in range(steps)]


@pytest.mark.parametrize("flag", [[], ["--weigh-reasoning"]])
def test_the_operator_turns_the_weighing_on_from_the_command_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, flag: list[str]
) -> None:
    import uvicorn
    from typer.testing import CliRunner

    import visus.proxy
    from visus.cli import app

    built: list[ProxyConfig] = []
    real = visus.proxy.create_proxy_app

    def spy(config: ProxyConfig) -> Any:
        built.append(config)
        return real(config)

    monkeypatch.setattr(visus.proxy, "create_proxy_app", spy)
    monkeypatch.setattr(uvicorn.Server, "run", lambda *a, **k: None)  # built, not served
    port = cli_port(monkeypatch, tmp_path)
    args = ["proxy", "--upstream", "http://127.0.0.1:9", "--port", port, *flag]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert [c.weigh_reasoning for c in built] == [bool(flag)]
