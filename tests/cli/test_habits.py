"""CLI habits users bring from other tools (simonw/llm and friends): ``--version``,
a prompt on stdin, ``-c/--continue``, ``visus models``, ``config show`` naming its
file, progress on a terminal only, and ``visus chat`` showing tool calls as they start.

Every agent turn goes to a reference server on loopback, as in ``test_run``.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from tests.cli.terminal import wait_in_readline
from tests.timing import within
from visus import __version__
from visus.cli import app
from visus.record.messages import TextPart
from visus.record.sessions import SessionStore
from visus.reference.grid import make_grid, score_grid
from visus.reference.server import serve_in_background

runner = CliRunner()

_CLEAN = (
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "OPENROUTER_API_KEY",
    "OLLAMA_HOST",
    "VISUS_DATA",
    "VISUS_CONFIG",
)


@pytest.fixture(scope="module")
def reference_url() -> Iterator[str]:
    with serve_in_background() as url:
        yield url


@pytest.fixture
def env(reference_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in _CLEAN:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("VISUS_REFERENCE_URL", reference_url)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))  # no visus.toml there
    monkeypatch.chdir(tmp_path)
    return tmp_path


def invoke(*args: str, input: str | bytes | None = None) -> Result:
    return runner.invoke(app, list(args), input=input)


def run_json(data: Path, *args: str, input: str | bytes | None = None) -> dict[str, object]:
    result = invoke("run", "--data", str(data), "--json", *args, input=input)
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    out = json.loads(result.stdout)
    assert isinstance(out, dict)
    return out


def user_texts(data: Path, session: str) -> list[str]:
    messages = SessionStore(data / "sessions").load(session).messages
    return [
        "".join(p.text for p in m.parts if isinstance(p, TextPart))
        for m in messages
        if m.kind == "user"
    ]


def test_version() -> None:
    result = invoke("--version")
    assert result.exit_code == 0
    assert result.stdout.strip() == f"visus {__version__}"


def test_stdin_alone_is_the_prompt(env: Path) -> None:
    out = run_json(env / "data", input="what do you see?\n")
    assert user_texts(env / "data", str(out["session"])) == ["what do you see?"]


def test_piped_text_goes_before_the_prompt(env: Path) -> None:
    out = run_json(env / "data", "summarise this", input="line one\nline two\n")
    assert user_texts(env / "data", str(out["session"])) == ["line one\nline two\n\nsummarise this"]


def test_piped_image_is_attached_to_the_prompt(env: Path) -> None:
    png, expected = make_grid(2, 2, seed=31)
    out = run_json(env / "data", "What is in this picture?", input=png)
    images = json.loads(str(out["answer"]).split("```json\n")[1].split("\n```")[0])["images"]
    assert score_grid(expected, images[0]["words"], 2, 2)[0] == 4


def test_no_prompt_and_nothing_piped_is_a_usage_error(env: Path) -> None:
    result = invoke("run", "--data", str(env / "data"))
    assert result.exit_code == 2
    assert "give a prompt" in result.stderr


def test_continue_picks_the_latest_session(env: Path) -> None:
    data = env / "data"
    first = run_json(data, "one")["session"]
    second = run_json(data, "-c", "two")["session"]
    assert second == first
    assert user_texts(data, str(first)) == ["one", "two"]
    chat = invoke("chat", "--data", str(data), "--continue", input="three\n/quit\n")
    assert chat.exit_code == 0, chat.stdout
    assert f"session {first}" in chat.stdout
    assert user_texts(data, str(first)) == ["one", "two", "three"]


def test_continue_without_any_session_says_so(env: Path) -> None:
    result = invoke("run", "--data", str(env / "data"), "-c", "hi")
    assert result.exit_code == 2
    assert "no session yet" in result.stderr


def test_models_lists_the_catalog(env: Path) -> None:
    rows = json.loads(invoke("models", "--json").stdout)
    by_name = {r["model"]: r for r in rows}
    claude = by_name["anthropic:claude-sonnet-4-6"]
    assert claude["vision"] is True
    assert claude["max_edge"] == 1568
    assert claude["input_usd_per_mtok"] > 0
    table = invoke("models", "--provider", "anthropic")
    assert table.exit_code == 0
    assert "anthropic:claude-sonnet-4-6" in table.stdout
    assert "openai:" not in table.stdout


def test_config_show_names_the_file_it_read(env: Path) -> None:
    result = invoke("config", "show")
    assert result.exit_code == 0
    assert "config file: none" in result.stderr
    assert str(env / "xdg" / "visus" / "visus.toml") in result.stderr
    present = env / "visus.toml"
    present.write_text('default_model = "reference"\n')
    result = invoke("--config", str(present), "config", "show", "--json")
    assert result.exit_code == 0, result.stderr
    assert f"config file: {present}" in result.stderr
    assert json.loads(result.stdout)["default_model"] == "reference"


def test_chat_shows_a_tool_call_when_it_starts(env: Path) -> None:
    png, _ = make_grid(2, 2, seed=32)
    (env / "grid.png").write_bytes(png)
    message = "call view " + json.dumps({"path": "grid.png"})
    result = invoke("chat", "--data", str(env / "data"), input=f"{message}\n/quit\n")
    assert result.exit_code == 0, result.stdout
    out = result.stdout
    # The call line comes before the answer the model writes after seeing the image.
    assert '  [view] {"path": "grid.png"}' in out
    assert out.index("[view]") < out.index('"images"')


def _stderr_of_run(env: Path, data: Path, *, tty: bool) -> str:
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    args = [sys.executable, "-c", "from visus.cli import main; main()", "run"]
    args += ["--data", str(data), "hello"]
    if not tty:
        done = subprocess.run(
            args, cwd=env, env=environ, capture_output=True, timeout=60, stdin=subprocess.DEVNULL
        )
        assert done.returncode == 0, done.stderr
        return done.stderr.decode()
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(
            args,
            cwd=env,
            env={**environ, "TERM": "xterm", "COLUMNS": "120"},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=slave,
        )
        os.close(slave)
        chunks = []
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert proc.wait(timeout=60) == 0
        assert proc.stdout is not None
        proc.stdout.close()
    finally:
        os.close(master)
    return b"".join(chunks).decode(errors="replace")


def test_progress_shows_on_a_terminal_only(env: Path) -> None:
    on_tty = _stderr_of_run(env, env / "data", tty=True)
    assert "waiting for reference" in on_tty
    piped = _stderr_of_run(env, env / "data", tty=False)
    assert "waiting for" not in piped
    assert "\x1b[" not in piped  # no escape codes in a log
    assert "[session " in piped


def test_chat_turns_echo_off_while_the_agent_works(monkeypatch: pytest.MonkeyPatch) -> None:
    from visus.cli._chat import _no_echo

    master, slave = pty.openpty()
    try:
        with os.fdopen(os.dup(slave), "r") as terminal:
            monkeypatch.setattr(sys, "stdin", terminal)
            assert termios.tcgetattr(slave)[3] & termios.ECHO
            with _no_echo():
                # Keys typed now are neither echoed after "agent>" nor lost.
                assert not termios.tcgetattr(slave)[3] & termios.ECHO
            assert termios.tcgetattr(slave)[3] & termios.ECHO
    finally:
        os.close(master)
        os.close(slave)


def _own_terminal() -> None:
    """In the child: a session of its own whose controlling terminal is the pty, so
    Ctrl-C typed there is SIGINT, as in a real terminal."""
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    """A ``visus`` process on a real pseudo-terminal (stdin, stdout and stderr), read
    as a user sees it."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.leader, follower = pty.openpty()
        # A terminal wide enough that no label or line is cut.
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
        command = [sys.executable, "-c", "from visus.cli import main; main()", *args]
        self.proc = subprocess.Popen(
            command,
            cwd=cwd,
            env={**env, "TERM": "xterm", "PYTHONPATH": os.pathsep.join(sys.path)},
            stdin=follower,
            stdout=follower,
            stderr=follower,
            preexec_fn=_own_terminal,
        )
        os.close(follower)
        self.seen = ""

    def read_until(self, text: str, *, after: int = 0, timeout: float = 60.0) -> int:
        """Read until ``text`` shows at or after offset ``after``; its offset."""
        deadline = time.monotonic() + within(timeout)
        while (at := self.seen.find(text, after)) < 0:
            left = deadline - time.monotonic()
            assert left > 0, f"{text!r} never showed; the terminal shows:\n{self.seen}"
            ready, _, _ = select.select([self.leader], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.leader, 65536)
                except OSError:  # EIO: the process closed the terminal
                    chunk = b""
                assert chunk, f"the process ended before {text!r}:\n{self.seen}"
                self.seen += chunk.decode(errors="replace")
        return at

    def type(self, keys: str) -> None:
        os.write(self.leader, keys.encode())

    def close(self) -> int:
        """Wait for the process to end, reading all it wrote; its exit status."""
        try:
            deadline = time.monotonic() + within(60)
            while time.monotonic() < deadline:
                ready, _, _ = select.select([self.leader], [], [], 1.0)
                if not ready:
                    if self.proc.poll() is not None:
                        break
                    continue
                try:
                    chunk = os.read(self.leader, 65536)
                except OSError:  # EIO: the process closed the terminal
                    break
                if not chunk:
                    break
                self.seen += chunk.decode(errors="replace")
            return self.proc.wait(timeout=within(60))
        finally:
            os.close(self.leader)


