"""What a visus integration adds to a framework's step, at turn 1 and turn 50.

Each framework runs its real agent loop against an in-process model double that
answers at once (pydantic-ai's ``FunctionModel``; for the Agents SDK a ``Model``
subclass; for LangChain a ``BaseChatModel`` subclass in
``create_agent``): on a turn's first step it calls ``view`` on that turn's screenshot
(a 1568x733 UI-like PNG), on the second it answers. The baseline, measured in the
same run on the same screenshots and histories, is the bare framework with the tool
a user writes without visus: read the file and return its bytes as the framework's
image type (no fitting, no blob store, no retention; every old image stays in every
request). The integration's turn runs visus's view (decode, fit, encode, blob put)
and its per-request retention over the whole history.

The models the doubles are named decide retention: pydantic-ai's and LangChain's are
claude-sonnet-4-6 (the count window: at turn 50 a few images live, the others
descriptors); the Agents SDK's names none, so the SDK's default runs (gpt-5.6-luna,
which binds its reasoning to the history), whose retention is append-only: at turn 50
all 49 earlier screenshots stay live in every request, the bigger case. Each image is
decoded, hashed and probed once per integration (``visus.integrations.memo``), so a
request's cost past the bare framework's follows the images it has not met.

Reported: median time per step (a turn is two steps) over repeated turns at turn 1
(empty history) and turn 50 (49 earlier turns, one image each), bare vs visus, and
the difference.

Run: ``.venv/bin/python -m benchmarks integrations``
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from agents import (
    Agent as SdkAgent,
)
from agents import (
    Model,
    ModelResponse,
    RunConfig,
    Runner,
    ToolOutputImage,
    Usage,
    function_tool,
    set_tracing_disabled,
)
from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.messages import ToolMessage as LcToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool as lc_tool
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)
from PIL import Image, ImageDraw
from pydantic_ai import Agent, BinaryImage
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.messages import ModelResponse as PaiResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel

from visus.integrations.langchain import VisionMiddleware
from visus.integrations.openai_agents import Vision as AgentsVision
from visus.integrations.pydantic_ai import Vision

REPEATS = 7
TURNS = (1, 50)


def _screenshot(path: Path, seed: int) -> None:
    im = Image.new("RGB", (1568, 733), (250, 250, 250))
    draw = ImageDraw.Draw(im)
    for row in range(30):
        y = 10 + row * 24
        draw.rectangle((10, y, 1558, y + 18), outline=(200, 200, 200))
        draw.text(
            (16, y + 3),
            f"row {row} item {seed * 31 + row} status ok value {row * seed}",
            fill=(20, 20, 20),
        )
    buf = io.BytesIO()
    im.save(buf, "PNG")
    path.write_bytes(buf.getvalue())


async def _timed(run: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> float:
    start = time.perf_counter()
    await run(*args, **kwargs)
    return (time.perf_counter() - start) / 2  # two steps a turn


# --- pydantic-ai -------------------------------------------------------------------


def _pydantic_ai(work: Path) -> dict[tuple[str, int], float]:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> PaiResponse:
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        if any(isinstance(p, ToolReturnPart) for p in last.parts):
            return PaiResponse(parts=[TextPart("seen")])
        prompt = next(p for p in last.parts if isinstance(p, UserPromptPart))
        return PaiResponse(parts=[ToolCallPart("view", {"path": str(prompt.content)})])

    model = FunctionModel(respond, model_name="claude-sonnet-4-6")
    bare = Agent(model)

    @bare.tool_plain
    def view(path: str) -> BinaryImage:
        return BinaryImage(data=(work / path).read_bytes(), media_type="image/png")

    vision = Vision(roots=[work], data=work / "data")
    agents = {"bare": bare, "visus": Agent(model, capabilities=[vision])}
    out: dict[tuple[str, int], float] = {}

    async def go() -> None:
        for name, agent in agents.items():
            history: list[ModelMessage] = []
            for turn in range(1, max(TURNS) + 1):
                if turn in TURNS:
                    times = [
                        await _timed(agent.run, f"shot{turn}.png", message_history=history)
                        for _ in range(REPEATS)
                    ]
                    out[(name, turn)] = statistics.median(times)
                history = (
                    await agent.run(f"shot{turn}.png", message_history=history)
                ).all_messages()

    asyncio.run(go())
    return out


# --- OpenAI Agents SDK -------------------------------------------------------------


def _openai_agents(work: Path) -> dict[tuple[str, int], float]:
    set_tracing_disabled(True)

    class Double(Model):
        """Answers at once: view the prompt's file, then a short answer."""

        async def get_response(
            self, system_instructions: Any, input: Any, *a: Any, **k: Any
        ) -> ModelResponse:
            items = [input] if isinstance(input, str) else input
            last = items[-1]
            if (
                isinstance(last, dict)
                and last.get("role") == "user"
                and isinstance(last.get("content"), str)
            ):
                args = json.dumps({"path": last["content"]})
                output: list[Any] = [
                    ResponseFunctionToolCall(
                        type="function_call", call_id=f"c{len(items)}", name="view", arguments=args
                    )
                ]
            else:
                text = ResponseOutputText(type="output_text", text="seen", annotations=[])
                output = [
                    ResponseOutputMessage(
                        id="m", type="message", role="assistant", status="completed", content=[text]
                    )
                ]
            return ModelResponse(output=output, usage=Usage(), response_id=None)

        def stream_response(self, *a: Any, **k: Any) -> AsyncIterator[Any]:
            raise NotImplementedError

    @function_tool
    def view(path: str) -> ToolOutputImage:
        """See an image."""
        data = base64.b64encode((work / path).read_bytes()).decode()
        return ToolOutputImage(image_url=f"data:image/png;base64,{data}")

    vision = AgentsVision(roots=[work], data=work / "data")
    runs = {
        "bare": (SdkAgent(name="a", model=Double(), tools=[view]), RunConfig()),
        "visus": (
            SdkAgent(name="a", model=vision.model(Double()), tools=vision.tools),
            vision.run_config(),
        ),
    }
    out: dict[tuple[str, int], float] = {}

    async def go() -> None:
        for name, (agent, config) in runs.items():
            history: list[Any] = []
            for turn in range(1, max(TURNS) + 1):
                items = [*history, {"role": "user", "content": f"shot{turn}.png"}]
                if turn in TURNS:
                    times = [
                        await _timed(Runner.run, agent, items, run_config=config)
                        for _ in range(REPEATS)
                    ]
                    out[(name, turn)] = statistics.median(times)
                history = (await Runner.run(agent, items, run_config=config)).to_input_list()

    asyncio.run(go())
    return out


