"""``visus serve``'s banner names the folder the web chat's agent can read and view and
the web chat's URL with the token it made (no server is started: the app it would serve
is kept and driven in-process)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from tests.ports import free_port
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


def test_a_data_folder_others_can_read_is_warned_about_and_a_new_one_is_private(
    no_server: Any, tmp_path: Path
) -> None:
    """Issue 23: data folders were created 0755 (every session's and instance's name
    visible to other users). New ones are 0700; an existing readable one is named on
    stderr with the command that closes it, and left as the operator made it."""
    fresh = tmp_path / "fresh" / "d"
    args = ["serve", "--no-mcp", "--port", "0", "--data"]
    result = CliRunner().invoke(app, [*args, str(fresh)])
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    assert "warning" not in result.stderr
    made = [fresh.parent, fresh, *(p for p in fresh.rglob("*") if p.is_dir())]
    assert {p.relative_to(tmp_path).as_posix() for p in made} >= {
        "fresh",
        "fresh/d",
        "fresh/d/files",
        "fresh/d/serve",
        "fresh/d/serve/instances",
    }
    assert {oct(p.stat().st_mode & 0o777) for p in made} == {"0o700"}

    old = tmp_path / "old"
    (old / "sessions").mkdir(parents=True)
    for folder in (old, old / "sessions"):
        folder.chmod(0o755)
    result = CliRunner().invoke(app, [*args, str(old)])
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    warned = [line for line in result.stderr.splitlines() if "warning" in line]
    assert warned == [
        f"visus: warning: {folder} is drwxr-xr-x: other users can list the sessions, "
        f"instances and images in it (the files are 0600); chmod 700 {folder}"
        for folder in (old, old / "sessions")
    ]
    assert old.stat().st_mode & 0o777 == 0o755  # the operator's choice is left alone


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
    assert "  models     clients may pick reference  ([server] models)" in result.stdout
    assert "URLs" not in result.stdout  # fetched unless the operator turns them off
    result = CliRunner().invoke(app, [*args, "--no-fetch-urls"])
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    assert "  URLs       off: no tool fetches an https URL a client names" in result.stdout


@pytest.fixture
def served_app(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[Any]:
    """The apps ``visus serve`` would run, kept instead of served."""
    for name in ("VISUS_DATA", "VISUS_CONFIG", "VISUS_TOKEN", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    kept: list[Any] = []

    def keep(app: Any, **kw: Any) -> _NoServer:
        kept.append(app)
        return _NoServer()

    monkeypatch.setattr(tether_server_module, "tether_server", keep)
    monkeypatch.chdir(tmp_path)
    return kept


async def test_serve_makes_a_token_prints_its_url_and_every_route_asks_for_it(
    served_app: list[Any], tmp_path: Path
) -> None:
    port = free_port()  # not 8750: the user's own serve may hold it
    args = ["serve", "--port", str(port), "--data", str(tmp_path / "d")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    [served] = served_app
    token = served.state.token
    assert len(token or "") >= 32
    [line] = [x for x in result.stdout.splitlines() if x.startswith("  web chat")]
    url = line.split()[-1]
    assert url == f"http://127.0.0.1:{port}/?token={token}"
    iid = served.state.default_instance
    routes = [
        ("GET", "/v1/instances", None),
        ("POST", "/v1/instances", {"model": "reference"}),
        ("POST", f"/v1/instances/{iid}/tether", {"type": "user.message", "session": "s"}),
        ("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        ("GET", "/web/api/config", None),
        ("POST", "/web/api/sessions/web-t/attachments", {"filename": "a.txt"}),
        ("POST", "/web/api/fit", None),
    ]
    transport = httpx.ASGITransport(app=served)
    async with (
        served.router.lifespan_context(served),
        httpx.AsyncClient(transport=transport, base_url=f"http://127.0.0.1:{port}") as c,
    ):
        for method, path, body in routes:
            r = await c.request(method, path, json=body)
            assert r.status_code == 401, (method, path, r.text)
            assert r.json()["error"]["code"] == "unauthorized"
        assert (await c.get("/")).status_code == 200  # the page holds no data
        bearer = {"Authorization": f"Bearer {token}"}
        assert (await c.get("/v1/instances", headers=bearer)).status_code == 200
        # The printed URL opens the page, which keeps the token itself (no cookie).
        signed = await c.get(url.removeprefix(f"http://127.0.0.1:{port}"))
        assert signed.status_code == 200
        assert "set-cookie" not in signed.headers
        assert (await c.get("/web/api/config", headers=bearer)).status_code == 200


def test_a_given_token_is_kept_and_not_printed(
    served_app: list[Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VISUS_TOKEN", "my-own-token")
    args = ["serve", "--no-mcp", "--port", "0", "--data", str(tmp_path / "d")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    assert served_app[0].state.token == "my-own-token"
    assert "my-own-token" not in result.stdout
    assert "/?token=<your token>" in result.stdout


def test_no_token_is_an_explicit_loopback_only_opt_out(
    served_app: list[Any], tmp_path: Path
) -> None:
    args = ["serve", "--no-mcp", "--port", "0", "--data", str(tmp_path / "d"), "--no-token"]
    wide = CliRunner().invoke(app, [*args, "--host", "0.0.0.0"])
    assert wide.exit_code == 2
    assert "--no-token is allowed on loopback only" in wide.stderr
    assert served_app == []
    both = CliRunner().invoke(app, [*args, "--token", "t"])
    assert both.exit_code == 2
    loop = CliRunner().invoke(app, args)
    assert loop.exit_code == 0, (loop.stdout, loop.stderr, loop.exception)
    assert served_app[0].state.token is None
    assert "token      none (--no-token)" in loop.stdout
