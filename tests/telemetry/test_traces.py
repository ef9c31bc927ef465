"""A real turn's spans, captured by the OpenTelemetry SDK: one per turn, model call and
tool call, attributes named as the GenAI conventions spell them (checked against the
installed ``opentelemetry-semantic-conventions``), images by digest and never as
base64, text only when content capture is on."""

from __future__ import annotations

import io
import json
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes
from opentelemetry.semconv.attributes import error_attributes
from PIL import Image

from tests.telemetry.conftest import Captured
from visus.agent import Agent, build_agent
from visus.providers import ProviderSettings
from visus.reference.server import serve_in_background
from visus.retention import RetentionPolicy
from visus.telemetry import names, traces

DATA = Path(__file__).parent / "data"
#: Every ``gen_ai.*`` (and ``error.*``) name the conventions define.
CONVENTIONS = {
    v for k, v in vars(gen_ai_attributes).items() if k.startswith("GEN_AI_") and isinstance(v, str)
} | {error_attributes.ERROR_TYPE}
#: A run of base64 long enough to hold an image (a PNG's base64 starts iVBORw0KGgo).
BASE64_RUN = re.compile(r"[A-Za-z0-9+/]{120,}")


@pytest.fixture(scope="module")
def reference_url() -> Iterator[str]:
    with serve_in_background() as url:
        yield url


@pytest.fixture
async def agent(reference_url: str, tmp_path: Path) -> AsyncIterator[Agent]:
    work = tmp_path / "work"
    work.mkdir()
    for i, color in enumerate(("red", "blue", "green")):
        buf = io.BytesIO()
        Image.new("RGB", (900, 600), color).save(buf, "PNG")
        (work / f"shot{i}.png").write_bytes(buf.getvalue())
    made = build_agent(
        "reference:anthropic",
        data=tmp_path / "data",
        roots=[work],
        settings=ProviderSettings(reference_url=reference_url, backoff_base=0.01, env={}),
        policy=RetentionPolicy(live_turns=1, live_images=1, image_chunk=1),
    )
    yield made
    await made.aclose()


def _call(path: str) -> str:
    return "call view " + json.dumps({"path": path})


def _dumped(captured: Captured) -> str:
    return "\n".join(s.to_json() for s in captured.spans)


async def test_a_turn_is_one_span_with_its_model_and_tool_calls(
    agent: Agent, captured: Captured
) -> None:
    await agent.run_turn("s1", _call("shot0.png"))
    (turn,) = captured.named("invoke_agent")
    calls = captured.named("chat ")
    (tool,) = captured.named("execute_tool")
    assert len(calls) == 2  # the view call, then the answer
    assert turn.attributes is not None
    assert tool.attributes is not None
    assert turn.attributes[names.OPERATION] == "invoke_agent"
    assert turn.attributes[names.CONVERSATION] == "s1"
    assert turn.attributes[names.STOPPED] == "answer"
    for call in calls:
        assert call.parent is not None
        assert call.parent.span_id == turn.context.span_id
        assert call.attributes is not None
        assert call.attributes[names.OPERATION] == "chat"
        assert call.attributes[names.REQUEST_MODEL] == agent.model.name
        assert call.attributes[names.PROVIDER] == "reference"
        assert call.attributes[names.INPUT_TOKENS] > 0
        assert names.COST_USD in call.attributes
    assert calls[0].attributes is not None
    assert calls[0].attributes[names.FINISH_REASONS] == ("tool_call",)
    assert tool.parent is not None
    assert tool.parent.span_id == turn.context.span_id
    assert tool.attributes[names.TOOL_NAME] == "view"
    assert tool.attributes[names.VIEW_SOURCE] == "shot0.png"
    assert str(tool.attributes[names.VIEW_DIGEST]).startswith("sha256:")
    assert tool.attributes[names.VIEW_BYTES] > 0
    assert tool.attributes[names.VIEW_TOKENS] > 0
    # Without content capture: no messages, no arguments, no results.
    dumped = _dumped(captured)
    for opt_in in (names.INPUT_MESSAGES, names.OUTPUT_MESSAGES, names.TOOL_ARGUMENTS):
        assert opt_in not in dumped
    assert not BASE64_RUN.search(dumped)


