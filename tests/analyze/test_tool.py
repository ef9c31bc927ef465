"""The vision_analyze / video_analyze agent tools, alone and inside the agent loop."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.analyze.conftest import video_bytes, word_png
from visus.agent import build_agent
from visus.agent.tools import ToolContext, ToolRegistry
from visus.analyze.tool import VIDEO_ANALYZE, VISION_ANALYZE, tool_usage
from visus.config import VisusConfig, load_config
from visus.models import get_model, register_model, unregister_model
from visus.models.spec import ModelSpec
from visus.perception import Reach
from visus.providers import ProviderSettings
from visus.record.blobs import MemoryBlobStore
from visus.record.messages import ToolResult, Usage


def words(envelope_text: str) -> list[list[str]]:
    text = json.loads(envelope_text)["text"]
    block = text.split("```json\n", 1)[1].split("\n```", 1)[0]
    return [[w["text"] for w in im["words"]] for im in json.loads(block)["images"]]


def context(root: Path, cfg: VisusConfig, model: str = "reference") -> ToolContext:
    return ToolContext(
        reach=Reach([root]),
        model=get_model(model),
        blobs=MemoryBlobStore(),
        config=cfg,
    )


def test_specs_mirror_the_functions() -> None:
    props = VISION_ANALYZE.spec.parameters["properties"]
    assert set(props) == {
        "prompt",
        "file_path",
        "file_url",
        "file_base64",
        "files",
        "model",
        "format",
        "pages",
    }
    assert props["files"]["maxItems"] == 4
    assert VIDEO_ANALYZE.name == "video_analyze"
    assert set(VIDEO_ANALYZE.spec.parameters["properties"]) == {
        "file_url",
        "file_path",
        "prompt",
        "model",
    }


async def test_tool_returns_the_envelope_and_counts_usage(tmp_path: Path, cfg: VisusConfig) -> None:
    (tmp_path / "s.png").write_bytes(word_png("LANTERN"))
    ctx = context(tmp_path, cfg)
    out = await VISION_ANALYZE.run({"prompt": "Read it", "file_path": "s.png"}, ctx)
    assert not out.is_error
    envelope = json.loads(out.parts[0].text)  # type: ignore[union-attr]
    assert words(out.parts[0].text) == [["LANTERN"]]  # type: ignore[union-attr]
    assert len(ctx.tool_usage) == 1
    assert tool_usage(ctx) == Usage(envelope["input_tokens"], envelope["output_tokens"], 0.0)


async def test_tool_errors_carry_the_code(tmp_path: Path, cfg: VisusConfig) -> None:
    ctx = context(tmp_path, cfg)
    cases = {
        "FILE_NOT_FOUND": {"prompt": "?", "file_path": "missing.png"},
        "INVALID_INPUT": {"prompt": "?"},
        "URL_BLOCKED": {"prompt": "?", "file_url": "https://10.0.0.1/a.png"},
    }
    for code, args in cases.items():
        out = await VISION_ANALYZE.run(args, ctx)
        assert out.is_error
        assert out.parts[0].text.startswith(f"{code}: ")  # type: ignore[union-attr]
    bad = await VISION_ANALYZE.run({"prompt": "?", "file_path": "a", "pages": [1]}, ctx)
    assert bad.parts[0].text.startswith("INVALID_INPUT: ")  # type: ignore[union-attr]
    video = await VIDEO_ANALYZE.run({"file_path": "missing.mp4"}, ctx)
    assert video.is_error
    assert video.parts[0].text.startswith("FILE_NOT_FOUND: ")  # type: ignore[union-attr]


async def test_the_agents_model_ends_the_chain(tmp_path: Path, cfg: VisusConfig) -> None:
    (tmp_path / "s.png").write_bytes(word_png("LANTERN"))
    register_model(ModelSpec(name="blind-agent", provider="openai-compatible"))
    try:
        ctx = context(tmp_path, cfg, model="openai-compatible:blind-agent")
        out = await VISION_ANALYZE.run({"prompt": "?", "file_path": "s.png"}, ctx)
        assert out.parts[0].text.startswith("VISION_NOT_SUPPORTED: ")  # type: ignore[union-attr]
        assert "blind-agent" in out.parts[0].text  # type: ignore[union-attr]
        # An auxiliary vision model in the config takes over from the agent's model.
        aux = cfg.model_copy(
            update={
                "auxiliary": load_config(
                    env={"VISUS_AUXILIARY__VISION__MODEL": "reference"}
                ).auxiliary
            }
        )
        ctx.config = aux
        ok = await VISION_ANALYZE.run({"prompt": "?", "file_path": "s.png"}, ctx)
        assert not ok.is_error
        assert words(ok.parts[0].text) == [["LANTERN"]]  # type: ignore[union-attr]
    finally:
        unregister_model("blind-agent")


async def test_video_tool(tmp_path: Path, cfg: VisusConfig) -> None:
    (tmp_path / "v.mp4").write_bytes(video_bytes(["KETTLE", "MARBLE"]))
    ctx = context(tmp_path, cfg)
    out = await VIDEO_ANALYZE.run({"file_path": "v.mp4", "prompt": "What is at 0:01?"}, ctx)
    assert not out.is_error
    assert words(out.parts[0].text) == [["KETTLE"], ["MARBLE"]]  # type: ignore[union-attr]
    assert len(ctx.tool_usage) == 1


async def test_inside_the_agent_loop(
    tmp_path: Path, reference_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    config_file = tmp_path / "visus.toml"
    config_file.write_text(f'[providers.reference]\nbase_url = "{reference_url}"\n')
    monkeypatch.setenv("VISUS_CONFIG", str(config_file))
    work = tmp_path / "work"
    work.mkdir()
    (work / "sign.png").write_bytes(word_png("LANTERN"))
    tools = ToolRegistry.builtin()
    tools.add(VISION_ANALYZE)
    agent = build_agent(
        "reference",
        data=tmp_path / "data",
        roots=[work],
        settings=ProviderSettings(reference_url=reference_url, backoff_base=0.01, env={}),
        tools=tools,
    )
    args = json.dumps({"prompt": "What does the sign say?", "file_path": "sign.png"})
    result = await agent.run_turn("t1", f"call vision_analyze {args}")
    tool_results = [m for m in result.messages if isinstance(m, ToolResult)]
    assert [t.tool_name for t in tool_results] == ["vision_analyze"]
    assert not tool_results[0].is_error
    assert words(tool_results[0].text) == [["LANTERN"]]


async def test_the_agent_passes_its_config_and_caches_answers(
    tmp_path: Path, reference_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # visus.toml names an auxiliary vision model that does not exist: a tool that
    # reloaded it (instead of using the agent's config) would fail.
    bad = tmp_path / "visus.toml"
    bad.write_text('[auxiliary.vision]\nmodel = "openai:no-such-model-anywhere"\n')
    monkeypatch.setenv("VISUS_CONFIG", str(bad))
    work = tmp_path / "work"
    work.mkdir()
    (work / "sign.png").write_bytes(word_png("LANTERN"))
    tools = ToolRegistry.builtin()
    tools.add(VISION_ANALYZE)
    from tests.analyze.conftest import make_config

    agent = build_agent(
        "reference",
        data=tmp_path / "data",
        roots=[work],
        settings=ProviderSettings(reference_url=reference_url, backoff_base=0.01, env={}),
        tools=tools,
        config=make_config(tmp_path, reference_url),
    )
    args = json.dumps({"prompt": "What does the sign say?", "file_path": "sign.png"})
    envelopes = []
    for _ in range(2):
        result = await agent.run_turn("s", f"call vision_analyze {args}")
        out = [m for m in result.messages if isinstance(m, ToolResult) and m.turn == result.turn]
        assert not out[0].is_error, out[0].text
        envelopes.append(json.loads(out[0].text))
    await agent.aclose()
    assert [e.get("cached", False) for e in envelopes] == [False, True]
    assert words(json.dumps(envelopes[1])) == [["LANTERN"]]
