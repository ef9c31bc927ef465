"""pydantic-ai's real agent loop and model classes, against the reference server.

The reference model perceives only real image parts, so a dropped or stringified
image fails these tests; its answer lists every image and descriptor it received.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent, ImageUrl, ToolReturn
from pydantic_ai.messages import (
    BinaryContent,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models import Model
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.google import GoogleModel
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
from pydantic_ai.providers.anthropic import AnthropicProvider
from pydantic_ai.providers.google import GoogleProvider
from pydantic_ai.providers.openai import OpenAIProvider

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
from visus.integrations.core import CONSERVATIVE, VisionWarning
from visus.integrations.pydantic_ai import Vision
from visus.models import get_model, image_tokens
from visus.reference.grid import score_grid

WIRES = ("openai-chat", "openai-responses", "anthropic", "gemini")


def model_for(wire: str, url: str) -> Model:
    if wire == "openai-chat":
        return OpenAIChatModel(
            "reference", provider=OpenAIProvider(base_url=f"{url}/v1", api_key="k")
        )
    if wire == "openai-responses":
        return OpenAIResponsesModel(
            "reference", provider=OpenAIProvider(base_url=f"{url}/v1", api_key="k")
        )
    if wire == "anthropic":
        return AnthropicModel("reference", provider=AnthropicProvider(base_url=url, api_key="k"))
    assert wire == "gemini"
    return GoogleModel("reference", provider=GoogleProvider(base_url=url, api_key="k"))


def _returns(messages: list[ModelMessage]) -> list[Any]:
    """The content of every tool return, in order."""
    return [p.content for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]


def _images(messages: list[ModelMessage]) -> list[BinaryContent]:
    out: list[BinaryContent] = []
    for m in messages:
        for p in m.parts:
            if isinstance(p, ToolReturnPart) and isinstance(p.content, list):
                out.extend(i for i in p.content if isinstance(i, BinaryContent))
    return out


@pytest.mark.parametrize("wire", WIRES)
async def test_view_reaches_the_model_on_every_wire_then_leaves_as_a_descriptor(
    reference_url: str, tmp_path: Path, wire: str
) -> None:
    png, expected = grid(2, 2, f"pydantic-ai-{wire}")
    (tmp_path / "grid.png").write_bytes(png)
    vision = Vision(roots=[tmp_path], data=tmp_path / "data")
    agent = Agent(model_for(wire, reference_url), capabilities=[vision])

    first = await agent.run(view_call("grid.png"))
    data = seen(first.output)
    assert len(data["images"]) == 1
    placed, coloured = score_grid(expected, data["images"][0]["words"], 2, 2)
    assert placed == 4, (expected, data["images"][0]["words"])
    assert coloured >= 3
    assert vision.last_request is not None
    assert vision.last_request.live == 1
    assert vision.last_request.live_tokens == image_tokens(get_model("reference"), 600, 260)

    # Turn 2: the image left the window; the model reads the descriptor instead.
    second = await agent.run("And now?", message_history=first.all_messages())
    data = seen(second.output)
    assert data["images"] == []
    (descriptor,) = data["descriptors"]
    # Plain text on every wire: on Gemini a text part after the function responses
    # (inside functionResponse.response, a JSON object, its quotes arrived escaped).
    assert_view_descriptor(descriptor, "grid.png", 1)
    assert vision.last_request is not None
    assert (vision.last_request.live, vision.last_request.elided) == (0, 1)

    # The framework's own history still holds the pixels, and so does the blob store.
    (kept,) = _images(second.all_messages())
    assert kept.identifier.startswith("sha256:")
    assert vision.blobs.get(kept.identifier.removeprefix("sha256:")) == kept.data


async def test_twenty_turns_keep_prompt_image_tokens_flat(
    reference_url: str, tmp_path: Path
) -> None:
    vision = Vision(roots=[tmp_path], data=tmp_path / "data")
    agent = Agent(model_for("openai-chat", reference_url), capabilities=[vision])
    spec = get_model("reference")
    history: list[ModelMessage] = []
    per_turn: list[int] = []
    # One screen, shot every turn (the same pixels under a new name): the reference
    # model reads it once, so twenty turns stay fast.
    png, expected = grid(1, 2, "pydantic-ai-shot")
    for turn in range(1, 21):
        (tmp_path / f"shot{turn}.png").write_bytes(png)
        result = await agent.run(view_call(f"shot{turn}.png"), message_history=history)
        history = result.all_messages()
        data = seen(result.output)
        # What the server received: exactly this turn's screenshot, earlier ones as text.
        assert len(data["images"]) == 1
        assert score_grid(expected, data["images"][0]["words"], 1, 2)[0] == 2
        assert len(data["descriptors"]) == turn - 1
        # Each descriptor names the digest of the pixels, the same in every turn.
        assert len(set(data["descriptors"])) <= 1
        for d in data["descriptors"]:
            assert_view_descriptor(d, f"shot{turn}.png", turn)
        per_turn.append(sum(image_tokens(spec, i["width"], i["height"]) for i in data["images"]))
    assert len(set(per_turn)) == 1, per_turn
    # Persisted history keeps all 20 images (bytes inline, digests in the blob store).
    kept = _images(history)
    assert len(kept) == 20
    assert all(vision.blobs.has(k.identifier.removeprefix("sha256:")) for k in kept)


def _calls_then_answers(
    path: str, seen_returns: list[Any], model: str = "claude-sonnet-4-6"
) -> FunctionModel:
    """A pydantic-ai FunctionModel (real agent loop, no HTTP) calling view once."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        returns = [p for p in last.parts if isinstance(p, ToolReturnPart)]
        if returns:
            seen_returns.extend(r.content for r in returns)
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart("view", {"path": path})])

    return FunctionModel(respond, model_name=model)


