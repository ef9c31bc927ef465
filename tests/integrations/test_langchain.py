"""LangChain v1's real create_agent loop and chat models, against the reference server."""

from __future__ import annotations

import base64
import warnings
from pathlib import Path
from typing import Any

import openai
import pytest

pytest.importorskip("langchain")

from langchain.agents import create_agent
from langchain_anthropic import ChatAnthropic
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from tests.integrations.conftest import (
    assert_view_descriptor,
    elided_digest,
    enlarged,
    grid,
    seen,
    view_call,
)
from visus.integrations.langchain import VisionMiddleware
from visus.models import get_model, image_tokens
from visus.reference.grid import score_grid

WIRES = ("openai-chat", "anthropic")


# langchain-openai shares one HTTP client between equal models (a module cache), bound
# to the event loop it first ran on: every test here runs on one loop.
pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture
def models() -> list[BaseChatModel]:
    return []


def model_for(wire: str, url: str, made: list[BaseChatModel]) -> BaseChatModel:
    model: BaseChatModel
    if wire == "openai-chat":
        model = ChatOpenAI(model="reference", base_url=f"{url}/v1", api_key="k")  # type: ignore[arg-type]
    else:
        model = ChatAnthropic(model="reference", base_url=url, api_key="k")  # type: ignore[arg-type]
    made.append(model)
    return model


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


@pytest.mark.parametrize("wire", WIRES)
async def test_view_reaches_the_model_then_leaves_as_a_descriptor(
    reference_url: str, tmp_path: Path, wire: str, models: list[BaseChatModel]
) -> None:
    png, expected = grid(2, 2, f"langchain-{wire}")
    (tmp_path / "grid.png").write_bytes(png)
    vision = VisionMiddleware(roots=[tmp_path], data=tmp_path / "data")
    agent = create_agent(model_for(wire, reference_url, models), tools=[], middleware=[vision])

    first = await agent.ainvoke({"messages": [_user(view_call("grid.png"))]})
    data = seen(first["messages"][-1].content)
    assert len(data["images"]) == 1
    placed, coloured = score_grid(expected, data["images"][0]["words"], 2, 2)
    assert placed == 4, (expected, data["images"][0]["words"])
    assert coloured >= 3
    assert vision.last_request is not None
    assert vision.last_request.hoisted == (1 if wire == "openai-chat" else 0)
    assert vision.last_request.live_tokens == image_tokens(get_model("reference"), 600, 260)

    second = await agent.ainvoke({"messages": [*first["messages"], _user("And now?")]})
    data = seen(second["messages"][-1].content)
    assert data["images"] == []
    (descriptor,) = data["descriptors"]
    assert_view_descriptor(descriptor, "grid.png", 1)
    # The graph's state still holds the image block.
    (tool,) = [m for m in second["messages"] if isinstance(m, ToolMessage)]
    assert any(b.get("type") == "image" for b in tool.content if isinstance(b, dict))


async def test_twenty_turns_keep_prompt_image_tokens_flat(
    reference_url: str, tmp_path: Path, models: list[BaseChatModel]
) -> None:
    vision = VisionMiddleware(roots=[tmp_path], data=tmp_path / "data")
    agent = create_agent(
        model_for("openai-chat", reference_url, models), tools=[], middleware=[vision]
    )
    spec = get_model("reference")
    png, expected = grid(1, 2, "langchain-shot")  # one screen, shot every turn
    messages: list[Any] = []
    per_turn: list[int] = []
    for turn in range(1, 21):
        (tmp_path / f"shot{turn}.png").write_bytes(png)
        state = await agent.ainvoke({"messages": [*messages, _user(view_call(f"shot{turn}.png"))]})
        messages = state["messages"]
        data = seen(messages[-1].content)
        assert len(data["images"]) == 1
        assert score_grid(expected, data["images"][0]["words"], 1, 2)[0] == 2
        assert len(data["descriptors"]) == turn - 1
        per_turn.append(sum(image_tokens(spec, i["width"], i["height"]) for i in data["images"]))
    assert len(set(per_turn)) == 1, per_turn
    tools = [m for m in messages if isinstance(m, ToolMessage)]
    assert len(tools) == 20
    assert all(vision.core.blobs.has(m.artifact["visus"]["digest"]) for m in tools)
    assert all(any(b.get("type") == "image" for b in m.content) for m in tools)


