"""``visus run``, ``visus chat`` and ``visus usage`` through the real typer app.

Every test talks to a reference server on loopback (``VISUS_REFERENCE_URL``) through
the same provider client a user gets, with a clean environment (no provider keys) and
its own ``--data`` folder. The reference model perceives only real image parts, so a
grid word placed in its right cell proves the CLI delivered the pixels.
"""

from __future__ import annotations

import json
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from visus.cli import app
from visus.record.sessions import SessionStore
from visus.reference.grid import make_grid, score_grid
from visus.reference.server import serve_in_background

runner = CliRunner()

_JSON_BLOCK = re.compile(r"```json\n(.*?)\n```", re.DOTALL)

# Every env var that could pick a real provider or point the CLI somewhere else.
_PROVIDER_ENV = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "GOOGLE_GEMINI_BASE_URL",
    "OPENROUTER_API_KEY",
    "OLLAMA_HOST",
    "OLLAMA_API_KEY",
    "VISUS_OPENAI_COMPATIBLE_API_KEY",
    "VISUS_OPENAI_COMPATIBLE_BASE_URL",
    "VISUS_BEDROCK_ENDPOINT_URL",
    "VISUS_DATA",
)


@pytest.fixture(scope="module")
def reference_url() -> Iterator[str]:
    with serve_in_background() as url:
        yield url