def test_unknown_model_gets_conservative_fit_and_one_warning(tmp_path: Path) -> None:
    Image.new("RGB", (3000, 1000), "white").save(tmp_path / "wide.png")
    returns: list[Any] = []
    vision = Vision(roots=[tmp_path], data=tmp_path / "data")
    agent = Agent(
        _calls_then_answers("wide.png", returns, "someones-private-vlm"), capabilities=[vision]
    )
    with pytest.warns(VisionWarning, match="someones-private-vlm"):
        agent.run_sync("look")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        agent.run_sync("look again")  # warned once per model, not per call
    (text, image), _ = returns
    assert "3000x1000, sent " in text
    assert isinstance(image, BinaryContent)
    with Image.open(io.BytesIO(image.data)) as im:
        assert 1500 < max(im.size) <= CONSERVATIVE.max_edge


def test_refusals_and_reach_are_visus_own(tmp_path: Path) -> None:
    outside = tmp_path.parent / f"{tmp_path.name}-outside.png"
    Image.new("RGB", (8, 8)).save(outside)
    returns: list[Any] = []
    vision = Vision(roots=[tmp_path], data=tmp_path / "data")
    Agent(_calls_then_answers(str(outside), returns), capabilities=[vision]).run_sync("x")
    Agent(_calls_then_answers("missing.png", returns), capabilities=[vision]).run_sync("x")
    outside_reach, missing = returns
    assert outside_reach.startswith("refused (outside_reach)")
    assert missing.startswith("refused (not_found)")


