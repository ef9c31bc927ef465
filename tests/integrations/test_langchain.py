"""LangChain v1's real create_agent loop and chat models, against the reference server."""

from __future__ import annotations

import asyncio
import base64
import warnings
from pathlib import Path
from typing import Any

import openai
import pytest
from PIL import Image

pytest.importorskip("langchain")

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_anthropic import ChatAnthropic
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AnyMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from tests.integrations.conftest import (
    assert_view_descriptor,
    collect_garbage,
    digests_named,
    elided_digest,
    enlarged,
    followed,
    grid,
    screens,
    seen,
    shows,
    view_call,
)
from visus import media
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
    assert all(vision.blobs.has(m.artifact["visus"]["digest"]) for m in tools)
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


class _BothAsked(AgentMiddleware):
    """Holds each agent's reply until both models were called: the second request
    is prepared before the first agent's tool runs, as when two agents share a
    process and their calls interleave."""

    def __init__(self) -> None:
        super().__init__()
        self.barrier = asyncio.Barrier(2)

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        response = await handler(request)
        if not any(isinstance(m, ToolMessage) for m in request.messages):
            await asyncio.wait_for(self.barrier.wait(), 30)
        return response


async def test_one_middleware_fits_each_agents_images_for_its_own_model(
    reference_url: str, tmp_path: Path, models: list[BaseChatModel]
) -> None:
    Image.new("RGB", (3000, 1000), "white").save(tmp_path / "wide.png")
    vision = VisionMiddleware(roots=[tmp_path], data=tmp_path / "data")
    both = _BothAsked()
    claude = ChatAnthropic(model="claude-sonnet-4-6", base_url=reference_url, api_key="k")  # type: ignore[call-arg]
    gpt = ChatOpenAI(model="gpt-4.1", base_url=f"{reference_url}/v1", api_key="k")  # type: ignore[arg-type]
    models += [claude, gpt]
    agents = [create_agent(m, tools=[], middleware=[both, vision]) for m in (claude, gpt)]
    prompt = {"messages": [_user(view_call("wide.png"))]}
    states = await asyncio.gather(*(a.ainvoke(prompt) for a in agents))
    for state, name in zip(states, ("anthropic:claude-sonnet-4-6", "openai:gpt-4.1"), strict=True):
        (image,) = seen(state["messages"][-1].content)["images"]
        fitted = media.fit((tmp_path / "wide.png").read_bytes(), get_model(name).profile())
        assert (image["width"], image["height"]) == (fitted.width, fitted.height), name
        (tool,) = [m for m in state["messages"] if isinstance(m, ToolMessage)]
        assert f"sent {fitted.width}x{fitted.height}" in tool.content[0]["text"]


async def _viewed_red(
    reference_url: str, tmp_path: Path, models: list[BaseChatModel]
) -> tuple[Any, list[AnyMessage], str]:
    """An agent, the state of a conversation that viewed a small red image, its digest."""
    Image.new("RGB", (64, 48), "red").save(tmp_path / "a.png")
    vision = VisionMiddleware(roots=[tmp_path], data=tmp_path / "data")
    agent = create_agent(
        model_for("openai-chat", reference_url, models), tools=[], middleware=[vision]
    )
    state = await agent.ainvoke({"messages": [_user(view_call("a.png"))]})
    (tool,) = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    return agent, state["messages"], tool.artifact["visus"]["digest"]


async def _view_again(agent: Any, messages: list[AnyMessage], ref: str) -> dict[str, Any]:
    """What the model received after ``view(ref)`` in the conversation ``messages``."""
    again = await agent.ainvoke({"messages": [*messages, _user(view_call(ref))]})
    (image,) = seen(again["messages"][-1].content)["images"]
    assert isinstance(image, dict)
    return image


