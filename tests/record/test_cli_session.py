from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from visus.cli.session import register
from visus.models import get_model, image_tokens
from visus.paths import blobs_dir, sessions_dir
from visus.record.blobs import FileBlobStore
from visus.record.messages import (
    AssistantMessage,
    AttachmentOrigin,
    ImagePart,
    PerceptionOrigin,
    TextPart,
    ToolCall,
    ToolResult,
    UserMessage,
)
from visus.record.sessions import SessionStore


@pytest.fixture
def app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        """Test root so `session` stays a subcommand group."""

    register(app)
    return app


def _make_session(data: Path, *, drop_turn: int | None = None) -> dict[int, str]:
    store = SessionStore(sessions_dir(data))
    blobs = FileBlobStore(blobs_dir(data))
    sid = store.create("demo", meta={"model": "claude-sonnet-4-6"})
    digests: dict[int, str] = {}
    for t in (1, 2, 3):
        digest = blobs.put(f"pixels of shot {t}".encode() * 100, "image/png")
        digests[t] = digest
        store.append(sid, UserMessage((TextPart(f"look at shot {t}"),), turn=t))
        store.append(
            sid,
            AssistantMessage(
                tool_calls=(ToolCall(f"c{t}", "view", {"path": f"shot{t}.png"}),), turn=t
            ),
        )
        image = ImagePart(digest, "image/png", 1700, 1568, 980, PerceptionOrigin(f"shot{t}.png"))
        store.append(sid, ToolResult(f"c{t}", "view", (TextPart("Viewed"), image), turn=t))
    photo = blobs.put(b"jpeg bytes", "image/jpeg")
    digests[0] = photo
    att = ImagePart(photo, "image/jpeg", 10, 800, 600, AttachmentOrigin("me.jpg"))
    store.append(sid, UserMessage((TextPart("and my photo"), att), turn=3))
    if drop_turn is not None:
        blobs.gc([d for t, d in digests.items() if t != drop_turn])
    return digests


def test_show_text(app: typer.Typer, tmp_path: Path) -> None:
    digests = _make_session(tmp_path)
    result = CliRunner().invoke(app, ["session", "show", "demo", "--data", str(tmp_path)])
    assert result.exit_code == 0, result.output
    out = result.output
    spec = get_model("claude-sonnet-4-6")
    shot_tokens = image_tokens(spec, 1568, 980)
    photo_tokens = image_tokens(spec, 800, 600)
    assert "session demo: 10 messages, 3 turns" in out
    assert "-> view" in out
    assert "shot1.png" in out
    lines = out.splitlines()
    elided = [ln for ln in lines if "image elided" in ln]
    live = [ln for ln in lines if "image live" in ln]
    assert len(elided) == 2
    assert len(live) == 2
    assert f"sha256:{digests[1][:12]}" in elided[0]
    assert f"sha256:{digests[3][:12]}" in live[0]
    assert "1568x980" in live[0]
    assert f"~{shot_tokens} tokens" in live[0]
    assert "attachment me.jpg" in live[1]
    assert f"~{photo_tokens} tokens" in live[1]
    assert (
        f"images: 4 (2 live, 2 elided); image tokens per request ~{shot_tokens + photo_tokens} "
        f"(all images kept: ~{3 * shot_tokens + photo_tokens})"
    ) in out


