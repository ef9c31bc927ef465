"""``visus serve`` uses the data folder the other commands use (no server is started)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from visus.cli import app
from visus.tether import server as tether_server_module


class _NoServer:
    def __init__(self, calls: list[Any]) -> None:
        self.calls = calls

    def run(self) -> None:
        self.calls.append("run")


@pytest.fixture
def no_server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[Any]:
    calls: list[Any] = []
    for name in ("VISUS_DATA", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(tether_server_module, "tether_server", lambda app, **kw: _NoServer(calls))
    monkeypatch.chdir(tmp_path)
    return calls


def test_serve_uses_the_configured_data_dir(
    no_server: list[Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "configured"
    (tmp_path / "visus.toml").write_text(f'data_dir = "{data}"\n', encoding="utf-8")
    monkeypatch.setenv("VISUS_CONFIG", str(tmp_path / "visus.toml"))
    result = CliRunner().invoke(app, ["serve", "--no-mcp", "--port", "0"])
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    assert no_server == ["run"]
    where = tmp_path / "visus.toml"
    assert f"visus serve · data {data}  (from data_dir in {where})\n" in result.stdout
    # The web chat's default instance lives under that folder, not the user's.
    assert (data / "serve").is_dir()


def test_serve_data_option_wins(no_server: list[Any], tmp_path: Path) -> None:
    args = ["serve", "--no-mcp", "--port", "0", "--data", str(tmp_path / "d")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    assert f"visus serve · data {tmp_path / 'd'}  (from --data)\n" in result.stdout
    assert (tmp_path / "d" / "serve").is_dir()


def test_serve_on_a_port_in_use_exits_2_before_building_anything(
    no_server: list[Any], tmp_path: Path
) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        args = ["serve", "--data", str(tmp_path / "d"), "--port", str(port)]
        result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "in use" in result.stderr
    assert result.stdout == ""
    assert no_server == []
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("command", [["serve"], ["reference", "serve"]])
def test_a_port_out_of_range_is_one_line_not_a_traceback(
    no_server: list[Any], tmp_path: Path, command: list[str]
) -> None:
    args = [*command, "--port", "70000"]
    if command == ["serve"]:
        args += ["--data", str(tmp_path / "d")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, (result.stdout, result.stderr, result.exception)
    assert "port 70000 is out of range (0-65535)" in result.stderr
    assert "Traceback" not in result.stderr
    assert no_server == []
