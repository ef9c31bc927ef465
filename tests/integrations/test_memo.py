"""An integration decodes, hashes and probes each image once, not once per request.

A framework sends its whole history with every request. Each test runs a real agent
loop of 20 turns (a view of that turn's screenshot, then an answer: two requests a
turn) against an in-process model double that records the input each request
carries, and counts the work done on images through the seams every path reaches
(``visus.media.probe``; the base64 decoders of ``items`` and ``blocks``). Without the
memo the counts grow with turns x images (every request redoes every image of its
history); with it they follow the distinct images. What is sent is the same byte for
byte with the memo, without one (``ImageMemo(0)``) and with one so small it evicts
all the time.
"""

from __future__ import annotations

import base64
import collections
import hashlib
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from PIL import Image, ImageDraw

from visus import media
from visus.integrations import blocks, items
from visus.integrations.memo import ImageMemo, Lru

TURNS = 20


def _shots(folder: Path) -> int:
    """A screenshot per turn (every third the same bytes as the one before); the
    number of distinct ones."""
    shown = b""
    for turn in range(1, TURNS + 1):
        if turn % 3:
            im = Image.new("RGB", (480, 300), (250, 250, 250))
            ImageDraw.Draw(im).text((10, 10), f"screen {turn}", fill=(0, 0, 0))
            buf = io.BytesIO()
            im.save(buf, "PNG")
            shown = buf.getvalue()
        (folder / f"shot{turn}.png").write_bytes(shown)
    return len({(folder / f"shot{t}.png").read_bytes() for t in range(1, TURNS + 1)})


class Counted:
    """Calls of a function (by the sha256 of their first argument)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> None:
        self.calls: collections.Counter[str] = collections.Counter()
        inner: Callable[..., Any] = getattr(owner, name)

        def counted(first: Any, *args: Any, **kwargs: Any) -> Any:
            key = first if isinstance(first, bytes) else str(first).encode()
            self.calls[hashlib.sha256(key).hexdigest()] += 1
            return inner(first, *args, **kwargs)

        monkeypatch.setattr(owner, name, counted)

    @property
    def total(self) -> int:
        return sum(self.calls.values())


# --- the Agents SDK ------------------------------------------------------------------


async def _agents_loop(folder: Path, memo: ImageMemo | None) -> list[str]:
    """20 turns of the SDK's Runner with visus, naming no model (the SDK's default,
    an append-only one: every screenshot stays live); each request's input as sent."""
    from agents import Agent, Model, ModelResponse, Runner, Usage, set_tracing_disabled
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    from visus.integrations.openai_agents import Vision

    set_tracing_disabled(True)
    sent: list[str] = []

    class Double(Model):
        async def get_response(self, system: Any, input: Any, *a: Any, **k: Any) -> Any:
            sent.append(json.dumps(input, sort_keys=True))
            last = input[-1]
            if last.get("role") == "user" and isinstance(last.get("content"), str):
                args = json.dumps({"path": last["content"]})
                call = ResponseFunctionToolCall(
                    type="function_call", call_id=f"c{len(input)}", name="view", arguments=args
                )
                return ModelResponse(output=[call], usage=Usage(), response_id=None)
            text = ResponseOutputText(type="output_text", text="seen", annotations=[])
            reply = ResponseOutputMessage(
                id="m", type="message", role="assistant", status="completed", content=[text]
            )
            return ModelResponse(output=[reply], usage=Usage(), response_id=None)

        def stream_response(self, *a: Any, **k: Any) -> Any:
            raise NotImplementedError

    vision = Vision(roots=[folder], data=folder / "data")
    if memo is not None:
        vision.core.memo = memo
    agent = Agent(name="a", model=vision.model(Double()), tools=vision.tools)
    history: list[Any] = []
    for turn in range(1, TURNS + 1):
        items_in = [*history, {"role": "user", "content": f"shot{turn}.png"}]
        result = await Runner.run(agent, items_in, run_config=vision.run_config())
        history = result.to_input_list()
    assert vision.last_request is not None
    assert vision.last_request.live >= 10  # append-only: every screenshot live
    return sent


async def test_the_agents_sdk_probes_and_decodes_each_image_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("agents")
    distinct = _shots(tmp_path)
    probes = Counted(monkeypatch, media, "probe")
    decodes = Counted(monkeypatch, items, "inline")
    await _agents_loop(tmp_path, None)
    # Each screenshot a view returned is decoded from its data URL once, and probed
    # once (the view fitted it for this model, so it is sent as it is); before, every
    # request did both again for every image of its history (hundreds here).
    assert max(decodes.calls.values()) == 1, decodes.calls
    assert decodes.total == distinct
    assert probes.total <= 2 * distinct, probes.calls  # a view's own probe, then ours
    assert max(probes.calls.values()) <= 2