def _embedded_env(env: Path) -> dict[str, str]:
    """The environment without VISUS_REFERENCE_URL: the process starts its own
    reference server, so the reference model's OCR engine loads in it."""
    return {k: v for k, v in os.environ.items() if k != "VISUS_REFERENCE_URL"}


def test_run_says_when_it_loads_the_ocr_engine(env: Path) -> None:
    png, _ = make_grid(2, 2, seed=7)
    (env / "grid.png").write_bytes(png)
    args = ["run", "--data", str(env / "data"), "--image", "grid.png", "read it"]
    term = Terminal(args, env, _embedded_env(env))
    # In the order they happen, each shown while it lasts.
    loading = term.read_until("loading the reference model's OCR engine")
    fitting = term.read_until("fitting 1 image for reference", after=loading)
    term.read_until("waiting for reference", after=fitting)
    assert term.close() == 0, term.seen
    assert '"images"' in term.seen  # the answer came


def test_chat_keeps_text_typed_during_a_turn_for_the_next_prompt(env: Path) -> None:
    """Typed while the agent works: not echoed into its answer, shown at the next
    ``you>`` prompt, and sent with Enter there (nothing lost)."""
    png, _ = make_grid(2, 2, seed=8)
    (env / "grid.png").write_bytes(png)
    data = env / "data"
    term = Terminal(["chat", "--data", str(data)], env, _embedded_env(env))
    at = term.read_until("you> ")
    term.type("/paste grid.png\r")
    at = term.read_until("you> ", after=term.read_until("attached grid.png", after=at))
    term.type("what does it say\r")
    answer_at = term.read_until("agent> ", after=at)
    # The first image loads the OCR engine: seconds, so these keys land mid-turn.
    term.type("typed ahead")
    assert "you> " not in term.seen[answer_at:], "the turn ended before the keys were typed"
    prompt_at = term.read_until("you> ", after=answer_at)
    answer = term.seen[answer_at:prompt_at]
    assert "images" in answer  # the reference model answered about the pasted image
    assert "typed ahead" not in answer
    # readline shows the pending keys on the new prompt line; Enter sends them.
    term.read_until("typed ahead", after=prompt_at)
    term.type("\r")
    term.read_until("you> ", after=term.read_until("agent> ", after=prompt_at))
    term.type("/quit\r")
    assert term.close() == 0, term.seen
    sid = term.seen.split("session ", 1)[1].split(" ", 1)[0]
    assert user_texts(data, sid)[-1] == "typed ahead"


