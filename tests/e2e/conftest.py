"""End-to-end fixtures: the reference server on loopback and agents wired to it."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from visus.agent import Agent, build_agent
from visus.providers import ProviderSettings
from visus.reference.server import serve_in_background
from visus.retention import RetentionPolicy

WIRES = ("openai-chat", "openai-responses", "anthropic", "gemini", "ollama", "bedrock")

_JSON_BLOCK = re.compile(r"```json\n(.*?)\n```", re.DOTALL)


@pytest.fixture(scope="session")
def reference_url() -> Iterator[str]:
    with serve_in_background() as url:
        yield url


@pytest.fixture
async def agents() -> AsyncIterator[list[Agent]]:
    """Agents made in a test are closed before its event loop ends."""
    made: list[Agent] = []
    yield made
    for agent in made:
        await agent.aclose()


def make_agent(
    url: str, wire: str, tmp: Path, *, live_turns: int = 1, model: str | None = None
) -> Agent:
    work = tmp / "work"
    work.mkdir(exist_ok=True)
    return build_agent(
        model or f"reference:{wire}",
        data=tmp / "data",
        roots=[work],
        settings=ProviderSettings(reference_url=url, backoff_base=0.01, env={}),
        policy=RetentionPolicy(live_turns=live_turns),
    )


def seen(answer: str) -> dict[str, Any]:
    """The reference model's JSON block from an answer."""
    blocks = _JSON_BLOCK.findall(answer)
    assert len(blocks) == 1, f"expected one JSON block in the answer: {answer[:400]!r}"
    data = json.loads(blocks[0])
    assert isinstance(data, dict)
    return data


def view_call(path: str) -> str:
    return f"call view {json.dumps({'path': path})}"
