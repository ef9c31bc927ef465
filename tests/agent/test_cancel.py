"""Cancelling a turn (the web chat's Stop, a tether ``turn.cancel``) stops the agent at
its next await and leaves a record every wire can lower: each tool call answered, the
user's message answered, and a next turn that works."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.agent.test_loop import Scripted, agent, call, png, say
from visus.models import ModelSpec
from visus.providers.base import BlobReader, OnDelta
from visus.record.messages import AssistantMessage, ModelRequest, ToolCall, ToolResult
from visus.wire import RefitCache, lower


def answered(messages: tuple[object, ...]) -> bool:
    calls = {c.id for m in messages if isinstance(m, AssistantMessage) for c in m.tool_calls}
    results = {m.call_id for m in messages if isinstance(m, ToolResult)}
    return calls == results


async def test_cancel_while_a_tool_runs_answers_every_call(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "pic.png").write_bytes(png())
    a = agent(tmp_path, [call("view", path="pic.png"), say("next turn works")])
    started, never = asyncio.Event(), asyncio.Event()

    async def hold(c: ToolCall) -> None:
        started.set()
        await never.wait()  # the tool is "working" until the user stops it

    task = asyncio.create_task(a.run_turn("s", "look", on_tool=hold))
    await asyncio.wait_for(started.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    messages = a.sessions.load("s").messages
    assert [m.kind for m in messages] == ["user", "assistant", "tool"]
    stopped = messages[-1]
    assert isinstance(stopped, ToolResult)
    assert stopped.is_error
    assert "stopped by the user" in stopped.text
    assert answered(messages)
    # The stored record still lowers (Anthropic needs a tool_result per tool_use).
    body = lower(
        ModelRequest(messages=messages), wire="anthropic", model="claude-sonnet-4-6", blobs=a.blobs
    )
    assert body["messages"][-1]["content"][0]["type"] == "tool_result"
    r = await a.run_turn("s", "go on")
    assert r.answer == "next turn works"


class Hanging(Scripted):
    """A provider that never answers its first request."""

    async def complete(
        self,
        request: ModelRequest,
        *,
        model: ModelSpec,
        blobs: BlobReader,
        on_delta: OnDelta | None = None,
        refit_cache: RefitCache | None = None,
    ) -> AssistantMessage:
        if not self.requests:
            self.requests.append(request)
            await asyncio.Event().wait()
        return await super().complete(
            request, model=model, blobs=blobs, on_delta=on_delta, refit_cache=refit_cache
        )


async def test_cancel_while_waiting_for_the_model_answers_the_message(tmp_path: Path) -> None:
    a = agent(tmp_path, [say("second answer")])
    a.client = Hanging([say("second answer")])
    task = asyncio.create_task(a.run_turn("s", "first"))
    while not a.client.requests:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    messages = a.sessions.load("s").messages
    assert [m.kind for m in messages] == ["user", "assistant"]
    assert "stopped by the user" in messages[-1].text  # type: ignore[union-attr]
    r = await a.run_turn("s", "again")
    assert r.answer == "second answer"
    assert [m.kind for m in a.sessions.load("s").messages] == [
        "user",
        "assistant",
        "user",
        "assistant",
    ]