async def test_without_a_memo_the_work_grows_with_the_turns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control: ``ImageMemo(0)`` remembers nothing, and the counts grow as
    turns x images (what the test above would see if the work were redone)."""
    pytest.importorskip("agents")
    distinct = _shots(tmp_path)
    probes = Counted(monkeypatch, media, "probe")
    await _agents_loop(tmp_path, ImageMemo(0))
    assert probes.total > 10 * distinct


async def test_the_agents_sdk_sends_the_same_bytes_with_or_without_the_memo(
    tmp_path: Path,
) -> None:
    pytest.importorskip("agents")
    _shots(tmp_path)
    remembered = await _agents_loop(tmp_path, None)
    assert remembered == await _agents_loop(tmp_path, ImageMemo(0))
    assert remembered == await _agents_loop(tmp_path, ImageMemo(entries=3))
    assert len(remembered) == 2 * TURNS


# --- LangChain -----------------------------------------------------------------------


async def _langchain_loop(folder: Path, model: str, memo: ImageMemo | None) -> list[str]:
    """20 turns of ``create_agent`` with the middleware, its chat model a double of
    Anthropic's type named ``model``; each request's messages as the chat model gets
    them."""
    from langchain.agents import create_agent
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    from visus.integrations.langchain import VisionMiddleware

    sent: list[str] = []

    class Double(BaseChatModel):
        model_name: str = model

        @property
        def _llm_type(self) -> str:
            return "anthropic-chat"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        def _generate(self, messages: list[Any], *a: Any, **k: Any) -> ChatResult:
            # All but the message ids LangChain draws at random.
            dumped = [m.model_dump(exclude={"id"}) for m in messages]
            sent.append(json.dumps(dumped, sort_keys=True))
            last = messages[-1]
            if isinstance(last, HumanMessage):
                call = {"name": "view", "args": {"path": last.content}, "id": f"c{len(messages)}"}
                reply = AIMessage(content="", tool_calls=[call])
            else:
                reply = AIMessage(content="seen")
            return ChatResult(generations=[ChatGeneration(message=reply)])

    vision = VisionMiddleware(roots=[folder], data=folder / "data")
    if memo is not None:
        vision.core.memo = memo
    agent = create_agent(Double(), tools=[], middleware=[vision])
    history: list[Any] = []
    for turn in range(1, TURNS + 1):
        state = {"messages": [*history, {"role": "user", "content": f"shot{turn}.png"}]}
        history = (await agent.ainvoke(state))["messages"]
    return sent


# A model with a count window (old images become descriptors) and an append-only one.
MODELS = ("claude-sonnet-4-6", "claude-opus-5-5")


@pytest.mark.parametrize("model", MODELS)
async def test_langchain_probes_and_decodes_each_image_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: str
) -> None:
    pytest.importorskip("langchain")
    distinct = _shots(tmp_path)
    probes = Counted(monkeypatch, media, "probe")
    decodes = Counted(monkeypatch, blocks, "_decoded")
    await _langchain_loop(tmp_path, model, None)
    assert max(decodes.calls.values()) == 1, decodes.calls
    assert decodes.total == distinct
    assert probes.total <= 2 * distinct, probes.calls
    assert max(probes.calls.values()) <= 2


@pytest.mark.parametrize("model", MODELS)
async def test_langchain_sends_the_same_bytes_with_or_without_the_memo(
    tmp_path: Path, model: str
) -> None:
    pytest.importorskip("langchain")
    _shots(tmp_path)
    remembered = await _langchain_loop(tmp_path, model, None)
    assert remembered == await _langchain_loop(tmp_path, model, ImageMemo(0))
    assert remembered == await _langchain_loop(tmp_path, model, ImageMemo(entries=3))
    assert len(remembered) == 2 * TURNS


# --- the bounds ----------------------------------------------------------------------


def test_the_memo_holds_at_most_its_entries_and_bytes() -> None:
    memo = ImageMemo(entries=4, budget=10_000)
    texts = [base64.b64encode(bytes([n]) * 3000).decode() for n in range(20)]
    for text in texts:
        data = memo.decoded(text, base64.b64decode)
        assert data is not None
        memo.digest(data)
    tables: list[Lru[Any, Any]] = [memo._decoded, memo._digests]
    for table in tables:
        assert len(table) <= 4
        assert table.held <= 10_000
    # The newest stay, the oldest left.
    assert memo.decoded(texts[-1], lambda _: None) is not None
    assert memo.decoded(texts[0], lambda _: None) is None