@pytest.fixture
def env(reference_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A clean environment pointing at the loopback reference server; cwd = tmp_path."""
    for name in _PROVIDER_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("VISUS_REFERENCE_URL", reference_url)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def invoke(*args: str, input: str | None = None) -> Result:
    return runner.invoke(app, list(args), input=input)


def run_json(data: Path, *args: str) -> dict[str, Any]:
    """``visus run --json``: asserts stdout is exactly one JSON object and returns it."""
    result = invoke("run", "--data", str(data), "--json", *args)
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout  # one object, no streamed deltas around it
    out = json.loads(lines[0])
    assert isinstance(out, dict)
    return out


def seen(answer: str) -> dict[str, Any]:
    blocks = _JSON_BLOCK.findall(answer)
    assert len(blocks) == 1, answer[:400]
    data = json.loads(blocks[0])
    assert isinstance(data, dict)
    return data


def write_grid(folder: Path, rows: int, cols: int, seed: int) -> list[tuple[str, int, int, str]]:
    png, expected = make_grid(rows, cols, seed=seed)
    (folder / "grid.png").write_bytes(png)
    return expected


# --- visus run ----------------------------------------------------------------------


def test_run_json_prints_exactly_the_four_keys(env: Path) -> None:
    out = run_json(env / "data", "hello")
    assert set(out) == {
        "answer",
        "usage",
        "cost_usd",
        "session",
        "stopped",
        "stop_reason",
        "steps",
        "max_steps",
    }
    assert (out["stopped"], out["stop_reason"]) == ("answer", "end_turn")
    assert (out["steps"], out["max_steps"]) == (1, 200)  # the default budget
    assert "I see no images" in out["answer"]
    assert out["usage"]["input_tokens"] > 0
    assert out["usage"]["output_tokens"] > 0
    assert out["cost_usd"] == 0.0  # the reference model is free
    # The id printed is a real session in the data folder.
    store = SessionStore(env / "data" / "sessions")
    assert store.exists(out["session"])
    kinds = [m.kind for m in store.load(out["session"]).messages]
    assert kinds == ["user", "assistant"]


def _screens(folder: Path, n: int) -> str:
    """``n`` screenshots in ``folder`` and the prompt that makes the reference model view
    them one per step before it answers."""
    png, _ = make_grid(1, 2, seed=3)
    for i in range(1, n + 1):
        (folder / f"s{i}.png").write_bytes(png)
    steps = [{"path": f"s{i}.png"} for i in range(1, n + 1)]
    return f"each view {json.dumps(steps)}"


def test_a_run_out_of_steps_says_so_on_stdout_and_exits_4(env: Path) -> None:
    prompt = _screens(env, 5)
    result = invoke("run", "--data", str(env / "data"), "--max-steps", "3", prompt)
    assert result.exit_code == 4, (result.stdout, result.stderr)
    assert "stopped after 3 steps, the step budget, without a final answer" in result.stdout
    assert "--max-steps" in result.stdout
    as_json = invoke("run", "--data", str(env / "data"), "--json", "--max-steps", "2", prompt)
    assert as_json.exit_code == 4
    out = json.loads(as_json.stdout)
    assert (out["stopped"], out["steps"], out["max_steps"]) == ("step_limit", 2, 2)
    # A budget big enough lets the same loop finish: five views, then the answer.
    done = run_json(env / "data", "--max-steps", "6", prompt)
    assert (done["stopped"], done["steps"]) == ("answer", 6)


def test_cache_tokens_show_in_run_json_and_usage(env: Path) -> None:
    # Eight screenshots in one turn: the reference server caches the prompt's prefix as
    # the provider would, and every surface shows the tokens read from the cache.
    out = run_json(env / "data", _screens(env, 8))
    assert out["usage"]["cache_read_tokens"] > 0
    assert set(out["usage"]) == {
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
    }
    shown = invoke("usage", out["session"], "--data", str(env / "data"), "--json")
    assert shown.exit_code == 0, shown.stderr
    usage = json.loads(shown.stdout)
    (turn,) = usage["turns"]
    assert (
        turn["cache_read_tokens"] == usage["cache_read_tokens"] == out["usage"]["cache_read_tokens"]
    )
    assert len(turn["steps"]) == 9  # eight views, then the answer
    assert sum(s["cache_read_tokens"] for s in turn["steps"]) == turn["cache_read_tokens"]
    text = invoke("usage", out["session"], "--data", str(env / "data")).stdout
    assert f"({usage['cache_read_tokens']} cache read, " in text


def test_the_step_budget_comes_from_the_config(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VISUS_AGENT__MAX_STEPS", "2")
    result = invoke("run", "--data", str(env / "data"), "--json", _screens(env, 4))
    assert result.exit_code == 4
    assert json.loads(result.stdout)["max_steps"] == 2


@pytest.mark.parametrize(("rows", "cols", "seed"), [(2, 2, 11), (3, 3, 12)])
def test_run_with_pasted_grid_places_every_word(env: Path, rows: int, cols: int, seed: int) -> None:
    expected = write_grid(env, rows, cols, seed)
    out = run_json(env / "data", "--image", "grid.png", "What is in this picture?")
    images = seen(out["answer"])["images"]
    assert len(images) == 1
    placed, coloured = score_grid(expected, images[0]["words"], rows, cols)
    assert placed == rows * cols, (expected, images[0]["words"])
    assert coloured >= rows * cols - 1


def test_run_views_through_the_tool_inside_root(env: Path) -> None:
    work = env / "work"
    work.mkdir()
    expected = write_grid(work, 2, 2, seed=21)
    prompt = "call view " + json.dumps({"path": str(work / "grid.png")})
    out = run_json(env / "data", "--root", str(work), prompt)
    images = seen(out["answer"])["images"]
    assert score_grid(expected, images[0]["words"], 2, 2)[0] == 4
    # Recorded as a view tool result: the image is re-viewable, not an attachment.
    store = SessionStore(env / "data" / "sessions")
    kinds = [m.kind for m in store.load(out["session"]).messages]
    assert kinds == ["user", "assistant", "tool", "assistant"]
    # Issue 23: the folders visus makes for its data (sessions, blobs and their fan-out)
    # are its owner's only, like the records in them.
    folders = [env / "data", *(p for p in (env / "data").rglob("*") if p.is_dir())]
    assert {p.name for p in folders} >= {"data", "sessions", "blobs"}
    assert {oct(stat.S_IMODE(p.stat().st_mode)) for p in folders} == {"0o700"}


def test_run_view_outside_root_is_refused_not_seen(env: Path) -> None:
    work = env / "work"
    work.mkdir()
    write_grid(env, 2, 2, seed=22)  # in tmp_path, outside the root
    prompt = "call view " + json.dumps({"path": str(env / "grid.png")})
    out = run_json(env / "data", "--root", str(work), prompt)
    assert seen(out["answer"])["images"] == []
    store = SessionStore(env / "data" / "sessions")
    tool = [m for m in store.load(out["session"]).messages if m.kind == "tool"]
    assert len(tool) == 1
    assert tool[0].is_error
    assert "outside" in tool[0].text


def test_run_text_mode_streams_answer_and_reports_on_stderr(env: Path) -> None:
    result = invoke("run", "--data", str(env / "data"), "hello")
    assert result.exit_code == 0, result.stderr
    assert "I see no images" in result.stdout
    assert "```json" in result.stdout
    assert re.search(r"\[session \S+ · 1 step · \d+ in / \d+ out · \$0\.0+\]", result.stderr)
    assert "[session" not in result.stdout


def test_session_continues_and_usage_sums_per_turn(env: Path) -> None:
    data = env / "data"
    write_grid(env, 2, 2, seed=31)
    first = run_json(data, "--new-session", "demo-1", "--image", "grid.png", "Look.")
    second = run_json(data, "--session", "demo-1", "And again?")
    assert first["session"] == second["session"] == "demo-1"

    store = SessionStore(data / "sessions")
    messages = store.load("demo-1").messages
    assert [(m.kind, m.turn) for m in messages] == [
        ("user", 1),
        ("assistant", 1),
        ("user", 2),
        ("assistant", 2),
    ]
    # Turn 2 carries turn 1 in its request: the prompt grew.
    assert second["usage"]["input_tokens"] > first["usage"]["input_tokens"]

    result = invoke("usage", "demo-1", "--data", str(data), "--json")
    assert result.exit_code == 0, result.stderr
    usage = json.loads(result.stdout)
    assert usage["session"] == "demo-1"
    assert [t["turn"] for t in usage["turns"]] == [1, 2]
    for row, out in zip(usage["turns"], (first, second), strict=True):
        assert row["input_tokens"] == out["usage"]["input_tokens"]
        assert row["output_tokens"] == out["usage"]["output_tokens"]
    assert usage["input_tokens"] == first["usage"]["input_tokens"] + second["usage"]["input_tokens"]
    assert (
        usage["output_tokens"] == first["usage"]["output_tokens"] + second["usage"]["output_tokens"]
    )

    text = invoke("usage", "demo-1", "--data", str(data))
    assert text.exit_code == 0
    assert text.stdout.splitlines()[0].startswith(f"turn 1: {first['usage']['input_tokens']} in,")
    assert text.stdout.splitlines()[-1].startswith(f"total: {usage['input_tokens']} in,")


def test_usage_of_a_multi_step_turn_sums_its_steps(env: Path) -> None:
    data = env / "data"
    write_grid(env, 2, 2, seed=32)
    out = run_json(data, "call view " + json.dumps({"path": "grid.png"}))
    result = invoke("usage", out["session"], "--data", str(data), "--json")
    usage = json.loads(result.stdout)
    steps = [
        m.usage
        for m in SessionStore(data / "sessions").load(out["session"]).messages
        if m.kind == "assistant" and m.usage is not None
    ]
    assert len(steps) == 2  # the tool call, then the answer
    assert usage["turns"][0]["input_tokens"] == sum(u.input_tokens for u in steps)
    assert usage["turns"][0]["input_tokens"] == out["usage"]["input_tokens"]


def test_session_show_and_lower_work_on_the_printed_id(env: Path) -> None:
    data = env / "data"
    write_grid(env, 2, 2, seed=41)
    out = run_json(data, "--image", "grid.png", "Look.")
    sid = out["session"]

    show = invoke("session", "show", sid, "--data", str(data))
    assert show.exit_code == 0, show.stderr
    assert sid in show.stdout
    assert "image live" in show.stdout
    assert "grid.png" in show.stdout

    lowered = invoke(
        "lower", sid, "--data", str(data), "--wire", "anthropic", "--model", "claude-sonnet-4-6"
    )
    assert lowered.exit_code == 0, lowered.stderr
    body = json.loads(lowered.stdout)
    assert body["model"] == "claude-sonnet-4-6"
    assert [m["role"] for m in body["messages"]] == ["user", "assistant"]
    blocks = body["messages"][0]["content"]
    images = [b for b in blocks if b["type"] == "image"]
    assert len(images) == 1
    assert images[0]["source"]["type"] == "base64"
    assert body["messages"][1]["content"][0]["text"] == out["answer"]
    assert {t["name"] for t in body["tools"]} >= {"read", "view"}


# --- visus chat ---------------------------------------------------------------------


def test_chat_streams_an_answer_and_prints_usage(env: Path) -> None:
    data = env / "data"
    result = invoke("chat", "--data", str(data), input="hello\n/usage\n/quit\n")
    assert result.exit_code == 0, (result.stdout, result.exception)
    out = result.stdout
    assert "model reference" in out
    assert "agent> I see no images" in out
    match = re.search(r"(\d+) input \+ (\d+) output tokens, \$0\.0+", out)
    assert match, out
    # /usage reports what the session log holds.
    sid = re.search(r"session (\S+) ·", out)
    assert sid
    steps = [
        m.usage
        for m in SessionStore(data / "sessions").load(sid.group(1)).messages
        if m.kind == "assistant" and m.usage is not None
    ]
    assert int(match.group(1)) == sum(u.input_tokens for u in steps) > 0
    assert int(match.group(2)) == sum(u.output_tokens for u in steps) > 0


def test_chat_view_command_attaches_the_grid_to_the_next_message(env: Path) -> None:
    expected = write_grid(env, 2, 2, seed=51)
    result = invoke(
        "chat",
        "--data",
        str(env / "data"),
        input="/view grid.png\nWhat is in the picture?\n/images\n/quit\n",
    )
    assert result.exit_code == 0, (result.stdout, result.exception)
    assert re.search(r"attached .*600x260.* to your next message", result.stdout), result.stdout
    answer = result.stdout.split("agent> ", 1)[1]
    images = seen(answer)["images"]
    assert score_grid(expected, images[0]["words"], 2, 2)[0] == 4
    assert re.search(r"turn 1: 600x260 image/png .*grid\.png", result.stdout)


def test_chat_view_takes_a_region_as_visus_view_does(env: Path) -> None:
    """``/view PATH --region x0,y0,x1,y1`` zooms as ``visus view --region`` and the
    agent's ``view(region=...)`` do: words the plain view shrank past reading are read."""
    from tests.zoomshot import REGION, WORDS, write_screen

    write_screen(env, width=3840, height=2160)
    box = ",".join(map(str, REGION))
    script = (
        "/view screen.png\nWhat does it say?\n"
        f"/view screen.png --region {box}\nWhat does it say?\n"
        "/view screen.png --region 1,2,3\n/view screen.png --region 0,0,5000,10\n/quit\n"
    )
    result = invoke("chat", "--data", str(env / "data"), input=script)
    assert result.exit_code == 0, (result.stdout, result.exception)
    plain, zoomed = (seen(a)["images"] for a in result.stdout.split("agent> ")[1:])
    assert not set(WORDS) & {w["text"] for w in plain[-1]["words"]}
    assert set(WORDS) <= {w["text"] for w in zoomed[-1]["words"]}
    assert f"attached screen.png region=[{box}] of 3840x2160, sent " in result.stdout
    assert "usage: /view PATH [--region X0,Y0,X1,Y1]" in result.stdout
    assert "cannot view: " in result.stdout
    assert "outside the image, which is 3840x2160" in result.stdout


def test_chat_view_of_a_missing_file_says_why_and_sends_nothing(env: Path) -> None:
    data = env / "data"
    result = invoke("chat", "--data", str(data), input="/view nothing.png\n/images\n/quit\n")
    assert result.exit_code == 0, (result.stdout, result.exception)
    assert "cannot view" in result.stdout
    assert "agent> " not in result.stdout  # no turn ran
    assert "no images yet" in result.stdout


def test_chat_paste_attaches_to_the_next_message(env: Path) -> None:
    expected = write_grid(env, 2, 2, seed=52)
    result = invoke(
        "chat", "--data", str(env / "data"), input="/paste grid.png\nWhat is it?\n/quit\n"
    )
    assert result.exit_code == 0, (result.stdout, result.exception)
    assert "attached grid.png" in result.stdout
    images = seen(result.stdout.split("agent> ", 1)[1])["images"]
    assert score_grid(expected, images[0]["words"], 2, 2)[0] == 4


def test_chat_resumes_a_session_and_ends_on_eof(env: Path) -> None:
    data = env / "data"
    run_json(data, "--new-session", "c1", "first turn")
    result = invoke("chat", "--data", str(data), "--session", "c1", input="/usage\n")
    assert result.exit_code == 0
    assert "session c1" in result.stdout
    assert re.search(r"[1-9]\d* input \+ [1-9]\d* output tokens", result.stdout)


def test_chat_second_turn_in_one_process(env: Path) -> None:
    data = env / "data"
    # Each turn runs on the same event loop as the client's connections (a loop per
    # turn used to fail the second turn with "Event loop is closed").
    result = invoke("chat", "--data", str(data), input="hello\nagain\nthird\n/quit\n")
    assert result.exit_code == 0, (result.stdout, result.exception)
    assert result.stdout.count("agent> I see no images") == 3
    assert "error" not in result.stdout
    sid = re.search(r"session (\S+) ·", result.stdout)
    assert sid
    messages = SessionStore(data / "sessions").load(sid.group(1)).messages
    assert [m.turn for m in messages] == [1, 1, 2, 2, 3, 3]


# --- errors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "var"),
    [
        ("openai:gpt-4.1", "OPENAI_API_KEY"),
        ("anthropic:claude-sonnet-4-6", "ANTHROPIC_API_KEY"),
        ("gemini:gemini-2.5-flash", "GEMINI_API_KEY"),
    ],
)
@pytest.mark.parametrize("command", ["run", "chat"])
def test_missing_provider_key_exits_2_naming_the_env_var(
    env: Path, model: str, var: str, command: str
) -> None:
    args = [command, "--data", str(env / "data"), "--model", model]
    result = invoke(*args, *(["hello"] if command == "run" else []), input="hi\n/quit\n")
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert var in result.stderr
    assert result.stdout == ""
    assert not (env / "data" / "sessions").exists() or not any(
        (env / "data" / "sessions").iterdir()
    )