async def test_control_without_visus_chat_completions_refuses_the_tool_image(
    reference_url: str, tmp_path: Path, models: list[BaseChatModel]
) -> None:
    png, _ = grid(2, 2, "langchain-control")
    (tmp_path / "grid.png").write_bytes(png)

    @tool
    def view(path: str) -> list[dict[str, Any]]:
        """See an image file."""
        data = base64.b64encode((tmp_path / path).read_bytes()).decode()
        return [{"type": "image", "base64": data, "mime_type": "image/png"}]

    agent = create_agent(model_for("openai-chat", reference_url, models), tools=[view])
    # langchain-openai sends the image inside the tool message, which the wire refuses.
    with pytest.raises(openai.BadRequestError, match="only allowed for messages with role 'user'"):
        await agent.ainvoke({"messages": [_user(view_call("grid.png"))]})


@pytest.mark.parametrize("shape", ["standard", "image_url", "text"])
async def test_another_tools_image_is_hoisted_fitted_then_elided_and_viewable_again(
    reference_url: str, tmp_path: Path, shape: str, models: list[BaseChatModel]
) -> None:
    png, expected = grid(2, 2, f"langchain-own-tool-{shape}")
    b64 = base64.b64encode(enlarged(png, 4000)).decode()  # past the reference's 2576 px

    @tool
    def screenshot() -> list[dict[str, Any]] | str:
        """Take a screenshot."""
        if shape == "text":  # one data URL as the tool's text
            return f"data:image/png;base64,{b64}"
        if shape == "standard":
            return [{"type": "image", "base64": b64, "mime_type": "image/png"}]
        return [{"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64}"}}]

    vision = VisionMiddleware(roots=[tmp_path], data=tmp_path / "data")
    model = model_for("openai-chat", reference_url, models)
    agent = create_agent(model, tools=[screenshot], middleware=[vision])

    # Without the hoist, Chat Completions refuses it (see the control above).
    first = await agent.ainvoke({"messages": [_user("call screenshot {}")]})
    (image,) = seen(first["messages"][-1].content)["images"]
    assert max(image["width"], image["height"]) == get_model("reference").max_edge
    assert score_grid(expected, image["words"], 2, 2)[0] == 4

    second = await agent.ainvoke({"messages": [*first["messages"], _user("And now?")]})
    data = seen(second["messages"][-1].content)
    assert data["images"] == []
    (descriptor,) = data["descriptors"]

    messages = [*second["messages"], _user(view_call(elided_digest(descriptor)))]
    again = await agent.ainvoke({"messages": messages})
    (image,) = seen(again["messages"][-1].content)["images"]
    assert score_grid(expected, image["words"], 2, 2)[0] == 4


async def test_a_google_chat_model_is_looked_up_as_gemini(tmp_path: Path) -> None:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    class Gemini(GenericFakeChatModel):  # what ChatGoogleGenerativeAI reports of itself
        model: str = "models/gemini-2.5-flash"

        @property
        def _llm_type(self) -> str:
            return "chat-google-generative-ai"

        def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> Any:
            return {"ls_provider": "google_genai", "ls_model_name": self.model}

    vision = VisionMiddleware(roots=[tmp_path], data=tmp_path / "data")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "unknown model" warning
        spec = vision.spec_for(Gemini(messages=iter([])))
    assert (spec.provider, spec.name) == ("gemini", get_model("gemini:gemini-2.5-flash").name)