async def test_attribute_names_are_the_conventions_own(agent: Agent, captured: Captured) -> None:
    captured.on(content=True)
    await agent.run_turn("s1", _call("shot0.png"))
    used = {k for s in captured.spans for k in (s.attributes or {})}
    ours = {k for k in used if k.startswith(("gen_ai.", "error."))}
    assert ours <= CONVENTIONS, sorted(ours - CONVENTIONS)
    assert {k for k in used if not k.startswith(("gen_ai.", "error."))} <= {
        v for k, v in vars(names).items() if isinstance(v, str) and v.startswith("visus.")
    }
    # The whole set the agent's spans rely on is there.
    for key in (names.INPUT_TOKENS, names.CACHE_READ_TOKENS, names.TOOL_CALL_ID):
        assert key in used


async def test_content_capture_names_images_by_digest_never_base64(
    agent: Agent, captured: Captured, tmp_path: Path
) -> None:
    captured.on(content=True)
    await agent.run_turn("s1", _call("shot0.png"))
    last = captured.named("chat ")[-1]
    assert last.attributes is not None
    sent = json.loads(str(last.attributes[names.INPUT_MESSAGES]))
    schema = json.loads((DATA / "gen-ai-input-messages.json").read_text())
    jsonschema.validate(sent, schema)
    uri_part = {"$defs": schema["$defs"], "$ref": "#/$defs/UriPart"}
    images = [p for m in sent for p in _parts(m) if p.get("modality") == "image"]
    assert images, sent
    for part in images:
        jsonschema.validate(part, uri_part)
        assert re.fullmatch(r"sha256:[0-9a-f]{64}", part["uri"])
    out = json.loads(str(last.attributes[names.OUTPUT_MESSAGES]))
    jsonschema.validate(out, json.loads((DATA / "gen-ai-output-messages.json").read_text()))
    assert "call view" in str(sent)  # the user's words, since the operator turned it on
    assert not BASE64_RUN.search(_dumped(captured))
    png = (tmp_path / "work" / "shot0.png").read_bytes()
    import base64

    assert base64.b64encode(png)[:40].decode() not in _dumped(captured)


def _parts(message: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for part in message["parts"]:
        found.append(part)
        if part["type"] == "tool_call_response":
            found += part["response"]
    return found


async def test_retention_events_name_what_left_and_what_came_back(
    agent: Agent, captured: Captured
) -> None:
    for i in range(3):
        await agent.run_turn("s1", _call(f"shot{i}.png"))
    digests = [
        str(s.attributes[names.VIEW_DIGEST])
        for s in captured.named("execute_tool")
        if s.attributes is not None
    ]
    turns = captured.named("invoke_agent")
    evicted = {
        ref
        for t in turns
        for e in t.events
        if e.name == names.RETENTION_EVENT and e.attributes
        for ref in e.attributes[names.EVICTED]  # type: ignore[union-attr]
    }
    assert digests[0] in evicted  # live_images=1: the first screen left for the next
    # Seeing it again by digest is a re-view.
    await agent.run_turn("s1", _call(digests[0]))
    again = captured.named("execute_tool")[-1]
    assert again.attributes is not None
    assert again.attributes[names.VIEW_REVIEWED] is True


async def test_a_failed_tool_call_and_traces_off(agent: Agent, captured: Captured) -> None:
    await agent.run_turn("s1", _call("missing.png"))
    (tool,) = captured.named("execute_tool")
    assert tool.attributes is not None
    assert tool.attributes[names.ERROR_TYPE] == "tool_error"
    traces.use(None)
    before = len(captured.spans)
    await agent.run_turn("s1", _call("shot0.png"))
    assert len(captured.spans) == before
    assert traces.span("x", {}) is traces.span("y", {})  # one shared no-op


def test_configure_reads_the_standard_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not traces.configure({"OTEL_TRACES_EXPORTER": "none"})
    assert traces.configure({"OTEL_TRACES_EXPORTER": "console"})
    assert traces.enabled()
    assert not traces.capture_content()
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true",
    }
    assert traces.configure(env)
    assert traces.capture_content()
    assert not traces.configure({**env, "OTEL_SDK_DISABLED": "true"})
    assert not traces.enabled()