def test_render_capability_can_be_withheld(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello\n")
    returns: list[Any] = []
    vision = Vision(roots=[tmp_path], render=False, data=tmp_path / "data")
    Agent(_calls_then_answers("notes.txt", returns), capabilities=[vision]).run_sync("x")
    (refusal,) = returns
    assert refusal.startswith("refused (")
    assert "render" in refusal


async def test_parallel_views_on_chat_completions_arrive_in_one_user_message(
    reference_url: str, tmp_path: Path
) -> None:
    grids = [grid(1, 2, f"pydantic-ai-parallel-{i}") for i in (1, 2)]
    for i, (png, _) in enumerate(grids, 1):
        (tmp_path / f"g{i}.png").write_bytes(png)
    vision = Vision(roots=[tmp_path], data=tmp_path / "data")
    agent = Agent(model_for("openai-chat", reference_url), capabilities=[vision])
    result = await agent.run(f"{view_call('g1.png')}\n{view_call('g2.png')}")
    images = seen(result.output)["images"]
    assert len(images) == 2
    placed = [
        score_grid(exp, im["words"], 1, 2)[0] for (_, exp), im in zip(grids, images, strict=True)
    ]
    assert placed == [2, 2]
    # Both tool messages stay adjacent; the images follow them in one user message.
    assert len({im["where"].split(" part")[0] for im in images}) == 1
    assert "(user)" in images[0]["where"]


@pytest.mark.parametrize("shape", ["content", "tool-return", "data-url", "bytes", "text"])
async def test_another_tools_image_is_fitted_then_elided_and_viewable_again(
    reference_url: str, tmp_path: Path, shape: str
) -> None:
    png, expected = grid(2, 2, f"pydantic-ai-own-tool-{shape}")
    big = enlarged(png, 4000)  # past the reference model's 2576 px
    vision = Vision(roots=[tmp_path], data=tmp_path / "data")
    agent = Agent(model_for("anthropic", reference_url), capabilities=[vision])

    @agent.tool_plain
    def screenshot() -> Any:
        """Take a screenshot."""
        image = BinaryContent(data=big, media_type="image/png")
        if shape == "data-url":  # AnthropicModel would send it as a URL source, refused
            return ImageUrl(url=image.data_uri)
        if shape in ("bytes", "text"):  # pydantic-ai alone sends these as text
            return big if shape == "bytes" else image.data_uri
        return [image] if shape == "content" else ToolReturn("taken", content=[image])

    first = await agent.run("call screenshot {}")
    (image,) = seen(first.output)["images"]
    assert max(image["width"], image["height"]) == get_model("reference").max_edge
    assert score_grid(expected, image["words"], 2, 2)[0] == 4

    second = await agent.run("And now?", message_history=first.all_messages())
    data = seen(second.output)
    assert data["images"] == []
    (descriptor,) = data["descriptors"]
    assert vision.last_request is not None
    assert (vision.last_request.turn, vision.last_request.elided) == (2, 1)

    again = await agent.run(
        view_call(elided_digest(descriptor)), message_history=second.all_messages()
    )
    (image,) = seen(again.output)["images"]
    assert score_grid(expected, image["words"], 2, 2)[0] == 4


async def test_another_tools_svg_is_drawn_as_a_raster(reference_url: str, tmp_path: Path) -> None:
    svg = (
        b'<svg xmlns="http://www.w3.org/2000/svg" width="600" height="200">'
        b'<rect width="600" height="200" fill="white"/>'
        b'<text x="40" y="130" font-size="80" font-family="DejaVu Sans">HARBOR</text></svg>'
    )
    vision = Vision(roots=[tmp_path], data=tmp_path / "data")
    agent = Agent(model_for("anthropic", reference_url), capabilities=[vision])

    @agent.tool_plain
    def chart() -> BinaryContent:
        """Draw the chart."""
        return BinaryContent(data=svg, media_type="image/svg+xml")  # Anthropic refuses this

    result = await agent.run("call chart {}")
    (image,) = seen(result.output)["images"]
    assert [w["text"] for w in image["words"]] == ["HARBOR"]


def test_a_digest_reaches_only_images_of_the_conversation_asking(tmp_path: Path) -> None:
    Image.new("RGB", (64, 48), "red").save(tmp_path / "a.png")
    vision = Vision(roots=[tmp_path], data=tmp_path / "data")
    returns: list[Any] = []
    mine = Agent(_calls_then_answers("a.png", returns), capabilities=[vision]).run_sync("x")
    (_, image) = returns.pop()
    digest = image.identifier.removeprefix("sha256:")
    for ref in (f"sha256:{digest}", f"sha256:{digest[:12]}"):
        Agent(_calls_then_answers(ref, returns), capabilities=[vision]).run_sync("y")
        assert returns.pop().startswith("refused (not_found)"), ref
    # The conversation that holds it can have it again, by a prefix too.
    agent = Agent(_calls_then_answers(f"sha256:{digest[:12]}", returns), capabilities=[vision])
    agent.run_sync("again", message_history=mine.all_messages())
    (_, again) = returns.pop()
    assert again.data == image.data


def test_gc_keeps_what_the_framework_history_still_holds(tmp_path: Path) -> None:
    Image.new("RGB", (64, 48), "red").save(tmp_path / "a.png")
    vision = Vision(roots=[tmp_path], data=tmp_path / "data")
    returns: list[Any] = []
    mine = Agent(_calls_then_answers("a.png", returns), capabilities=[vision]).run_sync("x")
    (_, image) = returns.pop()
    collect_garbage(tmp_path / "data")
    # The history names the image by digest (its descriptor will too): still there.
    ref = image.identifier[:23]
    agent = Agent(_calls_then_answers(ref, returns), capabilities=[vision])
    agent.run_sync("again", message_history=mine.all_messages())
    (_, again) = returns.pop()
    assert again.data == image.data


async def test_a_descriptor_followed_after_the_file_was_overwritten_shows_what_was_seen(
    reference_url: str, tmp_path: Path
) -> None:
    vision = Vision(roots=[tmp_path], data=tmp_path / "data")
    agent = Agent(model_for("anthropic", reference_url), capabilities=[vision])
    history: list[ModelMessage] = []
    for n, screen in enumerate(screens("pydantic-ai"), 1):
        (tmp_path / "screen.png").write_bytes(screen[0])  # the screenshot tool overwrote it
        result = await agent.run(view_call("screen.png"), message_history=history)
        history = result.all_messages()
        (image,) = seen(result.output)["images"]
        assert shows(image, screen), n
    (text, _) = _returns(history)[-1]
    assert len(digests_named(text)) == 1
    # Turn 1's descriptor, followed as written, shows turn 1's screen, not turn 4's.
    first = seen(result.output)["descriptors"][0]
    assert_view_descriptor(first, "screen.png", 1)
    again = await agent.run(view_call(followed(first)), message_history=history)
    (image,) = seen(again.output)["images"]
    assert shows(image, screens("pydantic-ai")[0])


async def test_view_zooms_into_a_region_the_plain_view_shrank_past_reading(
    reference_url: str, tmp_path: Path
) -> None:
    from tests.integrations.conftest import words_seen, zoom_call
    from tests.zoomshot import REGION, WORDS, write_screen

    write_screen(tmp_path, width=3840, height=2160)
    vision = Vision(roots=[tmp_path], data=tmp_path / "data")
    agent = Agent(model_for("anthropic", reference_url), capabilities=[vision])
    first = await agent.run(view_call("screen.png"))
    assert not set(WORDS) & words_seen(first.output)
    second = await agent.run(zoom_call("screen.png", REGION), message_history=first.all_messages())
    assert set(WORDS) <= words_seen(second.output)


async def test_a_zoomed_view_is_named_with_its_region_once_it_leaves(
    reference_url: str, tmp_path: Path
) -> None:
    """The descriptor of a zoom names the region as visus's own agent's does, and a plain
    view of the same unchanged file after a zoom is not called a change."""
    from tests.integrations.conftest import assert_zoom_left, zoom_call
    from tests.zoomshot import REGION, write_screen

    write_screen(tmp_path, width=3840, height=2160)
    vision = Vision(roots=[tmp_path], data=tmp_path / "data")
    agent = Agent(model_for("anthropic", reference_url), capabilities=[vision])
    first = await agent.run(zoom_call("screen.png", REGION))
    second = await agent.run(view_call("screen.png"), message_history=first.all_messages())
    (text, _) = _returns(second.all_messages())[-1]
    (descriptor,) = seen(second.output)["descriptors"]
    assert_zoom_left(text, descriptor)
