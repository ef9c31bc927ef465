"""A newcomer's first hour with the CLI (issue 27), each wrong turn pinned.

The model is named at start with the reason it was picked; help renders cleanly and
carries one exit-code table every command keeps; Ctrl-C stops a run with one line and
130; a closed stdout pipe is not a failure; every session of a data folder is found,
the web chat's included, and can be removed.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from tests.cli.terminal import Terminal
from tests.timing import within
from visus.cli import app
from visus.cli._common import MODEL_RULE
from visus.config import model_rule
from visus.record.messages import ImagePart, PerceptionOrigin, TextPart, UserMessage
from visus.record.sessions import SessionStore
from visus.reference.server import serve_in_background
from visus.store import FileStore

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()

_KEYS = (
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "OPENROUTER_API_KEY",
    "VISUS_DEFAULT_MODEL",
    "VISUS_DATA",
)


@pytest.fixture(scope="module")
def reference_url() -> Iterator[str]:
    with serve_in_background() as url:
        yield url


@pytest.fixture
def env(reference_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A clean environment: no provider key, an empty visus.toml, data under tmp_path."""
    for name in _KEYS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("VISUS_REFERENCE_URL", reference_url)
    (tmp_path / "visus.toml").write_text("", encoding="utf-8")
    monkeypatch.setenv("VISUS_CONFIG", str(tmp_path / "visus.toml"))
    monkeypatch.setenv("VISUS_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def invoke(*args: str, input: str | None = None) -> Result:
    return runner.invoke(app, list(args), input=input)


def _flat(text: str) -> str:
    """Help text with the box drawing and line wrapping taken out."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


# --- which model, and why ---------------------------------------------------------------


def test_the_model_rule_is_the_one_the_configuration_applies() -> None:
    assert model_rule() == MODEL_RULE
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").replace("`", "").split())
    assert f"--model, else {MODEL_RULE}" in readme
    serve_sh = " ".join((ROOT / "scripts" / "serve.sh").read_text(encoding="utf-8").split("# "))
    serve_sh = " ".join(serve_sh.split())
    assert "ANTHROPIC_API_KEY, OPENAI_API_KEY, GEMINI_API_KEY, OPENROUTER_API_KEY" in serve_sh


@pytest.mark.parametrize("command", ["run", "chat", "serve"])
def test_help_says_how_the_model_is_picked(env: Path, command: str) -> None:
    shown = _flat(invoke(command, "--help").stdout)
    assert _flat(MODEL_RULE) in shown
    assert "(default: reference)" not in shown


def test_chat_names_the_model_and_the_key_that_picked_it(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    offline = invoke("chat", input="/quit\n")
    assert offline.exit_code == 0, offline.stderr
    assert "model reference (offline, no provider key set)" in offline.stdout
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0123456789abcdef")
    billed = invoke("chat", input="/quit\n")
    assert billed.exit_code == 0, billed.stderr
    assert (
        "model openai:gpt-6.1-sol, from OPENAI_API_KEY; --model reference for the offline model"
        in billed.stdout
    )
    named = invoke("chat", "--model", "reference", input="/quit\n")
    assert "model reference (offline, --model)" in named.stdout


def test_run_names_the_model_on_stderr(env: Path) -> None:
    result = invoke("run", "--json", "hello")
    assert result.exit_code == 0, result.stderr
    assert result.stderr.startswith("model reference (offline, no provider key set)")
    json.loads(result.stdout)  # stdout stays one JSON object


# --- help -------------------------------------------------------------------------------


def _commands() -> list[list[str]]:
    import typer.main

    found: list[list[str]] = []

    def walk(command: object, path: list[str]) -> None:
        found.append(path)
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return found


def test_visus_alone_prints_help_and_exits_0(env: Path) -> None:
    result = invoke()
    assert result.exit_code == 0
    assert "Usage: visus" in result.stdout


def test_every_help_renders_cleanly(env: Path) -> None:
    commands = _commands()
    assert ["session", "rm"] in commands
    for path in commands:
        result = invoke(*path, "--help")
        assert result.exit_code == 0, (path, result.stdout)
        placeholders = re.findall(r"<(?:str|bool|path|int|float|list\[\w+\])>", result.stdout)
        assert not placeholders, (path, placeholders)
    run = _flat(invoke("run", "--help").stdout)
    assert "also [[mcp.servers]]" in run
    # Paragraphs reflow: the docstring's own line breaks do not cut sentences.
    wide = runner.invoke(app, ["run", "--help"], env={"COLUMNS": "200"}).stdout
    assert "the images it sent and the session's usage go to stderr" in wide


def test_commands_are_grouped_and_the_exit_codes_are_listed(env: Path) -> None:
    shown = invoke("--help").stdout
    panels = [p for p in re.findall(r"╭─ (.+?) ─", shown) if p not in ("Options", "Commands")]
    assert panels == [
        "See files as a model does",
        "Run an agent",
        "Serve",
        "Sessions, data and configuration",
    ]
    flat = _flat(shown)
    for code in ("0 done", "1 the work failed", "2 the command line", "3 an input was refused"):
        assert code in flat
    assert "130 stopped with Ctrl-C" in flat


# --- one error style, one exit-code table -----------------------------------------------------


@pytest.mark.parametrize(
    ("args", "code", "said"),
    [
        (["view", "nothere.png"], 3, "visus: refused (not_found): nothere.png does not exist"),
        (["analyze", "nothere.png", "-p", "hi"], 3, "visus: refused (file_not_found): "),
        (["run", "--image", "nothere.png", "hi"], 3, "visus: refused (not_found): --image"),
        (
            ["run", "--image", "https://127.0.0.1/cat.png", "hi"],
            3,
            "visus: refused (outside_reach): https://127.0.0.1/cat.png is not fetched",
        ),
        (["run", "-s", "nope", "hi"], 2, "visus: --session nope: no such session"),
        (["view", "x.png", "--model", "foo:bar"], 2, "unknown provider 'foo'"),
        (["run", "--model", "foo:bar", "hi"], 2, "unknown provider 'foo'"),
        (["models", "--provider", "nobody"], 2, "visus: no models for provider 'nobody'"),
    ],
)
def test_errors_are_one_line_with_the_tables_exit_code(
    env: Path, args: list[str], code: int, said: str
) -> None:
    result = invoke(*args)
    assert result.exit_code == code, (result.stdout, result.stderr, result.exception)
    assert said in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr


def test_new_session_names_a_session_and_session_continues_only_one_that_exists(
    env: Path,
) -> None:
    first = invoke("run", "--json", "--new-session", "mine", "hello")
    assert first.exit_code == 0, first.stderr
    again = invoke("run", "--json", "--new-session", "mine", "hello")
    assert again.exit_code == 2
    assert "--session mine" in again.stderr
    go_on = invoke("run", "--json", "-s", "mine", "hello again")
    assert go_on.exit_code == 0, go_on.stderr
    assert [m.turn for m in SessionStore(env / "data" / "sessions").load("mine").messages] == [
        1,
        1,
        2,
        2,
    ]


def test_a_busy_port_names_the_option_to_change(env: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        for command in (
            ["serve"],
            ["reference", "serve"],
            ["proxy", "--upstream", "https://x.org"],
        ):
            result = invoke(*command, "--port", str(port))
            assert result.exit_code == 2, (command, result.stdout, result.stderr)
            assert "(choose another with --port)" in result.stderr


def test_config_show_prints_toml_a_visus_toml_could_hold(env: Path) -> None:
    (env / "visus.toml").write_text(
        '[[mcp.servers]]\nname = "docs"\nurl = "https://mcp.example.com/mcp"\n'
        'headers = { Authorization = "Bearer abc" }\n',
        encoding="utf-8",
    )
    result = invoke("config", "show")
    assert result.exit_code == 0, result.stderr
    parsed = tomllib.loads(result.stdout)
    assert parsed["mcp"]["servers"][0]["url"] == "https://mcp.example.com/mcp"
    assert parsed["server"]["port"] == 8750
    assert "# server.token is unset" in result.stdout


# --- Ctrl-C and closed pipes, in a real process ----------------------------------------------


def _child_env(env: Path) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in _KEYS} | {
        "VISUS_DATA": str(env / "data"),
        "VISUS_CONFIG": str(env / "visus.toml"),
    }


@pytest.mark.parametrize("how", ["ctrl-c", "sigint"])
def test_ctrl_c_during_run_stops_with_one_line_and_130(env: Path, how: str) -> None:
    term = Terminal(env, "run", "wait 30", env=_child_env(env))
    try:
        term.read_until(b"model reference")
        term.read_until(b"waiting for")
        if how == "ctrl-c":
            term.type(b"\x03")
        else:
            term.proc.send_signal(signal.SIGINT)  # the process alone, not its group
        assert term.proc.wait(timeout=within(30)) == 130
        term.read_until(b"visus: stopped (session ")
    finally:
        term.close()
    text = re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]", b"", term.seen).decode(errors="replace")
    lines = [ln for ln in re.split(r"[\r\n]+", text) if ln.strip() and "waiting for" not in ln]
    assert "Traceback" not in text
    assert len(lines) == 2, lines  # the model line, then the stopped line
    sid = re.search(r"stopped \(session (\S+);", text)
    assert sid is not None
    messages = SessionStore(env / "data" / "sessions").load(sid.group(1)).messages
    assert [m.kind for m in messages] == ["user", "assistant"]


def test_a_closed_stdout_pipe_exits_quietly_with_0(env: Path) -> None:
    store = SessionStore(env / "data" / "sessions")
    store.create("long")
    for turn in range(1, 2001):
        store.append("long", UserMessage(parts=(TextPart("hello " * 40),), turn=turn))
    proc = subprocess.Popen(
        [sys.executable, "-c", "from visus.cli import main; main()", "session", "show", "long"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_child_env(env),
        cwd=env,
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    assert proc.stdout.readline().startswith(b"session long:")
    proc.stdout.close()  # `| head -1`
    assert proc.wait(timeout=60) == 0
    assert proc.stderr.read() == b""


# --- one data layout: every session of a data folder ---------------------------------------


def _web_chat_session(data: Path, sid: str, digest: str) -> None:
    """A session as the web chat's instance of `visus serve` keeps it."""
    store = FileStore(data / "serve")
    store.put_instance({"id": "i-webchat", "model": "reference", "created": "t"})
    log = store.sessions("instances/i-webchat")
    log.create(sid)
    image = ImagePart(digest, "image/png", 4, 2, 2, PerceptionOrigin("chart.png"))
    log.append(sid, UserMessage(parts=(TextPart("look at chart.png"), image), turn=1))


def test_session_commands_see_the_web_chats_sessions_and_rm_removes_them(env: Path) -> None:
    data = env / "data"
    blobs = FileStore(data / "serve").blobs("instances/i-webchat")
    digest = blobs.put(b"\x89PNG\r\n\x1a\n" + b"x" * 32, "image/png")
    _web_chat_session(data, "web-20261125-000000-abcdef", digest)
    assert invoke("run", "--json", "--new-session", "cli-1", "hello").exit_code == 0

    listed = invoke("session", "list")
    assert listed.exit_code == 0, listed.stderr
    assert "i-webchat/web-20261125-000000-abcdef" in listed.stdout
    assert "(web chat)" in listed.stdout
    assert "cli-1 " in listed.stdout
    for command in (["session", "show"], ["usage"], ["session", "check"]):
        shown = invoke(*command, "web-20261125-000000-abcdef")
        assert shown.exit_code == 0, (command, shown.stdout, shown.stderr)
    assert "look at chart.png" in invoke("session", "show", "web-20261125-000000-abcdef").stdout

    removed = invoke("session", "rm", "i-webchat/web-20261125-000000-abcdef")
    assert removed.exit_code == 0, removed.stderr
    assert "web-2026" not in invoke("session", "list").stdout
    assert blobs.has(digest)  # until the next gc
    assert invoke("gc", "--grace", "0").exit_code == 0
    assert not blobs.has(digest)
    gone = invoke("session", "rm", "web-20261125-000000-abcdef")
    assert gone.exit_code == 2
    assert "no session" in gone.stderr


def test_the_readmes_analyze_schema_example_works_offline(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8").replace("\\\n", "")
    line = next(ln for ln in readme.splitlines() if "visus analyze" in ln and "--schema" in ln)
    args = shlex.split(line.split("#", 1)[0])[1:]
    assert args[:2] == ["analyze", "docs/examples/sign.png"], args
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("VISUS_REFERENCE_JSON", raising=False)  # the model as a user has it
    result = invoke(*args)
    assert result.exit_code == 0, result.stderr
    parsed = json.loads(result.stdout)["parsed"]
    assert parsed["words"][0]["text"] == "LANTERN"
