"""MCP servers for `visus serve`'s instances: ``--mcp`` (every instance, unless a create
request names some), the create request's ``mcp_servers`` (names of the operator's
servers; a URL of its own only when the operator allows it, never a command), and a
streamable-HTTP server mounted by URL."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from tests.served import auth
from tests.tether.doubles import live_server
from visus.agent import McpServerSpec
from visus.agent.mcp_client import McpMounts
from visus.agent.policy import OperatorPolicy
from visus.app import create_main_app
from visus.config import load_config
from visus.errors import BlockedURLError, PolicyError
from visus.net import acheck_url
from visus.providers import ProviderSettings
from visus.reference.server import serve_in_background

PEER = str(Path(__file__).parents[1] / "agent" / "mcp_peer.py")
SRC = str(Path(__file__).parents[2] / "src")
_JSON = re.compile(r"```json\n(.*?)\n```", re.DOTALL)


@pytest.fixture(scope="module")
def reference_url() -> Iterator[str]:
    with serve_in_background() as url:
        yield url


def _app(
    tmp_path: Path,
    url: str,
    servers: list[McpServerSpec] | None = None,
    env: dict[str, str] | None = None,
) -> FastAPI:
    return create_main_app(
        data=tmp_path / "data",
        model="reference",
        settings=ProviderSettings(reference_url=url, env={}),
        web=False,
        mcp=False,
        mcp_servers=servers or [],
        config=load_config(env=env or {}),
    )


async def _answer(client: httpx.AsyncClient, iid: str, text: str) -> dict[str, Any]:
    r = await client.post(
        f"/v1/instances/{iid}/tether", json={"type": "user.message", "payload": {"text": text}}
    )
    assert r.status_code == 202, r.text
    after = 0
    for _ in range(60):
        body = (
            await client.get(
                f"/v1/instances/{iid}/tether/poll", params={"after_seq": after, "wait": 2}
            )
        ).json()
        after = body["next_seq"]
        for f in body["frames"]:
            if f["type"] == "error":
                raise AssertionError(f)
            if f["type"] == "assistant.done":
                data = json.loads(_JSON.findall(f["payload"]["text"])[0])
                assert isinstance(data, dict)
                return data
    raise AssertionError("no answer")


def _peer_entry() -> dict[str, Any]:
    return {
        "name": "peer",
        "command": sys.executable,
        "args": [PEER],
        "env": {"PYTHONPATH": SRC},
    }


async def test_serve_mcp_flag_and_create_request_servers(
    tmp_path: Path, reference_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "visus.toml").write_text("")
    monkeypatch.setenv("VISUS_CONFIG", str(tmp_path / "visus.toml"))
    flag = McpServerSpec.parse(f"peer={sys.executable} {PEER}")
    flag = McpServerSpec(name="peer", command=flag.command, args=flag.args, env={"PYTHONPATH": SRC})
    other = McpServerSpec(name="other", command=flag.command, args=flag.args, env=flag.env)
    app = _app(tmp_path, reference_url, [flag, other])
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=transport, base_url="http://127.0.0.1", headers=auth(app), timeout=60
        ) as client,
    ):
        # --mcp: the default instance mounts every operator server
        seen = await _answer(client, app.state.default_instance, "call peer__picture {}")
        assert [(i["width"], i["height"]) for i in seen["images"]] == [(64, 32)]

        # a create request names the operator's servers it wants: those, and only those
        body = {"model": "reference", "mcp_servers": [{"name": "other"}]}
        r = await client.post("/v1/instances", json=body)
        assert r.status_code == 201, r.text
        seen = await _answer(client, r.json()["id"], "call other__picture {}")
        assert [(i["width"], i["height"]) for i in seen["images"]] == [(64, 32)]
        runner = app.state.registry.get(r.json()["id"]).runner
        assert [s.name for s in runner.agent.mcp.specs] == ["other"]

        # it never gives a program to start, and names no server the operator lacks
        body = {"model": "reference", "mcp_servers": [{**_peer_entry(), "name": "third"}]}
        r = await client.post("/v1/instances", json=body)
        assert r.status_code == 403, r.text
        assert "cannot give command" in r.json()["error"]["message"]
        r = await client.post("/v1/instances", json={**body, "mcp_servers": [{"name": "third"}]})
        assert r.status_code == 403, r.text
        assert "configured: peer, other" in r.json()["error"]["message"]
        bad = {"model": "reference", "mcp_servers": [{"name": "x", "url": "h", "oops": 1}]}
        assert (await client.post("/v1/instances", json=bad)).status_code == 400  # validation


async def test_a_streamable_http_server_mounted_by_url(
    tmp_path: Path, reference_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(Path(PEER).parent))
    import mcp_peer  # the same peer, served over streamable HTTP in this process

    # A create request's URL is a remote client's choice: taken only when the operator
    # allows client URLs, and loopback only when it allows private addresses too.
    allow = {"VISUS_MCP__ALLOW_CLIENT_URLS": "true", "VISUS_MCP__ALLOW_PRIVATE_URLS": "true"}
    with live_server(mcp_peer.server.streamable_http_app()) as base:
        app = _app(tmp_path, reference_url, env=allow)
        transport = httpx.ASGITransport(app=app)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(
                transport=transport, base_url="http://127.0.0.1", headers=auth(app), timeout=60
            ) as c,
        ):
            body = {"model": "reference", "mcp_servers": [{"name": "web", "url": f"{base}/mcp"}]}
            r = await c.post("/v1/instances", json=body)
            assert r.status_code == 201, r.text
            seen = await _answer(c, r.json()["id"], "call web__picture {}")
            assert [(i["width"], i["height"]) for i in seen["images"]] == [(64, 32)]


async def test_a_create_request_url_to_this_servers_network_is_refused(tmp_path: Path) -> None:
    policy = OperatorPolicy.at_start(
        load_config(env={"VISUS_MCP__ALLOW_CLIENT_URLS": "true"}), data=tmp_path
    )
    [spec] = policy.narrow_mcp([{"name": "meta", "url": "http://127.0.0.1:9/mcp"}])
    assert spec.public_only
    mounts = McpMounts([spec])
    tools: list[Any] = []
    try:
        [warning] = await mounts.start(tools.append)
    finally:
        await mounts.aclose()
    assert tools == []
    assert "did not start" in warning
    assert "127.0.0.1 is a loopback address" in warning
    for url, why in [
        ("https://169.254.169.254/mcp", "link-local"),
        ("https://10.0.0.7/mcp", "private"),
        ("https://localhost/mcp", "loopback"),
    ]:
        with pytest.raises(BlockedURLError, match=why):
            await acheck_url(url)
    with pytest.raises(BlockedURLError, match=r"resolves to 10\.1\.2\.3 is a private"):
        await acheck_url("https://internal.example/mcp", resolver=lambda h, p: ["10.1.2.3"])
    await acheck_url("https://mcp.example/mcp", resolver=lambda h, p: ["93.184.216.34"])

    private = OperatorPolicy.at_start(
        load_config(
            env={"VISUS_MCP__ALLOW_CLIENT_URLS": "true", "VISUS_MCP__ALLOW_PRIVATE_URLS": "true"}
        ),
        data=tmp_path,
    )
    [spec] = private.narrow_mcp([{"name": "meta", "url": "http://127.0.0.1:9/mcp"}])
    assert not spec.public_only  # the operator's choice: then loopback is allowed
    closed = OperatorPolicy.at_start(load_config(env={}), data=tmp_path)
    with pytest.raises(PolicyError, match="allow_client_urls"):
        closed.narrow_mcp([{"name": "meta", "url": "https://mcp.example/mcp"}])
