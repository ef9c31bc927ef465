"""The OpenAI Agents SDK's real Runner and OpenAI models, against the reference server."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import sqlite3
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

pytest.importorskip("agents")

from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    OpenAIProvider,
    RunConfig,
    Runner,
    SQLiteSession,
    ToolOutputImage,
    UserError,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

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
from visus.integrations.core import VisionWarning
from visus.integrations.openai_agents import Vision, VisionSession
from visus.models import get_model, image_tokens
from visus.record.blobs import MemoryBlobStore
from visus.reference.grid import score_grid

APIS = ("responses", "chat")


set_tracing_disabled(True)  # the SDK would otherwise export traces to OpenAI


@pytest.fixture
async def clients() -> AsyncIterator[list[AsyncOpenAI]]:
    """OpenAI clients made in a test, closed while its event loop still runs."""
    made: list[AsyncOpenAI] = []
    yield made
    for client in made:
        await client.close()


def provider(url: str, api: str, clients: list[AsyncOpenAI]) -> OpenAIProvider:
    client = AsyncOpenAI(base_url=f"{url}/v1", api_key="k")
    clients.append(client)
    return OpenAIProvider(openai_client=client, use_responses=api == "responses")


@pytest.mark.parametrize("api", APIS)
async def test_view_reaches_the_model_then_leaves_as_a_descriptor(
    reference_url: str, tmp_path: Path, api: str, clients: list[AsyncOpenAI]
) -> None:
    png, expected = grid(2, 2, f"agents-{api}")
    (tmp_path / "grid.png").write_bytes(png)
    vision = Vision(roots=[tmp_path], data=tmp_path / "data")
    agent = Agent(name="eyes", model="reference", tools=vision.tools)
    config = vision.run_config(model_provider=provider(reference_url, api, clients))

    first = await Runner.run(agent, view_call("grid.png"), run_config=config)
    data = seen(first.final_output)
    assert len(data["images"]) == 1
    placed, coloured = score_grid(expected, data["images"][0]["words"], 2, 2)
    assert placed == 4, (expected, data["images"][0]["words"])
    assert coloured >= 3
    assert vision.last_request is not None
    assert vision.last_request.hoisted == (1 if api == "chat" else 0)
    assert vision.last_request.live_tokens == image_tokens(get_model("reference"), 600, 260)

    items = [*first.to_input_list(), {"role": "user", "content": "And now?"}]
    second = await Runner.run(agent, items, run_config=config)
    data = seen(second.final_output)
    assert data["images"] == []
    (descriptor,) = data["descriptors"]
    assert_view_descriptor(descriptor, "grid.png", 1)
    # The run's own items still hold the image.
    outputs = [i for i in second.to_input_list() if i.get("type") == "function_call_output"]
    assert any(c.get("type") == "input_image" for c in outputs[0]["output"])


async def test_control_without_visus_chat_completions_drops_the_tool_image(
    reference_url: str, tmp_path: Path, clients: list[AsyncOpenAI]
) -> None:
    png, _ = grid(2, 2, "agents-control")
    (tmp_path / "grid.png").write_bytes(png)

    @function_tool
    def view(path: str) -> ToolOutputImage:
        """See an image file."""
        import base64

        data = (tmp_path / path).read_bytes()
        return ToolOutputImage(image_url="data:image/png;base64," + base64.b64encode(data).decode())

    agent = Agent(name="plain", model="reference", tools=[view])
    config = RunConfig(model_provider=provider(reference_url, "chat", clients))
    result = await Runner.run(agent, view_call("grid.png"), run_config=config)
    assert "I see no images" in result.final_output  # today's silent drop
    assert seen(result.final_output)["images"] == []


async def test_twenty_turns_flat_image_tokens_and_a_small_session(
    reference_url: str, tmp_path: Path, clients: list[AsyncOpenAI]
) -> None:
    vision = Vision(roots=[tmp_path], data=tmp_path / "data")
    agent = Agent(name="eyes", model="reference", tools=vision.tools)
    config = vision.run_config(model_provider=provider(reference_url, "chat", clients))
    db = tmp_path / "session.db"
    session = vision.session(SQLiteSession("s", db))
    png, expected = grid(1, 2, "agents-shot")  # one screen, shot every turn
    spec = get_model("reference")
    per_turn: list[int] = []
    for turn in range(1, 21):
        (tmp_path / f"shot{turn}.png").write_bytes(png)
        result = await Runner.run(
            agent, view_call(f"shot{turn}.png"), run_config=config, session=session
        )
        data = seen(result.final_output)
        assert len(data["images"]) == 1  # what the server received: this turn's shot only
        assert score_grid(expected, data["images"][0]["words"], 1, 2)[0] == 2
        assert len(data["descriptors"]) == turn - 1
        per_turn.append(sum(image_tokens(spec, i["width"], i["height"]) for i in data["images"]))
    assert len(set(per_turn)) == 1, per_turn

    # The session keeps every image: restored as data URLs on read...
    items = await session.get_items()
    images = [
        c
        for i in items
        if i.get("type") == "function_call_output"
        for c in i["output"]
        if c.get("type") == "input_image"
    ]
    assert len(images) == 20
    assert all(c["image_url"] == images[0]["image_url"] for c in images)
    assert images[0]["image_url"].startswith("data:image/png;base64,")
    # ...stored on disk as blob references: no base64 in the session database.
    with sqlite3.connect(db) as conn:
        rows = [json.loads(r[0]) for r in conn.execute("select message_data from agent_messages")]
    refs = [
        c["image_url"]
        for r in rows
        if r.get("type") == "function_call_output"
        for c in r["output"]
        if c.get("type") == "input_image"
    ]
    assert len(refs) == 20
    assert all(u.startswith("visus-blob:sha256:") and len(u) < 100 for u in refs)
    assert not any("base64" in json.dumps(r) for r in rows)
    assert vision.blobs.get(refs[0].split("sha256:")[1]) == png  # stored once, intact


async def test_session_with_a_lost_blob_loads_with_a_note() -> None:
    blobs = MemoryBlobStore()
    session = VisionSession(SQLiteSession("lost"), blobs)
    item: dict[str, Any] = {
        "type": "function_call_output",
        "call_id": "c1",
        "output": [{"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}],
    }
    await session.add_items([item])
    (digest,) = list(blobs.digests())
    blobs.gc(())  # the blob is gone
    (back,) = await session.get_items()
    assert back["output"] == [
        {"type": "input_text", "text": f"[image sha256:{digest} is no longer stored]"}
    ]


async def test_a_data_url_that_is_not_base64_is_kept_as_it_is(tmp_path: Path) -> None:
    svg = "data:image/svg+xml;utf8,<svg xmlns='http://www.w3.org/2000/svg'/>"
    item: dict[str, Any] = {
        "type": "function_call_output",
        "call_id": "c1",
        "output": [{"type": "input_image", "image_url": svg}],
    }
    session = VisionSession(SQLiteSession("utf8"), MemoryBlobStore())
    await session.add_items([item])
    assert await session.get_items() == [item]  # not an empty blob
    vision = Vision(roots=[tmp_path], data=tmp_path / "data")
    (sent,) = vision.model_input([item], get_model("gpt-4.1"), hoist=False)
    assert sent == item  # passed on for the provider to judge, not emptied


async def test_parallel_views_on_chat_completions_arrive_in_one_user_message(
    reference_url: str, tmp_path: Path, clients: list[AsyncOpenAI]
) -> None:
    grids = [grid(1, 2, f"agents-parallel-{i}") for i in (1, 2)]
    for i, (png, _) in enumerate(grids, 1):
        (tmp_path / f"g{i}.png").write_bytes(png)
    vision = Vision(roots=[tmp_path], data=tmp_path / "data")
    agent = Agent(name="eyes", model="reference", tools=vision.tools)
    config = vision.run_config(model_provider=provider(reference_url, "chat", clients))
    prompt = f"{view_call('g1.png')}\n{view_call('g2.png')}"
    result = await Runner.run(agent, prompt, run_config=config)
    images = seen(result.final_output)["images"]
    assert len(images) == 2
    placed = [
        score_grid(exp, im["words"], 1, 2)[0] for (_, exp), im in zip(grids, images, strict=True)
    ]
    assert placed == [2, 2]
    assert len({im["where"].split(" part")[0] for im in images}) == 1
    assert "(user)" in images[0]["where"]
    assert vision.last_request is not None
    assert vision.last_request.hoisted == 2


@pytest.mark.parametrize("shape", ["image", "text"])
@pytest.mark.parametrize("api", APIS)
async def test_another_tools_image_is_fitted_then_elided_and_viewable_again(
    reference_url: str, tmp_path: Path, api: str, shape: str, clients: list[AsyncOpenAI]
) -> None:

    png, expected = grid(2, 2, f"agents-own-tool-{api}")
    big = enlarged(png, 4000)  # past the reference model's 2576 px

    url = "data:image/png;base64," + base64.b64encode(big).decode()

    @function_tool
    def screenshot() -> ToolOutputImage | str:
        """Take a screenshot."""
        return ToolOutputImage(image_url=url) if shape == "image" else url

    vision = Vision(roots=[tmp_path], data=tmp_path / "data")
    agent = Agent(name="eyes", model="reference", tools=[*vision.tools, screenshot])
    config = vision.run_config(model_provider=provider(reference_url, api, clients))

    # Chat Completions would drop it silently without the hoist (see the control above).
    first = await Runner.run(agent, "call screenshot {}", run_config=config)
    (image,) = seen(first.final_output)["images"]
    assert max(image["width"], image["height"]) == get_model("reference").max_edge
    assert score_grid(expected, image["words"], 2, 2)[0] == 4

    items = [*first.to_input_list(), {"role": "user", "content": "And now?"}]
    second = await Runner.run(agent, items, run_config=config)
    data = seen(second.final_output)
    assert data["images"] == []
    (descriptor,) = data["descriptors"]

    items = [
        *second.to_input_list(),
        {"role": "user", "content": view_call(elided_digest(descriptor))},
    ]
    again = await Runner.run(agent, items, run_config=config)
    (image,) = seen(again.final_output)["images"]
    assert score_grid(expected, image["words"], 2, 2)[0] == 4


def test_an_agent_naming_no_model_is_fitted_for_the_sdks_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_DEFAULT_MODEL", "gpt-4o")
    vision = Vision(roots=[tmp_path], data=tmp_path / "data")
    assert vision.spec_for(None).name == "gpt-4o"


def _outputs(result: Any) -> list[Any]:
    """The tool outputs of a run, as its items hold them."""
    return [i["output"] for i in result.to_input_list() if i.get("type") == "function_call_output"]


def _eyes(
    url: str, tmp_path: Path, api: str, clients: list[AsyncOpenAI]
) -> tuple[Vision, Agent[Any], RunConfig]:
    """visus wired as documented, with a small red image at a.png to view."""
    Image.new("RGB", (64, 48), "red").save(tmp_path / "a.png")
    vision = Vision(roots=[tmp_path], data=tmp_path / "data")
    agent = Agent(name="eyes", model="reference", tools=vision.tools)
    return vision, agent, vision.run_config(model_provider=provider(url, api, clients))


async def test_a_digest_reaches_only_images_of_the_conversation_asking(
    reference_url: str, tmp_path: Path, clients: list[AsyncOpenAI]
) -> None:
    _, agent, config = _eyes(reference_url, tmp_path, "responses", clients)
    mine = await Runner.run(agent, view_call("a.png"), run_config=config)
    ((_, image),) = _outputs(mine)
    digest = hashlib.sha256(base64.b64decode(image["image_url"].split(",")[1])).hexdigest()
    for ref in (f"sha256:{digest}", f"sha256:{digest[:12]}"):
        other = await Runner.run(agent, view_call(ref), run_config=config)
        assert _outputs(other)[0].startswith("refused (not_found)"), ref
    # The conversation that holds it can have it again, by a prefix too.
    items = [*mine.to_input_list(), {"role": "user", "content": view_call(ref)}]
    again = await Runner.run(agent, items, run_config=config)
    (image,) = seen(again.final_output)["images"]
    assert (image["width"], image["height"]) == (64, 48)


async def test_gc_keeps_what_a_session_still_holds(
    reference_url: str, tmp_path: Path, clients: list[AsyncOpenAI]
) -> None:
    vision, agent, config = _eyes(reference_url, tmp_path, "chat", clients)
    session = vision.session(SQLiteSession("kept", tmp_path / "session.db"))
    await Runner.run(agent, view_call("a.png"), run_config=config, session=session)
    collect_garbage(tmp_path / "data")
    (output,) = [i["output"] for i in await session.get_items() if "output" in i]
    assert [c["type"] for c in output] == ["input_text", "input_image"], output
    with Image.open(io.BytesIO(base64.b64decode(output[1]["image_url"].split(",")[1]))) as im:
        assert im.size == (64, 48)


@pytest.mark.parametrize("wiring", ["plain-run-config", "explicit-chat-model"])
async def test_a_run_that_would_drop_the_image_fails_with_the_fix(
    reference_url: str, tmp_path: Path, wiring: str, clients: list[AsyncOpenAI]
) -> None:
    Image.new("RGB", (64, 48), "red").save(tmp_path / "a.png")
    vision = Vision(roots=[tmp_path], data=tmp_path / "data")
    chat = provider(reference_url, "chat", clients)
    if wiring == "plain-run-config":
        agent = Agent(name="eyes", model="reference", tools=vision.tools)
        config, fix = RunConfig(model_provider=chat), "run_config=vision.run_config("
    else:
        model = OpenAIChatCompletionsModel("reference", openai_client=clients[0])
        agent = Agent(name="eyes", model=model, tools=vision.tools)
        config, fix = vision.run_config(model_provider=chat), "vision.model(model)"
    with pytest.raises(UserError, match="would never see this image") as raised:
        await Runner.run(agent, view_call("a.png"), run_config=config)
    assert fix in str(raised.value)


async def test_a_run_without_retention_on_responses_warns_once(
    reference_url: str, tmp_path: Path, clients: list[AsyncOpenAI]
) -> None:
    Image.new("RGB", (64, 48), "red").save(tmp_path / "a.png")
    vision = Vision(roots=[tmp_path], data=tmp_path / "data")
    agent = Agent(name="eyes", model="reference", tools=vision.tools)
    config = RunConfig(model_provider=provider(reference_url, "responses", clients))
    with pytest.warns(VisionWarning, match="never elided"):
        first = await Runner.run(agent, view_call("a.png"), run_config=config)
    assert len(seen(first.final_output)["images"]) == 1  # Responses takes it as it is
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        await Runner.run(agent, view_call("a.png"), run_config=config)


async def test_a_descriptor_followed_after_the_file_was_overwritten_shows_what_was_seen(
    reference_url: str, tmp_path: Path, clients: list[AsyncOpenAI]
) -> None:
    vision, agent, config = _eyes(reference_url, tmp_path, "chat", clients)
    session = vision.session(SQLiteSession("screens", tmp_path / "session.db"))
    for n, screen in enumerate(screens("agents"), 1):
        (tmp_path / "screen.png").write_bytes(screen[0])  # the screenshot tool overwrote it
        result = await Runner.run(
            agent, view_call("screen.png"), run_config=config, session=session
        )
        (image,) = seen(result.final_output)["images"]
        assert shows(image, screen), n
    text, _ = _outputs(result)[-1]
    assert len(digests_named(text["text"])) == 1
    # Turn 1's descriptor, followed as written, shows turn 1's screen, not turn 4's.
    first = seen(result.final_output)["descriptors"][0]
    assert_view_descriptor(first, "screen.png", 1)
    again = await Runner.run(agent, view_call(followed(first)), run_config=config, session=session)
    (image,) = seen(again.final_output)["images"]
    assert shows(image, screens("agents")[0])


async def test_view_zooms_into_a_region_the_plain_view_shrank_past_reading(
    reference_url: str, tmp_path: Path, clients: list[AsyncOpenAI]
) -> None:
    from tests.integrations.conftest import words_seen, zoom_call
    from tests.zoomshot import REGION, WORDS, write_screen

    write_screen(tmp_path, width=3840, height=2160)
    vision = Vision(roots=[tmp_path], data=tmp_path / "data")
    agent = Agent(name="eyes", model="reference", tools=vision.tools)
    config = vision.run_config(model_provider=provider(reference_url, "responses", clients))
    first = await Runner.run(agent, view_call("screen.png"), run_config=config)
    assert not set(WORDS) & words_seen(first.final_output)
    zoomed = await Runner.run(agent, zoom_call("screen.png", REGION), run_config=config)
    assert set(WORDS) <= words_seen(zoomed.final_output)


async def test_a_zoomed_view_is_named_with_its_region_once_it_leaves(
    reference_url: str, tmp_path: Path, clients: list[AsyncOpenAI]
) -> None:
    """The descriptor of a zoom names the region as visus's own agent's does, and a plain
    view of the same unchanged file after a zoom is not called a change."""
    from tests.integrations.conftest import assert_zoom_left, zoom_call
    from tests.zoomshot import REGION, write_screen

    write_screen(tmp_path, width=3840, height=2160)
    vision = Vision(roots=[tmp_path], data=tmp_path / "data")
    agent = Agent(name="eyes", model="reference", tools=vision.tools)
    config = vision.run_config(model_provider=provider(reference_url, "responses", clients))
    first = await Runner.run(agent, zoom_call("screen.png", REGION), run_config=config)
    items = [*first.to_input_list(), {"role": "user", "content": view_call("screen.png")}]
    second = await Runner.run(agent, items, run_config=config)
    text, _ = _outputs(second)[-1]
    (descriptor,) = seen(second.final_output)["descriptors"]
    assert_zoom_left(text["text"], descriptor)