async def test_a_digest_reaches_only_images_of_the_conversation_asking(
    reference_url: str, tmp_path: Path, models: list[BaseChatModel]
) -> None:
    agent, mine, digest = await _viewed_red(reference_url, tmp_path, models)
    for ref in (f"sha256:{digest}", f"sha256:{digest[:12]}"):
        other = await agent.ainvoke({"messages": [_user(view_call(ref))]})
        (refused,) = [m for m in other["messages"] if isinstance(m, ToolMessage)]
        assert str(refused.content).startswith("refused (not_found)"), ref
    # The conversation that holds it can have it again, by a prefix too.
    image = await _view_again(agent, mine, f"sha256:{digest[:12]}")
    assert (image["width"], image["height"]) == (64, 48)


async def test_gc_keeps_what_the_graph_state_still_holds(
    reference_url: str, tmp_path: Path, models: list[BaseChatModel]
) -> None:
    agent, mine, digest = await _viewed_red(reference_url, tmp_path, models)
    collect_garbage(tmp_path / "data")
    image = await _view_again(agent, mine, f"sha256:{digest[:16]}")
    assert (image["width"], image["height"]) == (64, 48)


async def test_a_descriptor_followed_after_the_file_was_overwritten_shows_what_was_seen(
    reference_url: str, tmp_path: Path, models: list[BaseChatModel]
) -> None:
    vision = VisionMiddleware(roots=[tmp_path], data=tmp_path / "data")
    agent = create_agent(model_for("anthropic", reference_url, models), middleware=[vision])
    messages: list[Any] = []
    for n, screen in enumerate(screens("langchain"), 1):
        (tmp_path / "screen.png").write_bytes(screen[0])  # the screenshot tool overwrote it
        state = await agent.ainvoke({"messages": [*messages, _user(view_call("screen.png"))]})
        messages = state["messages"]
        (image,) = seen(messages[-1].content)["images"]
        assert shows(image, screen), n
    tool = [m for m in messages if isinstance(m, ToolMessage)][-1]
    # The last view's result names its own pixels only, never an older screen's.
    assert len(digests_named(tool.content[0]["text"])) == 1
    # Turn 1's descriptor, followed as written, shows turn 1's screen, not turn 4's.
    first = seen(messages[-1].content)["descriptors"][0]
    assert_view_descriptor(first, "screen.png", 1)
    image = await _view_again(agent, messages, followed(first))
    assert shows(image, screens("langchain")[0])


async def test_view_zooms_into_a_region_the_plain_view_shrank_past_reading(
    reference_url: str, tmp_path: Path, models: list[BaseChatModel]
) -> None:
    from tests.integrations.conftest import words_seen, zoom_call
    from tests.zoomshot import REGION, WORDS, write_screen

    write_screen(tmp_path, width=3840, height=2160)
    vision = VisionMiddleware(roots=[tmp_path], data=tmp_path / "data")
    agent = create_agent(
        model_for("anthropic", reference_url, models), tools=[], middleware=[vision]
    )
    first = await agent.ainvoke({"messages": [_user(view_call("screen.png"))]})
    assert not set(WORDS) & words_seen(first["messages"][-1].content)
    zoomed = await agent.ainvoke({"messages": [_user(zoom_call("screen.png", REGION))]})
    assert set(WORDS) <= words_seen(zoomed["messages"][-1].content)


async def test_a_zoomed_view_is_named_with_its_region_once_it_leaves(
    reference_url: str, tmp_path: Path, models: list[BaseChatModel]
) -> None:
    """The descriptor of a zoom names the region as visus's own agent's does, and a plain
    view of the same unchanged file after a zoom is not called a change."""
    from tests.integrations.conftest import assert_zoom_left, zoom_call
    from tests.zoomshot import REGION, write_screen

    write_screen(tmp_path, width=3840, height=2160)
    vision = VisionMiddleware(roots=[tmp_path], data=tmp_path / "data")
    agent = create_agent(model_for("anthropic", reference_url, models), middleware=[vision])
    first = await agent.ainvoke({"messages": [_user(zoom_call("screen.png", REGION))]})
    second = await agent.ainvoke({"messages": [*first["messages"], _user(view_call("screen.png"))]})
    tool = [m for m in second["messages"] if isinstance(m, ToolMessage)][-1]
    (descriptor,) = seen(second["messages"][-1].content)["descriptors"]
    assert_zoom_left(tool.content[0]["text"], descriptor)