def test_run_ends_the_line_of_text_written_before_a_tool_call(env: Path) -> None:
    """A model that writes a sentence and then calls a tool (as real ones do): the
    sentence keeps its own line, on a terminal (where the spinner's redraw would erase
    a half line) and in a pipe (where the next step's text would run on)."""
    png, _ = make_grid(1, 2, seed=9)
    (env / "g.png").write_bytes(png)
    prompt = 'say Let me look first.\ncall view {"path": "g.png"}'
    piped = invoke("run", "--data", str(env / "data"), prompt)
    assert piped.exit_code == 0, piped.stderr
    assert piped.stdout.startswith("Let me look first.\ng.png (")
    term = Terminal(["run", "--data", str(env / "data"), prompt], env, dict(os.environ))
    term.read_until("[session ")
    assert term.close() == 0, term.seen
    # The pty turns "\n" into "\r\n"; before the fix a spinner frame followed the text.
    assert "Let me look first.\r\n" in term.seen


def test_chat_ctrl_c_stops_the_turn_and_the_chat_goes_on(env: Path) -> None:
    data = env / "data"
    term = Terminal(["chat", "--data", str(data)], env, dict(os.environ))
    at = term.read_until("you> ")
    # The loopback server cancels the abandoned wait a second after the module's end.
    term.type("wait 60\r")
    at = term.read_until("agent> ", after=at)
    time.sleep(1.0)  # the agent is waiting on the model
    started = time.monotonic()
    term.type("\x03")  # Ctrl-C
    at = term.read_until("you> ", after=term.read_until("(stopped", after=at))
    # Not the 60 s the model was asked to take (a quiet machine stops in under 1 s).
    assert time.monotonic() - started < min(within(4), 40)
    term.type("hello\r")
    at = term.read_until("you> ", after=term.read_until("agent> ", after=at))
    wait_in_readline(term.proc.pid)
    term.type("\x03")  # at the prompt: leaves
    assert term.close() == 130, term.seen
    sid = term.seen.split("session ", 1)[1].split(" ", 1)[0]
    assert user_texts(data, sid) == ["wait 60", "hello"]
