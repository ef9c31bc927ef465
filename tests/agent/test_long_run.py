"""A screen agent's long turn in visus's own loop, against the reference server over HTTP.

One instruction makes the reference model view 40 screenshots, one per step (its
``each`` loop), about a third of them unchanged from the step before. Every request the
agent sends is recorded as it goes to the provider client.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from visus.agent import build_agent
from visus.providers import ProviderSettings
from visus.record.messages import ImagePart, ModelRequest, TextPart, ToolResult
from visus.reference.grid import make_grid
from visus.reference.server import serve_in_background
from visus.retention import RetentionPolicy
from visus.wire import lower

STEPS = 40


@pytest.fixture(scope="module")
def reference_url() -> Iterator[str]:
    with serve_in_background() as url:
        yield url


class _Recording:
    """A provider client that keeps each request it is asked to send."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest, **kwargs: Any) -> Any:
        self.requests.append(request)
        return await self.inner.complete(request, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _unchanged(step: int) -> bool:
    return step % 3 == 0  # about a third of the screens: the same as the step before


def _screens(folder: Path) -> str:
    shown = b""
    for step in range(1, STEPS + 1):
        if not _unchanged(step):
            shown = make_grid(2, 3, seed=step)[0]
        (folder / f"s{step}.png").write_bytes(shown)
    return "each view " + json.dumps([{"path": f"s{i}.png"} for i in range(1, STEPS + 1)])


@pytest.mark.parametrize("wire", ["anthropic", "openai-responses"])
async def test_forty_screenshots_in_one_turn(reference_url: str, tmp_path: Path, wire: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    prompt = _screens(work)
    agent = build_agent(
        f"reference:{wire}",
        data=tmp_path / "data",
        roots=[work],
        settings=ProviderSettings(reference_url=reference_url, env={}),
    )
    recorder = _Recording(agent.client)
    agent.client = recorder
    try:
        result = await agent.run_turn("s", prompt)
    finally:
        await agent.aclose()
    assert (result.stopped, result.steps) == ("answer", STEPS + 1)

    bound = RetentionPolicy().live_images  # the defaults: what a user gets
    assert bound is not None
    evictions = 0
    before = 0
    for n, request in enumerate(recorder.requests[1:], 1):
        results = [m for m in request.messages if isinstance(m, ToolResult)]
        live = [p for m in results for p in m.parts if isinstance(p, ImagePart)]
        evictions += len(live) < before
        before = len(live)
        assert len(live) <= bound, n  # bounded however long the turn
        assert len({p.digest for p in live}) == len(live)  # never the same pixels twice
        newest = results[-1].parts[1]
        if _unchanged(n):  # the same screen as the step before: a note, not pixels
            assert isinstance(newest, TextPart)
            assert newest.text.startswith("[image unchanged:")
            assert isinstance(results[-2].parts[1], ImagePart)
        else:
            assert isinstance(newest, ImagePart)  # the newest is always live

    # the cache: breakpoints on the wire that takes them, reads in the usage
    last = recorder.requests[-1]
    body = lower(last, wire=wire, model=agent.model, blobs=agent.blobs)  # type: ignore[arg-type]
    if wire == "anthropic":
        # head, the ladder (the history is longer than the 20-block lookback), the
        # window, the newest block: the four the API takes
        assert json.dumps(body).count('"cache_control"') == 4
    else:
        assert body["prompt_cache_key"].startswith("visus-")
    steps = [m.usage for m in result.messages if m.kind == "assistant" and m.usage]
    assert len(steps) == STEPS + 1
    late = steps[4:]
    shown = " ".join(
        f"{u.input_tokens}/{u.cache_read_tokens}/{u.cache_write_tokens}" for u in steps
    )
    # Between evictions every step reads what the one before wrote; an eviction (one per
    # batch of new screens) may miss when the history before the window is shorter
    # than the model's 1024-token minimum and so was never written.
    misses = [n for n, u in enumerate(late, 5) if u.cache_read_tokens == 0]
    assert len(misses) <= evictions, shown
    read = sum(u.cache_read_tokens for u in late)
    assert read >= 0.75 * sum(u.input_tokens for u in late), shown
    assert result.usage.cache_read_tokens == sum(u.cache_read_tokens for u in steps)
