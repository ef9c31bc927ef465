"""One place for data (issue 36): ``scripts/serve.sh`` and every other command started
the same way use the same data folder, so ``visus session list`` from the checkout
lists the web chat's sessions; the banner and ``visus config show`` say which folder,
and why."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from visus.cli import app
from visus.record.messages import TextPart, UserMessage
from visus.record.sessions import SessionStore
from visus.tether import server as tether_server_module

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


class _NoServer:
    def run(self) -> None:
        pass


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No data folder named anywhere: the user's data folder is under tmp_path."""
    for name in ("VISUS_DATA", "VISUS_DATA_DIR", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("VISUS_CONFIG", os.devnull)
    monkeypatch.setattr(tether_server_module, "tether_server", lambda app, **kw: _NoServer())
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _stub(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/usr/bin/env bash\n" + body, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_serve_sh_names_no_data_folder_of_its_own(tmp_path: Path) -> None:
    """The script runs as written; only the install and the server are stand-ins that
    record what they were given."""
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "serve.sh", checkout / "scripts" / "serve.sh")
    _stub(checkout / "scripts" / "setup.sh", "exit 0\n")
    seen = tmp_path / "seen"
    _stub(checkout / ".venv" / "bin" / "visus", f'echo "${{VISUS_DATA-unset}} $*" > {seen}\n')
    env = {k: v for k, v in os.environ.items() if k != "VISUS_DATA"}
    done = subprocess.run(
        ["bash", str(checkout / "scripts" / "serve.sh"), "--port", "0"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert seen.read_text(encoding="utf-8").split() == ["unset", "serve", "--port", "0"]
    given = subprocess.run(
        ["bash", str(checkout / "scripts" / "serve.sh")],
        env={**env, "VISUS_DATA": "/srv/visus"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert given.returncode == 0, given.stderr
    assert seen.read_text(encoding="utf-8").split() == ["/srv/visus", "serve"]


def test_the_banner_config_show_and_session_list_agree_on_the_default(home: Path) -> None:
    default = home / "xdg" / "visus"
    served = runner.invoke(app, ["serve", "--no-mcp", "--port", "0"])
    assert served.exit_code == 0, (served.stdout, served.stderr, served.exception)
    first = served.stdout.splitlines()[0]
    assert first == (
        f"visus serve · data {default}  (the user's data folder, every visus command's "
        "default; --data or VISUS_DATA names another)"
    )
    shown = runner.invoke(app, ["config", "show"])
    assert shown.exit_code == 0, shown.stderr
    assert f'data_dir = "{default}"' in shown.stdout.splitlines()
    assert f"# data_dir: {default}, from the user's data folder" in shown.stderr
    # A web chat session (what the server just started would write) is listed.
    web = SessionStore(default / "serve" / "instances" / "i-webchat" / "sessions")
    web.create("web-1")
    web.append("web-1", UserMessage(turn=1, parts=(TextPart("hello"),)))
    listed = runner.invoke(app, ["session", "list"])
    assert listed.exit_code == 0, listed.stderr
    assert listed.stdout.startswith("i-webchat/web-1  1 message, 1 turn,"), listed.stdout


@pytest.mark.parametrize(
    ("args", "env", "origin"),
    [
        (["--data", "{tmp}/a"], {}, "(from --data)"),
        ([], {"VISUS_DATA": "{tmp}/a"}, "(from VISUS_DATA)"),
    ],
)
def test_the_banner_says_where_a_named_data_folder_comes_from(
    home: Path,
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    env: dict[str, str],
    origin: str,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value.format(tmp=home))
    given = [a.format(tmp=home) for a in args]
    served: Any = runner.invoke(app, ["serve", "--no-mcp", "--port", "0", *given])
    assert served.exit_code == 0, (served.stdout, served.stderr, served.exception)
    assert served.stdout.splitlines()[0] == f"visus serve · data {home / 'a'}  {origin}"
    if env:
        shown = runner.invoke(app, ["config", "show"])
        assert f"# data_dir: {home / 'a'}, from VISUS_DATA" in shown.stderr
