"""The OpenAI Agents SDK's real Runner and OpenAI models, against the reference server."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import (
    Agent,
    OpenAIProvider,
    RunConfig,
    Runner,
    SQLiteSession,
    ToolOutputImage,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

from tests.integrations.conftest import (
    assert_view_descriptor,
    elided_digest,
    enlarged,
    grid,
    seen,
    view_call,
)
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
    session = VisionSession(SQLiteSession("s", db), vision.core.blobs)
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
    assert vision.core.blobs.get(refs[0].split("sha256:")[1]) == png  # stored once, intact


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
    import base64

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
