"""Issue 23's follow-ups, replayed from outside against a real `visus serve` app over
HTTP: the operator's switch for URL fetches (`[server] fetch_urls`, `--no-fetch-urls`)
holds on every surface that fetches a URL a client names: the agents' `view` and
`vision_analyze` tools (tether API) and `/mcp`'s `vision_analyze` (the official MCP
client), and `visus mcp` over stdio; and the operator's list of the models a client
may pick (`[server] models`) holds on instance creation, `/mcp`'s `vision_analyze` and
the agents' own analyze tools."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

# anyio is a pytest plugin, so pytest rewrites its modules on first import; when the
# stdio client first imports this one mid-test, CPython 3.11.7's ast.parse can fail
# there ("AST constructor recursion depth mismatch", as in tether/test_openapi.py).
import anyio._core._subprocesses  # noqa: F401
import httpx
import httpx2
import pytest
from fastapi import FastAPI
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, TextContent

from tests.app.test_boundary import _tool_results as _results
from tests.app.test_boundary import _turn, png
from tests.tether.doubles import live_server
from visus.app import create_main_app
from visus.config import load_config
from visus.providers import ProviderSettings
from visus.reference.server import serve_in_background

#: A public https URL: with fetches on, the SSRF gate lets it through to the network
#: (which the tests block); with them off, nothing is tried.
PUBLIC = "https://images.example.com/chart.png"
#: A loopback https URL: with fetches on, the SSRF gate refuses it by its address.
LOOPBACK = "https://127.0.0.1:9/chart.png"
KEYS = {"anthropic": "sk-ant-test-0000", "openai": "sk-test-0000"}


@pytest.fixture(scope="module")
def reference_url() -> Iterator[str]:
    with serve_in_background() as url:
        yield url


@pytest.fixture
def config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty visus.toml of the test's own (the operator's config)."""
    toml = tmp_path / "conf" / "visus.toml"
    toml.parent.mkdir()
    toml.write_text("")
    monkeypatch.setenv("VISUS_CONFIG", str(toml))
    monkeypatch.delenv("VISUS_DATA", raising=False)
    return toml


def _app(tmp_path: Path, url: str, **kw: Any) -> FastAPI:
    return create_main_app(
        data=tmp_path / "data",
        model="reference",
        # Keys the operator pays with (never used: no turn runs on these models).
        settings=ProviderSettings(reference_url=url, env={}, api_keys=KEYS),
        web=False,
        **kw,
    )


@asynccontextmanager
async def _served(app: FastAPI) -> AsyncIterator[tuple[str, httpx.AsyncClient]]:
    """``app`` on a loopback port (uvicorn), and an HTTP client carrying its token."""
    with live_server(app) as base:
        headers = {"Authorization": f"Bearer {app.state.token}"}
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=60) as client:
            yield base, client


def _calls(*calls: tuple[str, dict[str, Any]]) -> str:
    return "\n".join(f"call {tool} {json.dumps(args)}" for tool, args in calls)


def _text(result: CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, TextContent))


def _mcp(base: str, token: str) -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    return Client(streamable_http_client(f"{base}/mcp", http_client=http))


URL_CALLS = (
    ("view", {"path": PUBLIC}),
    ("vision_analyze", {"prompt": "what is it?", "file_url": PUBLIC}),
    ("video_analyze", {"prompt": "what happens?", "file_url": PUBLIC}),
)


@pytest.mark.parametrize("where", ["config", "command line"])
async def test_an_operator_who_turns_url_fetches_off_gets_no_fetch_from_any_surface(
    tmp_path: Path, config_file: Path, reference_url: str, where: str
) -> None:
    if where == "config":
        config_file.write_text("[server]\nfetch_urls = false\n")
        app = _app(tmp_path, reference_url, config=load_config())
    else:
        app = _app(tmp_path, reference_url, fetch_urls=False)
    assert app.state.policy.fetch_urls is False
    async with _served(app) as (base, client):
        iid = app.state.default_instance
        done = await _turn(client, iid, _calls(*URL_CALLS))
        assert done["type"] == "assistant.done", done
        results = _results(app, iid)
        assert [r.is_error for r in results] == [True, True, True], results
        for r in results:
            assert "this server fetches no URLs" in r.text, r.text
            assert "fetch_urls = false" in r.text
            assert "--no-fetch-urls" in r.text
        assert results[0].text.startswith("refused (outside_reach)")
        assert all(r.text.startswith("URL_BLOCKED") for r in results[1:])

        async with _mcp(base, app.state.token) as mcp:
            r = await mcp.call_tool("vision_analyze", {"prompt": "what?", "file_url": PUBLIC})
            assert r.is_error
            assert "url_blocked" in _text(r).lower(), _text(r)
            assert "fetch_urls = false" in _text(r)


