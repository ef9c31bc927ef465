"""Effort set per run reaches the model; the notes a newer model writes between tool calls
reach the progress line (``on_status``: the CLI spinner, the web chat's phase line).

Against the reference server over HTTP, as ``claude-opus-5-5``: its model spends 16
reasoning tokens a reply at effort ``low`` and 48 at its default ``medium`` (the server's
own numbers), and returns its notes between tool calls in thinking blocks, as text only
when the request asks for ``display: "updates"`` (which visus does for such models).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from typer.testing import CliRunner

from visus.agent import build_agent
from visus.errors import InvalidInputError
from visus.providers import ProviderSettings
from visus.record.messages import AssistantMessage
from visus.reference.server import serve_in_background

MODEL = "anthropic:claude-opus-5-5"


@pytest.fixture(scope="module")
def reference_url() -> Iterator[str]:
    with serve_in_background() as url:
        yield url


def _agent(tmp_path: Path, url: str, **kw: Any) -> Any:
    work = tmp_path / "work"
    work.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (64, 48), "red").save(work / "a.png")
    settings = ProviderSettings(api_keys={"anthropic": "k"}, base_urls={"anthropic": url}, env={})
    return build_agent(MODEL, data=tmp_path / "data", roots=[work], settings=settings, **kw)


async def _output_tokens(agent: Any) -> int:
    try:
        result = await agent.run_turn("s", "hello")
    finally:
        await agent.aclose()
    steps = [m for m in result.messages if isinstance(m, AssistantMessage) and m.usage]
    return sum(m.usage.output_tokens for m in steps)


async def test_effort_reaches_the_model(reference_url: str, tmp_path: Path) -> None:
    low = await _output_tokens(_agent(tmp_path / "low", reference_url, effort="low"))
    default = await _output_tokens(_agent(tmp_path / "default", reference_url))
    assert default - low == 48 - 16  # the same answer, thought about less


def test_an_effort_the_model_does_not_take_is_refused(reference_url: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="xhigh"):  # the message lists its levels
        _agent(tmp_path, reference_url, effort="turbo")


async def test_notes_between_tool_calls_reach_the_progress_line(
    reference_url: str, tmp_path: Path
) -> None:
    agent = _agent(tmp_path, reference_url)
    said: list[str] = []
    try:
        await agent.run_turn(
            "s", 'say Opening the red screen.\ncall view {"path": "a.png"}', on_status=said.append
        )
    finally:
        await agent.aclose()
    assert "Opening the red screen." in said
    # The note came back as thinking text, not as answer text.
    assert said.index("Opening the red screen.") > said.index("waiting for claude-opus-5-5")


def test_visus_run_takes_effort(
    reference_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from visus.cli import app

    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", reference_url)
    base = ["run", "--model", MODEL, "--data", str(tmp_path / "d"), "--root", str(tmp_path)]
    ok = CliRunner().invoke(app, [*base, "--effort", "low", "--json", "hello"])
    assert ok.exit_code == 0, ok.stderr
    refused = CliRunner().invoke(app, [*base, "--effort", "turbo", "hello"])
    assert refused.exit_code == 2
    assert "takes no effort 'turbo'" in refused.stderr
