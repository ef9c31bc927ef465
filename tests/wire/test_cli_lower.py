"""``visus lower``: a stored session, retention and lowering, printed as JSON."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from visus.cli import app
from visus.paths import blobs_dir, sessions_dir
from visus.record.blobs import FileBlobStore
from visus.record.messages import AssistantMessage, TextPart, ToolResult, UserMessage
from visus.record.sessions import SessionStore

from .corpus import BLUE, BLUE_PNG, RED, RED_PNG, call


@pytest.fixture
def data(tmp_path: Path) -> Path:
    blobs = FileBlobStore(blobs_dir(tmp_path))
    blobs.put(RED_PNG, "image/png")
    blobs.put(BLUE_PNG, "image/png")
    store = SessionStore(sessions_dir(tmp_path))
    sid = store.create("s1", meta={"system": "You can see."})
    for message in (
        UserMessage((TextPart("Look at red.png."),), turn=1),
        AssistantMessage(tool_calls=(call("call_1", "view", "red.png"),), turn=1),
        ToolResult("call_1", "view", (TextPart("red.png: 4x3"), RED), turn=1),
        AssistantMessage((TextPart("Red."),), turn=1),
        UserMessage((TextPart("Now blue.png."),), turn=2),
        AssistantMessage(tool_calls=(call("call_2", "view", "blue.png"),), turn=2),
        ToolResult("call_2", "view", (TextPart("blue.png: 3x4"), BLUE), turn=2),
    ):
        store.append(sid, message)
    run = store.create("s2", meta={"model": "gpt-4.1"})
    store.append(run, UserMessage((TextPart("hi"),), turn=1))
    return tmp_path


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["lower", *args])
    return result.exit_code, result.stdout, result.stderr


def test_prints_the_lowered_request_with_the_default_window(data: Path) -> None:
    code, out, _ = _run("s1", "--wire", "openai-chat", "--model", "gpt-4.1", "--data", str(data))
    assert code == 0
    body = json.loads(out)
    assert body["model"] == "gpt-4.1"
    assert body["messages"][0] == {"role": "system", "content": "You can see."}
    text = json.dumps(body)
    assert '[image elided: call view(\\"sha256:' in text  # turn 1 elided
    urls = [
        p["image_url"]["url"]
        for m in body["messages"]
        if isinstance(m["content"], list)
        for p in m["content"]
        if p["type"] == "image_url"
    ]
    assert urls == ["data:image/png;base64," + base64.b64encode(BLUE_PNG).decode()]
    assert body["messages"][-1]["role"] == "user"  # hoisted after the tool message


def test_live_turns_two_keeps_both_images(data: Path) -> None:
    code, out, _ = _run("s1", "-w", "anthropic", "--live-turns", "2", "--data", str(data))
    assert code == 0
    body = json.loads(out)
    assert body["model"] == "claude-sonnet-4-6"
    assert json.dumps(body).count('"type": "image"') == 2


def test_default_wire_comes_from_the_model(data: Path) -> None:
    code, out, _ = _run("s1", "--model", "gemini:gemini-2.5-flash", "--data", str(data))
    assert code == 0
    assert "contents" in json.loads(out)


def test_abbreviate_shortens_base64_only(data: Path) -> None:
    code, out, _ = _run("s1", "-w", "anthropic", "--live-turns", "2", "--data", str(data))
    full = json.loads(out)
    code, out, _ = _run(
        "s1", "-w", "anthropic", "--live-turns", "2", "--abbreviate", "--data", str(data)
    )
    assert code == 0
    short = json.loads(out)
    assert "chars of base64]" not in json.dumps(full)
    # our tiny PNGs are under the cut-off; the structure is the same either way
    assert short == full


def test_abbreviate_cuts_long_payloads() -> None:
    from visus.wire import abbreviate

    payload = base64.b64encode(bytes(range(256)) * 4).decode()
    body = {"url": "data:image/png;base64," + payload, "data": payload, "text": "x " * 200}
    out = abbreviate(body)
    assert out["url"] == f"data:image/png;base64,{payload[:24]}…[{len(payload)} chars of base64]"
    assert out["data"] == f"{payload[:24]}…[{len(payload)} chars of base64]"
    assert out["text"] == body["text"]


def test_missing_blob_is_a_note_and_a_warning(data: Path) -> None:
    for f in blobs_dir(data).rglob(BLUE.digest + "*"):
        f.unlink()
    code, out, err = _run("s1", "-w", "bedrock", "-m", "gpt-4.1", "--data", str(data))
    assert code == 0
    assert f"blob sha256:{BLUE.digest} is missing" in out
    assert BLUE.digest in err


def test_unknown_session_and_wire_exit_2(data: Path) -> None:
    code, _, err = _run("nope", "--data", str(data))
    assert code == 2
    assert "no session 'nope'" in err
    code, _, err = _run("s1", "--wire", "smoke-signals", "--data", str(data))
    assert code == 2
    assert "unknown wire" in err


def test_model_from_the_session_and_the_agent_defaults(data: Path) -> None:
    from visus.agent.loop import DEFAULT_SYSTEM

    code, out, _ = _run("s2", "--data", str(data))
    assert code == 0
    body = json.loads(out)
    # recorded in the session; OpenAI's default wire is Responses, as the agent sends it
    assert body["model"] == "gpt-4.1"
    assert body["instructions"] == DEFAULT_SYSTEM
    assert {"read", "view"} <= {t["name"] for t in body["tools"]}
    code, out, _ = _run("s2", "--bare", "--data", str(data))
    body = json.loads(out)
    assert body == {"model": "gpt-4.1", "input": [{"role": "user", "content": "hi"}]}