async def test_url_fetches_are_on_by_default_and_go_through_the_ssrf_gate(
    tmp_path: Path, config_file: Path, reference_url: str
) -> None:
    app = _app(tmp_path, reference_url, config=load_config())
    assert app.state.policy.fetch_urls is True
    async with _served(app) as (base, client):
        iid = app.state.default_instance
        await _turn(client, iid, _calls(("view", {"path": LOOPBACK})))
        [result] = _results(app, iid)
        assert result.is_error
        assert "loopback" in result.text, result.text
        assert "fetch_urls" not in result.text
        async with _mcp(base, app.state.token) as mcp:
            r = await mcp.call_tool("vision_analyze", {"prompt": "what?", "file_url": LOOPBACK})
            assert r.is_error
            assert "loopback" in _text(r), _text(r)
            assert "fetch_urls" not in _text(r)


async def test_visus_mcp_over_stdio_takes_the_switch(tmp_path: Path, config_file: Path) -> None:
    visus = Path(sys.executable).with_name("visus")
    params = StdioServerParameters(
        command=str(visus),
        args=["mcp", "--root", str(tmp_path), "--no-fetch-urls"],
        env={**os.environ, "VISUS_CONFIG": str(config_file)},
    )
    async with Client(params) as mcp:
        r = await mcp.call_tool("vision_analyze", {"prompt": "what?", "file_url": PUBLIC})
        assert r.is_error
        assert "url_blocked" in _text(r).lower(), _text(r)
        assert "--no-fetch-urls" in _text(r)


# --- the models a client may pick ------------------------------------------------------

OPUS = "anthropic:claude-opus-4-1"


async def test_a_client_picks_only_the_models_the_operator_allows(
    tmp_path: Path, config_file: Path, reference_url: str
) -> None:
    """Issue 23 (left open): a token holder could create an instance on, or have
    vision_analyze ask, any configured model, paid with the operator's keys. By default
    only the server's own model and the offline reference model may be named."""
    app = _app(tmp_path, reference_url, config=load_config())
    files = tmp_path / "data" / "files"
    (files / "pic.png").write_bytes(png())
    async with _served(app) as (base, client):
        r = await client.post("/v1/instances", json={"model": OPUS})
        assert r.status_code == 403, r.text
        error = r.json()["error"]
        assert error["code"] == "forbidden"
        assert (
            f"{OPUS!r} is not a model this server's operator lets clients pick"
            in (error["message"])
        )
        assert "allowed: reference ([server] models in visus.toml)" in error["message"]
        assert (await client.post("/v1/instances", json={"model": "reference"})).status_code == 201

        async with _mcp(base, app.state.token) as mcp:
            asked = {"prompt": "what colour?", "path": "pic.png"}
            r = await mcp.call_tool("vision_analyze", {**asked, "model": OPUS})
            assert r.is_error
            refusal = json.loads(_text(r))
            assert (refusal["reason"], refusal["field"]) == ("forbidden", "model")
            assert "allowed: reference" in refusal["message"]
            ok = await mcp.call_tool("vision_analyze", {**asked, "model": "reference"})
            assert not ok.is_error, _text(ok)

        # The agents' own analyze tools: a prompt cannot pick another model either.
        iid = app.state.default_instance
        call = {"prompt": "what colour?", "file_path": "pic.png", "model": OPUS}
        await _turn(client, iid, _calls(("vision_analyze", call)))
        [result] = _results(app, iid)
        assert result.is_error
        assert result.text.startswith("refused (forbidden): model: "), result.text
        assert "allowed: reference" in result.text


async def test_the_operators_list_names_the_models_clients_may_pick(
    tmp_path: Path, config_file: Path, reference_url: str
) -> None:
    config_file.write_text('[server]\nmodels = ["claude-opus-4-1"]\n')
    app = _app(tmp_path, reference_url, config=load_config())
    assert app.state.policy.models.refs == ("claude-opus-4-1", "reference")
    async with _served(app) as (_, client):
        # Spelled with its provider or without, it is the listed model.
        r = await client.post("/v1/instances", json={"model": OPUS})
        assert r.status_code == 201, r.text
        # The server's own model stays allowed; the others are refused.
        assert (await client.post("/v1/instances", json={"model": "reference"})).status_code == 201
        r = await client.post("/v1/instances", json={"model": "gpt-4.1"})
        assert r.status_code == 403
        assert "allowed: claude-opus-4-1, reference" in r.json()["error"]["message"]

    config_file.write_text('[server]\nmodels = ["*"]\n')
    anything = _app(tmp_path / "any", reference_url, config=load_config())
    async with _served(anything) as (_, client):
        r = await client.post("/v1/instances", json={"model": "gpt-4.1"})
        assert r.status_code == 201, r.text
