"""What a first-time user of the CLI ran into, each pinned so it stays fixed.

Every test drives the real typer app against a reference server on loopback, with a
clean environment and its own data folder and configuration file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from tests.cli.terminal import Terminal, wait_in_readline
from tests.timing import within
from visus.cli import app
from visus.record.sessions import SessionStore
from visus.reference.server import serve_in_background

runner = CliRunner()

_CLEAN_ENV = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "OPENROUTER_API_KEY",
    "OLLAMA_HOST",
    "VISUS_OPENAI_COMPATIBLE_API_KEY",
    "VISUS_OPENAI_COMPATIBLE_BASE_URL",
    "VISUS_DATA",
    "VISUS_DATA_DIR",
    "VISUS_RETENTION__LIVE_TURNS",
)


@pytest.fixture(scope="module")
def reference_url() -> Iterator[str]:
    with serve_in_background() as url:
        yield url


@pytest.fixture
def env(reference_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """cwd = tmp_path; a visus.toml there (empty) is the configuration in force."""
    for name in _CLEAN_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("VISUS_REFERENCE_URL", reference_url)
    (tmp_path / "visus.toml").write_text("", encoding="utf-8")
    # setenv (not --config) so the value is restored after the test.
    monkeypatch.setenv("VISUS_CONFIG", str(tmp_path / "visus.toml"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def invoke(*args: str, input: str | None = None) -> Result:
    return runner.invoke(app, list(args), input=input)


# --- the data folder is the one `visus run` uses ------------------------------------


def test_session_commands_find_sessions_in_the_configured_data_dir(env: Path) -> None:
    data = env / "configured-data"
    (env / "visus.toml").write_text(f'data_dir = "{data}"\n', encoding="utf-8")
    ran = invoke("run", "--json", "--new-session", "cfg-1", "hello")
    assert ran.exit_code == 0, (ran.stdout, ran.stderr)
    assert SessionStore(data / "sessions").exists("cfg-1")

    listed = invoke("session", "list")
    assert listed.exit_code == 0
    assert listed.stdout.startswith("cfg-1 "), listed.stdout
    shown = invoke("session", "show", "cfg-1")
    assert shown.exit_code == 0, shown.stderr
    assert "hello" in shown.stdout
    used = invoke("usage", "cfg-1", "--json")
    assert used.exit_code == 0, used.stderr
    assert json.loads(used.stdout)["turns"][0]["turn"] == 1
    lowered = invoke("lower", "cfg-1", "--wire", "anthropic", "--bare")
    assert lowered.exit_code == 0, lowered.stderr
    assert json.loads(lowered.stdout)["messages"][0]["content"][0]["text"] == "hello"


def test_data_option_still_wins_over_the_configuration(env: Path) -> None:
    (env / "visus.toml").write_text(f'data_dir = "{env / "elsewhere"}"\n', encoding="utf-8")
    assert invoke("run", "--data", str(env / "d"), "--new-session", "opt-1", "hi").exit_code == 0
    assert SessionStore(env / "d" / "sessions").exists("opt-1")
    assert invoke("session", "list", "--data", str(env / "d")).stdout.startswith("opt-1 ")
    assert "no sessions" in invoke("session", "list").stdout


def test_broken_configuration_fails_session_list_cleanly(env: Path) -> None:
    (env / "visus.toml").write_text('data_dir = "unterminated\n', encoding="utf-8")
    result = invoke("session", "list")
    assert result.exit_code == 2
    assert "invalid TOML" in result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit)


# --- visus usage --------------------------------------------------------------------


@pytest.mark.parametrize("sid", ["../escape", "a/b", ".hidden"])
def test_usage_of_a_malformed_session_id_exits_2_without_a_traceback(env: Path, sid: str) -> None:
    result = invoke("usage", sid, "--data", str(env / "data"))
    assert result.exit_code == 2
    assert isinstance(result.exception, SystemExit), result.exception
    assert "not a valid session id" in result.stderr


def test_usage_of_an_unknown_session_says_where_it_looked(env: Path) -> None:
    result = invoke("usage", "nope", "--data", str(env / "data"))
    assert result.exit_code == 2
    assert str(env / "data" / "sessions") in result.stderr


# --- visus chat ---------------------------------------------------------------------


def _turns(data: Path, sid: str) -> list[tuple[str, int]]:
    store = SessionStore(data / "sessions")
    if not store.exists(sid):
        return []
    return [(m.kind, m.turn) for m in store.load(sid).messages]


def test_chat_help_lists_every_command_and_sends_nothing(env: Path) -> None:
    data = env / "data"
    result = invoke("chat", "--data", str(data), "--new-session", "h1", input="/help\n/quit\n")
    assert result.exit_code == 0, result.stdout
    for command in ("/view PATH", "/paste PATH", "/images", "/usage", "/help", "/quit"):
        assert command in result.stdout
    assert "agent> " not in result.stdout
    assert _turns(data, "h1") == []


def test_chat_commands_without_their_path_print_usage_and_send_nothing(env: Path) -> None:
    data = env / "data"
    result = invoke(
        "chat", "--data", str(data), "--new-session", "h2", input="/view\n/paste  \n/quit\n"
    )
    assert result.exit_code == 0, result.stdout
    assert "usage: /view PATH" in result.stdout
    assert "usage: /paste PATH" in result.stdout
    assert _turns(data, "h2") == []


def test_chat_mistyped_command_is_not_sent_but_a_path_message_is(env: Path) -> None:
    data = env / "data"
    text = "/usgae\n/etc/hosts: what is in it?\n/quit\n"
    result = invoke("chat", "--data", str(data), "--new-session", "h3", input=text)
    assert result.exit_code == 0, result.stdout
    assert "unknown command /usgae; /help lists them" in result.stdout
    messages = SessionStore(data / "sessions").load("h3").messages
    assert [m.kind for m in messages] == ["user", "assistant"]
    assert messages[0].text == "/etc/hosts: what is in it?"


def test_chat_empty_lines_are_not_turns(env: Path) -> None:
    data = env / "data"
    result = invoke(
        "chat", "--data", str(data), "--new-session", "h4", input="\n   \nhello\n\n/quit\n"
    )
    assert result.exit_code == 0, result.stdout
    assert result.stdout.count("agent> ") == 1
    assert _turns(data, "h4") == [("user", 1), ("assistant", 1)]


@pytest.mark.parametrize("command", ["run", "chat"])
def test_malformed_session_id_exits_2_before_anything_runs(env: Path, command: str) -> None:
    args = [command, "--data", str(env / "data"), "--session", "../x"]
    result = invoke(*args, *(["hi"] if command == "run" else []), input="/usage\nhi\n")
    assert result.exit_code == 2, (result.stdout, result.exception)
    assert isinstance(result.exception, SystemExit), result.exception
    assert "not a valid session id" in result.stderr
    assert result.stdout == ""


# --- visus run: what the tools did, and the images the agent sent -------------------


def _png(path: Path, size: tuple[int, int] = (120, 80)) -> None:
    from PIL import Image

    Image.new("RGB", size, (200, 30, 30)).save(path)


def test_run_prints_each_tool_call_and_its_outcome_on_stderr(env: Path) -> None:
    _png(env / "red.png")
    (env / "notes.txt").write_text("hello\n", encoding="utf-8")
    data = str(env / "data")
    viewed = invoke("run", "--data", data, 'call view {"path": "red.png"}')
    assert viewed.exit_code == 0, viewed.stderr
    assert re.search(r"^  view \{\"path\": \"red.png\"\} -> .*120x80", viewed.stderr, re.M)
    assert "  view " not in viewed.stdout  # stdout holds only the answer

    failed = invoke("run", "--data", data, 'call edit {"path": "notes.txt", "old": "hello"}')
    assert failed.exit_code == 0
    assert re.search(r"^  edit .* -> error: .*old_string", failed.stderr, re.M), failed.stderr
    assert (env / "notes.txt").read_text(encoding="utf-8") == "hello\n"

    plain = invoke("run", "--data", data, "hello")
    assert " -> " not in plain.stderr  # no tools, no tool lines


def test_run_saves_the_images_the_agent_sends(env: Path) -> None:
    from PIL import Image

    _png(env / "red.png")
    out = env / "sent"
    result = invoke(
        "run", "--data", str(env / "data"), "--save-images", str(out),
        "--json", 'call send_image {"path": "red.png"}',
    )  # fmt: skip
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert set(json.loads(result.stdout)) >= {"answer", "usage", "cost_usd", "session"}
    files = sorted(out.iterdir())
    assert [f.name for f in files] == ["1-red.png"]
    with Image.open(files[0]) as im:
        assert im.size == (120, 80)
        assert im.convert("RGB").getpixel((5, 5)) == (200, 30, 30)
    assert f"-> {files[0]}" in result.stderr


def test_run_without_save_images_says_an_image_was_sent(env: Path) -> None:
    _png(env / "red.png")
    result = invoke("run", "--data", str(env / "data"), 'call send_image {"path": "red.png"}')
    assert result.exit_code == 0
    assert "sent image red.png (image/png" in result.stderr
    assert "--save-images DIR keeps it" in result.stderr


def test_run_save_images_into_an_unwritable_place_exits_1(env: Path) -> None:
    _png(env / "red.png")
    (env / "a-file").write_text("x", encoding="utf-8")
    result = invoke(
        "run", "--data", str(env / "data"), "--save-images", str(env / "a-file" / "sub"),
        'call send_image {"path": "red.png"}',
    )  # fmt: skip
    assert result.exit_code == 1
    assert isinstance(result.exception, SystemExit), result.exception
    assert "cannot save images" in result.stderr


def test_chat_prints_the_tool_calls_after_the_answer(env: Path) -> None:
    _png(env / "red.png")
    text = 'call view {"path": "red.png"}\n/quit\n'
    result = invoke("chat", "--data", str(env / "data"), input=text)
    assert result.exit_code == 0, result.stdout
    answer_at = result.stdout.index("agent> ")
    tool_at = result.stdout.index('  view {"path": "red.png"} -> ')
    assert tool_at > answer_at


# --- model references ---------------------------------------------------------------


def test_unknown_bare_model_is_called_unknown_before_the_base_url_advice(env: Path) -> None:
    result = invoke("run", "--data", str(env / "data"), "--model", "claude-sonet-4-6x", "hi")
    # Typos of known families still go to their provider (and ask for its key) ...
    assert result.exit_code == 2
    assert "ANTHROPIC_API_KEY" in result.stderr
    result = invoke("run", "--data", str(env / "data"), "--model", "sonnet-4", "hi")
    # ... anything else is named as unknown first.
    assert result.exit_code == 2
    assert "visus does not know the model 'sonnet-4'" in result.stderr
    assert "provider:model" in result.stderr
    assert "VISUS_OPENAI_COMPATIBLE_BASE_URL" in result.stderr


def test_explicit_openai_compatible_model_gets_only_the_base_url_advice(env: Path) -> None:
    args = ("run", "--data", str(env / "data"), "--model", "openai-compatible:my-model", "hi")
    result = invoke(*args)
    assert result.exit_code == 2
    assert "does not know" not in result.stderr
    assert "openai-compatible:my-model needs a base URL" in result.stderr


# --- lower and session show apply the retention run applies -------------------------


def _image_blocks(body: dict[str, object]) -> int:
    return json.dumps(body).count('"type": "image"')


def test_lower_and_session_show_default_to_the_configured_retention(env: Path) -> None:
    data = env / "data"
    for flag, name, size in (
        ("--new-session", "red.png", (120, 80)),
        ("-s", "wide.png", (160, 80)),
    ):
        # viewed, not pasted (pasted images leave later); two different images, since a
        # second copy of the same bytes is never sent while the first is live
        _png(env / name, size)
        call = f"call view {json.dumps({'path': name})}"
        ran = invoke("run", "--data", str(data), flag, "ret-1", call)
        assert ran.exit_code == 0, ran.stderr
    lower = ("lower", "ret-1", "--data", str(data), "--wire", "anthropic", "--bare")

    # Defaults: only the current turn's image is live.
    assert _image_blocks(json.loads(invoke(*lower).stdout)) == 1
    (env / "visus.toml").write_text("[retention]\nlive_turns = 2\n", encoding="utf-8")
    assert _image_blocks(json.loads(invoke(*lower).stdout)) == 2
    # An option still overrides the file.
    assert _image_blocks(json.loads(invoke(*lower, "--live-turns", "1").stdout)) == 1

    shown = json.loads(invoke("session", "show", "ret-1", "--data", str(data), "--json").stdout)
    assert shown["policy"]["live_turns"] == 2
    assert shown["totals"]["live"] == 2


def test_configured_image_token_budget_reaches_lower(env: Path) -> None:
    data = env / "data"
    _png(env / "red.png")
    for flag in ("--new-session", "-s"):
        ran = invoke("run", "--data", str(data), flag, "ret-2", 'call view {"path": "red.png"}')
        assert ran.exit_code == 0, ran.stderr
    (env / "visus.toml").write_text(
        "[retention]\nlive_turns = 2\nimage_token_budget = 1\n", encoding="utf-8"
    )
    lower = ("lower", "ret-2", "--data", str(data), "--wire", "anthropic", "--bare")
    assert _image_blocks(json.loads(invoke(*lower).stdout)) < 2
    text = invoke("session", "show", "ret-2", "--data", str(data)).stdout
    assert "image-token budget 1" in text.splitlines()[0]


# --- visus view ---------------------------------------------------------------------


def test_view_out_failure_names_the_path_once_with_the_reason(env: Path) -> None:
    _png(env / "red.png")
    target = env / "no" / "dir" / "o.png"
    result = invoke("view", "red.png", "--out", str(target))
    assert result.exit_code == 1
    assert result.stderr.strip() == f"visus: cannot write {target}: No such file or directory"
    as_json = invoke("view", "red.png", "--json", "--out", str(target))
    message = json.loads(as_json.stdout)["message"]
    assert message == f"cannot write {target}: No such file or directory"


def test_chat_in_a_terminal_edits_lines_instead_of_sending_escape_codes(env: Path) -> None:
    data = env / "data"
    term = Terminal(env, "chat", "--data", str(data), "--new-session", "tty-1")
    try:
        term.read_until(b"you> ")
        term.type(b"helo\x1b[D\x1b[Dl\r")  # type "helo", two Lefts, insert "l"
        term.read_until(b"you> ", 2)
        term.type(b"/quit\r")
        assert term.proc.wait(timeout=30) == 0
    finally:
        term.close()
    messages = SessionStore(data / "sessions").load("tty-1").messages
    assert messages[0].text == "hello"


def test_chat_ctrl_c_at_the_prompt_leaves_at_once(env: Path) -> None:
    import subprocess

    term = Terminal(env, "chat", "--data", str(env / "data"), "--new-session", "tty-2")
    try:
        term.read_until(b"you> ")
        wait_in_readline(term.proc.pid)
        term.type(b"\x03")  # one Ctrl-C, and no Enter after it
        try:
            code = term.proc.wait(timeout=within(15))
        except subprocess.TimeoutExpired:
            term.read_until(b"\x00never", 0)
            raise AssertionError(
                f"chat kept waiting for Enter after Ctrl-C: {term.seen!r}"
            ) from None
        assert code == 130
        assert b"Traceback" not in term.seen
    finally:
        term.close()


def test_unreachable_provider_names_its_url(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    with socket.socket() as s:  # a loopback port nobody listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("VISUS_REFERENCE_URL", f"http://127.0.0.1:{port}")
    result = invoke("run", "--data", str(env / "data"), "hi")
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert f"(server http://127.0.0.1:{port}" in result.stderr


# --- visus analyze ------------------------------------------------------------------


@pytest.mark.parametrize("command", ["analyze", "analyze-video"])
def test_blocked_loopback_http_url_names_the_option(env: Path, command: str) -> None:
    result = invoke(command, "http://127.0.0.1:9/x.png", "-p", "what?")
    assert result.exit_code == 3
    assert result.stderr.startswith("visus: refused (url_blocked): ")
    assert "pass --allow-loopback-http" in result.stderr


def test_blocked_public_http_url_gets_no_loopback_hint(env: Path) -> None:
    result = invoke("analyze", "http://example.com/x.png", "-p", "what?")
    assert result.exit_code == 3
    assert result.stderr.startswith("visus: refused (url_blocked): ")
    assert "--allow-loopback-http" not in result.stderr


# --- --root that is not a folder ----------------------------------------------------


@pytest.mark.parametrize("command", ["view", "run", "chat", "serve", "mcp"])
def test_a_root_that_is_not_a_folder_exits_2_naming_it(env: Path, command: str) -> None:
    _png(env / "red.png")
    extra = {"view": ["red.png"], "run": ["hi"]}.get(command, [])
    missing = env / "no-such-dir"
    result = invoke(command, "--root", str(missing), *extra, input="/quit\n")
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert f"--root {missing} does not exist" in result.stderr
    result = invoke(command, "--root", str(env / "red.png"), *extra, input="/quit\n")
    assert result.exit_code == 2
    assert "is not a folder" in result.stderr


# --- visus view URL ------------------------------------------------------------------


@pytest.fixture
def http_folder(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A plain http server on loopback serving ``tmp_path / 'www'``."""
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    www = tmp_path / "www"
    www.mkdir()
    handler = functools.partial(Quiet, directory=str(www))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", www
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_view_takes_a_url_through_the_ssrf_gate(env: Path, http_folder: tuple[str, Path]) -> None:
    base, www = http_folder
    _png(www / "remote.png", (90, 60))
    seen = invoke("view", f"{base}/remote.png", "--allow-loopback-http", "--json")
    assert seen.exit_code == 0, (seen.stdout, seen.stderr)
    payload = json.loads(seen.stdout)
    assert (payload["ok"], payload["source_width"], payload["source_height"]) == (True, 90, 60)

    blocked = invoke("view", f"{base}/remote.png", "--json")  # no loopback without the flag
    assert blocked.exit_code == 3
    assert json.loads(blocked.stdout)["reason"] == "outside_reach"

    missing = invoke("view", f"{base}/absent.png", "--allow-loopback-http", "--json")
    assert missing.exit_code == 3
    refusal = json.loads(missing.stdout)
    assert refusal["reason"] == "not_found"
    assert "answered HTTP 404" in refusal["message"]
    assert "no such file" in refusal["message"]


def test_view_tells_an_unreachable_url_from_a_404(env: Path, http_folder: tuple[str, Path]) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    down = invoke("view", f"http://127.0.0.1:{dead}/x.png", "--allow-loopback-http", "--json")
    assert down.exit_code == 3
    message = json.loads(down.stdout)["message"]
    assert "could not be reached" in message
    assert "no server answered" in message
    assert "HTTP" not in message.replace("http://", "")
    base, _www = http_folder
    missing = invoke("view", f"{base}/absent.png", "--allow-loopback-http", "--json")
    assert "could not be reached" not in json.loads(missing.stdout)["message"]


# --- one error prefix ---------------------------------------------------------------


def test_command_errors_share_the_visus_prefix(env: Path) -> None:
    (env / "visus.toml").write_text('default_model = "x\n', encoding="utf-8")
    shown = invoke("config", "show")
    assert shown.exit_code == 2
    assert shown.stderr.startswith("visus: ")
    (env / "visus.toml").write_text("", encoding="utf-8")
    refused = invoke("reference", "serve", "--host", "0.0.0.0")
    assert refused.exit_code == 2
    assert refused.stderr.startswith("visus: refusing to bind 0.0.0.0")
