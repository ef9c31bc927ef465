"""Truncation end to end: the reference server cuts answers off at its output limit
and says so with each wire's own signal (JSON and streamed); the codecs read it as
``stop_reason == "max_tokens"``, and the agent, ``visus run`` and tether's
``assistant.done`` all say the answer was cut off."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from tests.served import auth
from visus.app import create_main_app
from visus.cli import app as cli_app
from visus.providers import ProviderSettings, resolve
from visus.record.blobs import MemoryBlobStore
from visus.record.messages import ModelRequest, TextPart, UserMessage
from visus.reference.server import serve_in_background

from .stub import track

WIRES = ["openai-chat", "openai-responses", "anthropic", "gemini", "ollama", "bedrock"]
ASK = ModelRequest(messages=(UserMessage((TextPart("What do you see?"),)),), max_tokens=500)


@pytest.fixture(scope="module")
def cut_url() -> Iterator[str]:
    """A reference server whose model writes at most 3 tokens."""
    with serve_in_background(max_output_tokens=3) as url:
        yield url


@pytest.fixture(scope="module")
def full_url() -> Iterator[str]:
    with serve_in_background() as url:
        yield url


async def _ask(url: str, wire: str, *, stream: bool) -> Any:
    client, spec = resolve(
        f"reference:{wire}", config=ProviderSettings(reference_url=url, env={}, max_retries=0)
    )
    track(client)
    deltas: list[str] = []
    reply = await client.complete(
        ASK, model=spec, blobs=MemoryBlobStore(), on_delta=deltas.append if stream else None
    )
    return reply, "".join(deltas)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "streamed"])
@pytest.mark.parametrize("wire", WIRES)
async def test_each_wire_says_cut_off_and_finished(
    wire: str, stream: bool, cut_url: str, full_url: str
) -> None:
    cut, shown = await _ask(cut_url, wire, stream=stream)
    assert cut.stop_reason == "max_tokens"
    assert cut.truncated
    assert 0 < len(cut.text) <= 12  # 3 tokens of 4 characters
    assert cut.usage.output_tokens == 3
    if stream:
        assert shown == cut.text
    whole, _ = await _ask(full_url, wire, stream=stream)
    assert whole.stop_reason == "end_turn"
    assert not whole.truncated
    assert whole.text.startswith(cut.text)
    assert len(whole.text) > len(cut.text)


def test_the_request_cap_cuts_too_when_the_server_has_a_limit() -> None:
    with serve_in_background(max_output_tokens=1000) as url:
        client, spec = resolve(
            "reference:anthropic", config=ProviderSettings(reference_url=url, env={})
        )
        small = ModelRequest(messages=ASK.messages, max_tokens=2)

        async def go() -> Any:
            try:
                return await client.complete(small, model=spec, blobs=MemoryBlobStore())
            finally:
                await client.aclose()

        reply = asyncio.run(go())
    assert reply.stop_reason == "max_tokens"
    assert reply.usage.output_tokens == 2


async def test_tether_assistant_done_carries_the_stop_reason(tmp_path: Path, cut_url: str) -> None:
    app = create_main_app(
        data=tmp_path / "data",
        model="reference",
        settings=ProviderSettings(reference_url=cut_url, env={}),
        web=False,
    )
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=transport, base_url="http://127.0.0.1", headers=auth(app), timeout=60
        ) as http,
    ):
        iid = app.state.default_instance
        frame = {"type": "user.message", "session": "s", "payload": {"text": "hi"}}
        sent = (await http.post(f"/v1/instances/{iid}/tether", json=frame)).json()
        frames: list[dict[str, Any]] = []
        after = 0
        while not any(f["type"] in ("assistant.done", "error") for f in frames):
            page = (
                await http.get(
                    f"/v1/instances/{iid}/tether/poll", params={"after_seq": after, "wait": 5}
                )
            ).json()
            frames += page["frames"]
            after = page["next_seq"]
    done = next(f for f in frames if f["type"] == "assistant.done")
    assert done["reply_to"] == sent["msg_id"]
    assert done["payload"]["stop_reason"] == "max_tokens"


def test_visus_run_says_the_answer_was_cut_off(
    tmp_path: Path, cut_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VISUS_REFERENCE_URL", cut_url)
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    data = str(tmp_path / "data")
    result = runner.invoke(cli_app, ["run", "-m", "reference", "--data", data, "hello"])
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert "cut off at the model's output limit" in result.stderr
    result = runner.invoke(cli_app, ["run", "-m", "reference", "--data", data, "--json", "hi"])
    out = json.loads(result.stdout)
    assert (out["stopped"], out["stop_reason"]) == ("max_tokens", "max_tokens")