@pytest.mark.parametrize(
    ("model", "says"),
    [
        ("openai:", "names no model"),
        ("reference:klingon", "reference speaks"),
        # A ref no catalog knows goes to an openai-compatible server, which needs a URL.
        ("nosuch-model-xyz", "VISUS_OPENAI_COMPATIBLE_BASE_URL"),
    ],
)
def test_bad_model_ref_exits_2_with_its_reason(env: Path, model: str, says: str) -> None:
    result = invoke("run", "--data", str(env / "data"), "--model", model, "hi")
    assert result.exit_code == 2
    assert says in result.stderr


def test_run_missing_image_is_refused_with_3(env: Path) -> None:
    result = invoke("run", "--data", str(env / "data"), "--image", "absent.png", "hi")
    assert result.exit_code == 3
    assert "absent.png" in result.stderr


def test_run_undecodable_image_fails_cleanly(env: Path) -> None:
    (env / "fake.png").write_bytes(b"\x89PNG\r\n\x1a\nbroken")
    result = invoke("run", "--data", str(env / "data"), "--json", "--image", "fake.png", "hi")
    assert result.exit_code == 3, (result.stdout, result.stderr, result.exception)
    assert "visus: refused (undecodable): --image fake.png cannot be decoded" in result.stderr
    assert result.stdout == ""


def test_run_says_a_document_is_viewed_not_attached(env: Path) -> None:
    from tests.media.media_corpus import pdf_bytes

    (env / "report.pdf").write_bytes(pdf_bytes(2))
    result = invoke("run", "--data", str(env / "data"), "--image", "report.pdf", "hi")
    assert result.exit_code == 3, (result.stdout, result.stderr)
    assert "report.pdf is a pdf document, not an image" in result.stderr
    assert "visus view report.pdf" in result.stderr
    assert not (env / "data" / "sessions").exists() or not any(
        (env / "data" / "sessions").iterdir()
    )


def test_usage_of_unknown_session_exits_2(env: Path) -> None:
    result = invoke("usage", "no-such-session", "--data", str(env / "data"))
    assert result.exit_code == 2
    assert "no-such-session" in result.stderr
