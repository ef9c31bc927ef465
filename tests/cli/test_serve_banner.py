"""``visus serve``'s banner names the folder the web chat's agent can read and view
(no server is started)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from visus.cli import app
from visus.tether import server as tether_server_module


class _NoServer:
    def run(self) -> None:
        pass


@pytest.fixture
def no_server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("VISUS_DATA", "VISUS_CONFIG", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(tether_server_module, "tether_server", lambda app, **kw: _NoServer())
    monkeypatch.chdir(tmp_path)


def test_the_banner_names_the_agents_files_folder(no_server: Any, tmp_path: Path) -> None:
    data = tmp_path / "d"
    result = CliRunner().invoke(app, ["serve", "--no-mcp", "--port", "0", "--data", str(data)])
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    files = (data / "files").resolve()  # the operator's default root, made at start
    assert f"  files      {files}  " in result.stdout
    assert files.is_dir()
    assert "edit " not in result.stdout  # write tools stay off unless asked for


def test_the_banner_names_the_roots_and_edit_when_the_operator_allows_them(
    no_server: Any, tmp_path: Path
) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    args = ["serve", "--no-mcp", "--port", "0", "--data", str(tmp_path / "d")]
    result = CliRunner().invoke(
        app, [*args, "--root", str(one), "--root", str(two), "--allow-write"]
    )
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    assert f"  files      {one.resolve()}  " in result.stdout
    assert f"  files      {two.resolve()}  " in result.stdout
    assert "  edit       on" in result.stdout


def test_the_banner_names_the_model_and_the_folder_mcp_view_reads(
    no_server: Any, tmp_path: Path
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    args = ["serve", "--port", "0", "--data", str(tmp_path / "d"), "--root", str(shared)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    assert f"/mcp   (its view tool reads {shared.resolve()}; --root sets it)" in result.stdout
    assert "  model      reference (offline, no provider key set)" in result.stdout