# --- LangChain ---------------------------------------------------------------------


class _LcDouble(BaseChatModel):
    """Answers at once: view the prompt's file, then a short answer."""

    model_name: str = "claude-sonnet-4-6"

    @property
    def _llm_type(self) -> str:
        return "anthropic-chat"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **k: Any
    ) -> ChatResult:
        last = messages[-1]
        if isinstance(last, LcToolMessage) or not isinstance(last, HumanMessage):
            reply = AIMessage(content="seen")
        else:
            call = {"name": "view", "args": {"path": str(last.content)}, "id": f"c{len(messages)}"}
            reply = AIMessage(content="", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=reply)])


def _langchain(work: Path) -> dict[tuple[str, int], float]:
    @lc_tool
    def view(path: str) -> list[dict[str, Any]]:
        """See an image file."""
        data = base64.b64encode((work / path).read_bytes()).decode()
        return [{"type": "image", "base64": data, "mime_type": "image/png"}]

    vision = VisionMiddleware(roots=[work], data=work / "data")
    agents = {
        "bare": create_agent(_LcDouble(), tools=[view]),
        "visus": create_agent(_LcDouble(), tools=[], middleware=[vision]),
    }
    out: dict[tuple[str, int], float] = {}

    async def go() -> None:
        for name, agent in agents.items():
            history: list[Any] = []
            for turn in range(1, max(TURNS) + 1):
                state = {"messages": [*history, {"role": "user", "content": f"shot{turn}.png"}]}
                if turn in TURNS:
                    times = [await _timed(agent.ainvoke, state) for _ in range(REPEATS)]
                    out[(name, turn)] = statistics.median(times)
                history = (await agent.ainvoke(state))["messages"]

    asyncio.run(go())
    return out


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for turn in range(1, max(TURNS) + 1):
            _screenshot(work / f"shot{turn}.png", turn)
        rows: list[str] = []
        for framework, bench in (
            ("pydantic-ai", _pydantic_ai),
            ("openai-agents", _openai_agents),
            ("langchain", _langchain),
        ):
            result = bench(work)
            for turn in TURNS:
                bare, visus = result[("bare", turn)], result[("visus", turn)]
                rows.append(
                    f"| {framework} | {turn} | {bare * 1000:.1f} ms | {visus * 1000:.1f} ms"
                    f" | {(visus - bare) * 1000:+.1f} ms |"
                )
        print("| framework | turn | bare step | with visus | added per step |")
        print("| --- | ---: | ---: | ---: | ---: |")
        print("\n".join(rows))