async def test_mcp_tool_calls_are_spans_too(captured: Captured, tmp_path: Path) -> None:
    """visus's MCP server (``visus mcp``, ``/mcp``): a span per tool call, a refusal
    marked as an error."""
    from mcp import Client

    from tests.tether.doubles import Factory
    from visus.mcp_server import build_server
    from visus.tether.client import TetherClient
    from visus.tether.server import create_app

    buf = io.BytesIO()
    Image.new("RGB", (300, 200), "red").save(buf, "PNG")
    (tmp_path / "a.png").write_bytes(buf.getvalue())
    app = create_app(data_dir=tmp_path / "data", runner_factory=Factory())
    tc = TetherClient("http://127.0.0.1", transport=httpx.ASGITransport(app=app))
    server = build_server(tc, roots=[tmp_path])
    async with Client(server, mode="legacy") as client:
        await client.call_tool("view", {"path": "a.png"})
        await client.call_tool("view", {"path": "missing.png"})
    await tc.aclose()
    await app.state.registry.aclose()
    seen, missing = captured.named("execute_tool view")
    assert seen.attributes is not None
    assert missing.attributes is not None
    assert names.ERROR_TYPE not in seen.attributes
    assert missing.attributes[names.ERROR_TYPE] == "tool_error"
    assert not BASE64_RUN.search(_dumped(captured))


async def test_integration_tool_calls_are_spans(captured: Captured, tmp_path: Path) -> None:
    """The integrations' view (pydantic-ai, the Agents SDK, LangChain all call it): the
    framework traces its own model calls, visus the tools it lends."""
    from visus.agent.options import VisionOptions
    from visus.integrations.core import VisionCore
    from visus.models import get_model

    buf = io.BytesIO()
    Image.new("RGB", (3000, 2000), "blue").save(buf, "PNG")
    (tmp_path / "big.png").write_bytes(buf.getvalue())
    core = VisionCore(VisionOptions(roots=(tmp_path,), data=tmp_path / "data"))
    await core.call("view", {"path": "big.png"}, get_model("claude-sonnet-4-6"))
    (tool,) = captured.named("execute_tool view")
    assert tool.attributes is not None
    assert tool.attributes[names.VIEW_SOURCE] == "big.png"
    assert tool.attributes[names.VIEW_WIDTH] < 3000  # fitted for the model
    assert tool.attributes[names.VIEW_TOKENS] > 0


async def test_a_tether_turn_carries_its_request_id(agent: Agent, captured: Captured) -> None:
    from visus.telemetry.logs import requested

    with requested("7:m-abc"):  # what app.AgentRunner sets for a tether turn
        await agent.run_turn("s1", "hello", request_id="7:m-abc")
    (turn,) = captured.named("invoke_agent")
    assert turn.attributes is not None
    assert turn.attributes[names.REQUEST_ID] == "7:m-abc"
    for call in captured.named("chat "):
        assert call.attributes is not None
        assert call.attributes[names.REQUEST_ID] == "7:m-abc"


def test_visus_run_traces_when_the_environment_asks(tmp_path: Path, reference_url: str) -> None:
    """The standard variables alone turn traces on for a command (console exporter)."""
    import os
    import subprocess
    import sys

    (tmp_path / "empty.toml").write_text("")
    env = {
        **os.environ,
        "OTEL_TRACES_EXPORTER": "console",
        "OTEL_SERVICE_NAME": "visus-test",
        "VISUS_DATA": str(tmp_path / "data"),
        "VISUS_REFERENCE_URL": reference_url,
        "VISUS_CONFIG": str(tmp_path / "empty.toml"),
    }
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "VISUS_DEFAULT_MODEL"):
        env.pop(key, None)
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from visus.cli import main; main()",
            "run",
            "--model",
            "reference",
            "hello",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert '"name": "invoke_agent visus"' in done.stdout
    assert '"service.name": "visus-test"' in done.stdout
    assert '"gen_ai.operation.name": "chat"' in done.stdout


async def test_the_agent_counts_the_images_it_fitted(agent: Agent, tmp_path: Path) -> None:
    """``visus_agent_images_total{event="fitted"}``: a view sent smaller than its source
    counts, one sent as it is (or a zoom sent 1:1) does not."""
    from visus.telemetry.metrics import REGISTRY

    def fitted() -> float:
        found = REGISTRY.get_sample_value("visus_agent_images_total", {"event": "fitted"})
        return found or 0.0

    buf = io.BytesIO()
    Image.new("RGB", (4000, 3000), "purple").save(buf, "PNG")
    (tmp_path / "work" / "big.png").write_bytes(buf.getvalue())
    before = fitted()
    await agent.run_turn("s1", _call("shot0.png"))  # 900x600: sent as it is
    assert fitted() == before
    await agent.run_turn("s1", _call("big.png"))
    assert fitted() == before + 1
    zoom = "call view " + json.dumps({"path": "big.png", "region": [0, 0, 400, 300]})
    await agent.run_turn("s1", zoom)
    assert fitted() == before + 1