def test_show_live_turns_and_model(
    app: typer.Typer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _make_session(tmp_path)
    monkeypatch.setenv("VISUS_DATA", str(tmp_path))  # no --data: the env var decides
    result = CliRunner().invoke(
        app, ["session", "show", "demo", "--live-turns", "2", "--model", "gpt-4.1", "--json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    images = [im for m in data["messages"] for im in m["images"]]
    assert [im["live"] for im in images] == [False, True, True, True]
    spec = get_model("gpt-4.1")
    assert [im["tokens"] for im in images] == [image_tokens(spec, 1568, 980)] * 3 + [
        image_tokens(spec, 800, 600)
    ]
    assert data["totals"]["live"] == 3
    assert data["totals"]["live_tokens"] == sum(im["tokens"] for im in images[1:])
    assert data["policy"] == {"live_turns": 2, "chunk": 1, "image_token_budget": None}
    assert data["model"].endswith("gpt-4.1")
    assert data["meta"] == {"model": "claude-sonnet-4-6"}
    assert images[3]["origin"] == {"kind": "attachment", "filename": "me.jpg"}
    assert data["problems"] == []


def test_show_chunk(app: typer.Typer, tmp_path: Path) -> None:
    _make_session(tmp_path)
    args = ["session", "show", "demo", "--data", str(tmp_path), "--json", "--chunk", "3"]
    data = json.loads(CliRunner().invoke(app, args).output)
    # with chunk 3 the boundary has not moved yet at turn 3: every image is live
    assert data["totals"]["elided"] == 0


def test_show_missing_blob(app: typer.Typer, tmp_path: Path) -> None:
    digests = _make_session(tmp_path, drop_turn=3)
    result = CliRunner().invoke(app, ["session", "show", "demo", "--data", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert f"[image unavailable: blob sha256:{digests[3]} is missing]"[:60] in result.output
    assert "problems (1):" in result.output
    assert digests[3] in result.output


@pytest.mark.parametrize("sid", ["nope", "../etc"])
def test_show_missing_session_exits_2(app: typer.Typer, tmp_path: Path, sid: str) -> None:
    result = CliRunner().invoke(app, ["session", "show", sid, "--data", str(tmp_path)])
    assert result.exit_code == 2
    assert "session" in result.output


def test_list(app: typer.Typer, tmp_path: Path) -> None:
    runner = CliRunner()
    empty = runner.invoke(app, ["session", "list", "--data", str(tmp_path)])
    assert empty.exit_code == 0
    assert "no sessions" in empty.output
    _make_session(tmp_path)
    result = runner.invoke(app, ["session", "list", "--data", str(tmp_path)])
    assert result.exit_code == 0
    assert result.output.startswith("demo  10 messages, 3 turns, modified ")
    as_json = json.loads(
        runner.invoke(app, ["session", "list", "--data", str(tmp_path), "--json"]).output
    )
    assert [(s["id"], s["messages"], s["turns"]) for s in as_json] == [("demo", 10, 3)]


def test_one_turn_is_said_one_turn(app: typer.Typer, tmp_path: Path) -> None:
    """Counts of one are singular ("1 turns" was seen from outside, as "fitting 1 image(s)"
    was in the web chat)."""
    store = SessionStore(sessions_dir(tmp_path))
    sid = store.create("one", meta={"model": "claude-sonnet-4-6"})
    store.append(sid, UserMessage((TextPart("hello"),), turn=1))
    store.append(sid, AssistantMessage((TextPart("hi"),), turn=1))
    runner = CliRunner()
    listed = runner.invoke(app, ["session", "list", "--data", str(tmp_path)])
    assert listed.output.startswith("one  2 messages, 1 turn, modified "), listed.output
    shown = runner.invoke(app, ["session", "show", "one", "--data", str(tmp_path)])
    assert shown.output.startswith("session one: 2 messages, 1 turn; "), shown.output
    checked = runner.invoke(app, ["session", "check", "one", "--data", str(tmp_path)])
    assert checked.output.startswith("one: 2 messages, 0 blobs checked"), checked.output


def test_show_notes_a_model_without_vision(app: typer.Typer, tmp_path: Path) -> None:
    _make_session(tmp_path)
    args = ["session", "show", "demo", "--data", str(tmp_path), "--model", "ollama:llama3.2"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "is not known to take images" in result.output
    vision = CliRunner().invoke(app, ["session", "show", "demo", "--data", str(tmp_path)])
    assert "is not known to take images" not in vision.output


def test_check_reports_missing_and_corrupt_blobs(tmp_path: Path, app: typer.Typer) -> None:
    digests = _make_session(tmp_path)
    runner = CliRunner()
    ok = runner.invoke(app, ["session", "check", "demo", "--data", str(tmp_path)])
    assert ok.exit_code == 0, ok.output
    assert "4 blobs checked" in ok.output
    assert ok.output.strip().endswith("ok")
    blobs = FileBlobStore(blobs_dir(tmp_path))
    flipped = blobs.path(digests[2])
    assert flipped is not None
    raw = bytearray(flipped.read_bytes())
    raw[0] ^= 0x80
    flipped.write_bytes(bytes(raw))
    gone = blobs.path(digests[0])
    assert gone is not None
    gone.unlink()
    bad = runner.invoke(app, ["session", "check", "demo", "--data", str(tmp_path), "--json"])
    assert bad.exit_code == 1, bad.output
    report = json.loads(bad.output)
    assert report["ok"] is False
    assert len(report["problems"]) == 2
    assert any(f"sha256:{digests[2]} is corrupt" in p for p in report["problems"])
    assert any(f"sha256:{digests[0]} is missing" in p for p in report["problems"])
    missing = runner.invoke(app, ["session", "check", "nope", "--data", str(tmp_path)])
    assert missing.exit_code == 2
