"""Secrets and records at rest: an MCP server's header is named by an environment
variable in ``visus.toml`` and stored nowhere visus writes; what visus writes for
sessions and instances is readable by its owner only."""

from __future__ import annotations

import asyncio
import base64
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

from tests import served
from tests.app.test_mcp_instances import PEER, _answer
from tests.tether.doubles import live_server
from visus.app import create_main_app
from visus.config import load_config
from visus.errors import ConfigError
from visus.providers import ProviderSettings
from visus.reference.grid import make_grid
from visus.reference.server import serve_in_background

SECRET = "s3cret-header-value"


@pytest.fixture(scope="module")
def reference_url() -> Iterator[str]:
    with serve_in_background() as url:
        yield url


class _Checked:
    """An MCP server's app behind a bearer check, recording what each request carried."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.seen: list[str] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = dict(scope["headers"]).get(b"authorization", b"").decode()
            self.seen.append(given)
            if given != f"Bearer {SECRET}":
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b""})
                return
        await self.app(scope, receive, send)


@pytest.fixture
def checked_peer(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, _Checked]]:
    monkeypatch.syspath_prepend(str(Path(PEER).parent))
    import mcp_peer  # the agent tests' peer, over streamable HTTP in this process

    app = _Checked(mcp_peer.server.streamable_http_app())
    with live_server(app) as base:
        yield f"{base}/mcp", app


def _config(tmp_path: Path, url: str) -> Path:
    toml = tmp_path / "visus.toml"
    toml.write_text(
        f'[[mcp.servers]]\nname = "docs"\nurl = "{url}"\n'
        'headers = { Authorization = "Bearer ${DOCS_TOKEN}" }\n',
        encoding="utf-8",
    )
    return toml


def _everything_written(app: FastAPI, data: Path) -> str:
    """Every byte visus keeps for ``app``: its data folder and its store's instances."""
    files = [p for p in data.rglob("*") if p.is_file()]
    texts = [p.read_bytes().decode("utf-8", "replace") for p in files]
    texts.append(repr(app.state.registry.store.list_instances()))
    return "\n".join(texts)


@pytest.mark.parametrize("where", ["files", "postgresql"])
async def test_a_header_named_by_env_reaches_the_server_and_is_stored_nowhere(
    tmp_path: Path,
    reference_url: str,
    checked_peer: tuple[str, _Checked],
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
    where: str,
) -> None:
    url, peer = checked_peer
    monkeypatch.setenv("DOCS_TOKEN", SECRET)
    store = request.getfixturevalue("pg_url") if where == "postgresql" else None
    data = tmp_path / "data"
    app = create_main_app(
        data=data,
        model="reference",
        settings=ProviderSettings(reference_url=reference_url, env={}),
        web=False,
        mcp=False,
        store=store,
        config=load_config(_config(tmp_path, url), env={}),
    )
    try:
        async with app.router.lifespan_context(app), served.client(app, timeout=60) as c:
            body = {"model": "reference", "mcp_servers": [{"name": "docs"}]}
            r = await c.post("/v1/instances", json=body)
            assert r.status_code == 201, r.text
            seen = await _answer(c, r.json()["id"], "call docs__picture {}")
            assert [(i["width"], i["height"]) for i in seen["images"]] == [(64, 32)]
            assert f"Bearer {SECRET}" in peer.seen  # the value the variable holds was sent
            assert "${DOCS_TOKEN}" not in peer.seen
            written = await asyncio.to_thread(_everything_written, app, data)  # off the loop
    finally:
        app.state.registry.store.close()
    assert SECRET not in written
    assert "docs" in written  # the instance names the server; the header stays in memory


def test_a_header_naming_an_unset_variable_is_refused_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DOCS_TOKEN", raising=False)
    cfg = load_config(_config(tmp_path, "https://mcp.example/mcp"), env={})
    with pytest.raises(ConfigError, match=r"'docs' headers.Authorization: \$\{DOCS_TOKEN\}"):
        create_main_app(data=tmp_path / "data", model="reference", config=cfg)


def _not_private(data: Path) -> list[str]:
    """Every file and folder under ``data`` (and ``data`` itself) that its group or
    others may read, list or enter (issue 23: folders were 0755, naming every session)."""
    return [
        f"{p.relative_to(data)} {stat.filemode(p.stat().st_mode)}"
        for p in [data, *sorted(data.rglob("*"))]
        if (p.is_file() or p.is_dir()) and p.stat().st_mode & 0o077
    ]


async def test_records_and_instance_files_are_the_owners_only(
    tmp_path: Path, reference_url: str
) -> None:
    data = tmp_path / "data"
    app = create_main_app(
        data=data,
        model="reference",
        settings=ProviderSettings(reference_url=reference_url, env={}),
        config=load_config(env={}),
    )
    png = make_grid(1, 2, seed=5)[0]
    image = {"data": base64.b64encode(png).decode(), "media_type": "image/png"}
    async with app.router.lifespan_context(app), served.client(app, timeout=60) as c:
        iid = app.state.default_instance
        frame: dict[str, Any] = {
            "type": "user.message",
            "session": "web-private",
            "payload": {"text": "what is this?", "images": [image]},
        }
        r = await c.post(f"/v1/instances/{iid}/tether", json=frame)
        assert r.status_code == 202, r.text
        await _done(c, iid)
        upload = {"filename": "notes.txt", "contentBase64": "eA==", "mimeType": "text/plain"}
        r = await c.post("/web/api/sessions/web-private/attachments", json=upload)
        assert r.status_code == 201, r.text
        r = await c.patch("/web/api/sessions/web-private", json={"title": "private"})
        assert r.status_code == 200, r.text
        created = await c.post("/v1/instances", json={"model": "reference"})
        assert created.status_code == 201, created.text
    kinds = {p.suffix for p in data.rglob("*") if p.is_file()}
    assert {".jsonl", ".json"} <= kinds  # a session record and instance files were written
    assert _not_private(data) == []


async def _done(c: Any, iid: str) -> None:
    after = 0
    for _ in range(60):
        page = (
            await c.get(f"/v1/instances/{iid}/tether/poll", params={"after_seq": after, "wait": 2})
        ).json()
        after = page["next_seq"]
        if any(f["type"] in ("assistant.done", "error") for f in page["frames"]):
            return
    raise AssertionError("no answer")


def test_an_mcp_servers_log_is_the_owners_only(tmp_path: Path) -> None:
    from visus.agent.mcp_client import McpServerSpec, _Connection

    spec = McpServerSpec(name="peer", command=sys.executable, args=(PEER,))
    log = _Connection(spec, tmp_path / "logs")._open_log()
    log.close()
    assert stat.S_IMODE((tmp_path / "logs" / "mcp-peer.log").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "logs").stat().st_mode) == 0o700
