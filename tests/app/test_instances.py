"""Instances made over the tether API of `visus serve`'s app: the tools and roots a
client names are checked, never trusted to create anything."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from tests.served import auth
from visus.app import create_main_app
from visus.providers import ProviderSettings
from visus.reference.server import serve_in_background


@pytest.fixture(scope="module")
def reference_url() -> object:
    with serve_in_background() as url:
        yield url


def _app(tmp_path: Path, url: str) -> FastAPI:
    return create_main_app(
        data=tmp_path / "data",
        model="reference",
        settings=ProviderSettings(reference_url=url, env={}),
        web=False,
        mcp=False,
    )


async def _turn(client: httpx.AsyncClient, iid: str, text: str) -> list[dict]:  # type: ignore[type-arg]
    r = await client.post(
        f"/v1/instances/{iid}/tether", json={"type": "user.message", "payload": {"text": text}}
    )
    assert r.status_code == 202, r.text
    after, frames = 0, []
    for _ in range(60):
        r = await client.get(
            f"/v1/instances/{iid}/tether/poll", params={"after_seq": after, "wait": 2}
        )
        body = r.json()
        frames += body["frames"]
        after = body["next_seq"]
        if any(f["type"] in {"assistant.done", "error"} for f in frames):
            return frames
    raise AssertionError(f"no answer: {frames}")


async def test_unknown_tool_names_are_refused(tmp_path: Path, reference_url: str) -> None:
    app = _app(tmp_path, reference_url)
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=transport, base_url="http://127.0.0.1", headers=auth(app)
        ) as client,
    ):
        r = await client.post("/v1/instances", json={"model": "reference", "tools": ["viw"]})
        assert r.status_code == 400, r.text
        message = r.json()["error"]["message"]
        assert "'viw'" in message
        assert "view" in message.replace("'viw'", "")  # the known names are listed
        listed = (await client.get("/v1/instances")).json()["instances"]
        assert [i["id"] for i in listed] == [app.state.default_instance]
        r = await client.post("/v1/instances", json={"model": "reference", "tools": ["view"]})
        assert r.status_code == 201, r.text
        assert r.json()["tools"] == ["view"]


async def test_named_roots_are_not_created_but_the_served_files_folder_is(
    tmp_path: Path, reference_url: str
) -> None:
    app = create_main_app(
        data=tmp_path / "data",
        model="reference",
        settings=ProviderSettings(reference_url=reference_url, env={}),
        web=False,
        mcp=False,
        roots=[tmp_path],
    )
    absent = tmp_path / "absent" / "deep"
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=transport, base_url="http://127.0.0.1", headers=auth(app), timeout=60
        ) as client,
    ):
        r = await client.post("/v1/instances", json={"model": "reference", "roots": [str(absent)]})
        assert r.status_code == 201, r.text
        frames = await _turn(client, r.json()["id"], "hello")
        assert frames[-1]["type"] == "assistant.done", frames
        assert not (tmp_path / "absent").exists()
    # With no roots named, the operator's default root is the data folder's files
    # folder, made at start so the operator knows where to put files.
    default = _app(tmp_path / "other", reference_url)
    assert default.state.policy.roots == ((tmp_path / "other" / "data" / "files").resolve(),)
    assert (tmp_path / "other" / "data" / "files").is_dir()


async def test_the_web_chats_instance_cannot_be_deleted(tmp_path: Path, reference_url: str) -> None:
    app = create_main_app(
        data=tmp_path / "data",
        model="reference",
        settings=ProviderSettings(reference_url=reference_url, env={}),
        mcp=False,
    )
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=transport, base_url="http://127.0.0.1", headers=auth(app)
        ) as client,
    ):
        iid = app.state.default_instance
        r = await client.delete(f"/v1/instances/{iid}")
        assert r.status_code == 409, r.text
        assert r.json()["error"]["code"] == "in_use"
        assert "web chat" in r.json()["error"]["message"]
        assert (await client.get("/web/api/config")).status_code == 200  # the page still works
        other = (await client.post("/v1/instances", json={"model": "reference"})).json()["id"]
        assert (await client.delete(f"/v1/instances/{other}")).status_code == 204
        assert (await client.delete("/v1/instances/i-nope")).status_code == 404


async def test_instances_list_the_roots_their_agents_reach(tmp_path: Path) -> None:
    """The web chat's instance (no roots named: every root the operator allows) was listed
    with ``"roots": []`` by ``GET /v1/instances`` and MCP ``tether_instances``, though its
    agent reads ``<data>/files``; a named root is listed as the agent resolves it."""
    from mcp import Client

    from visus.mcp_server import build_server
    from visus.tether.client import TetherClient

    app = create_main_app(
        data=tmp_path / "data",
        model="reference",
        settings=ProviderSettings(reference_url="http://127.0.0.1:9", env={}),
        web=False,
        mcp=False,
    )
    files = str((tmp_path / "data" / "files").resolve())
    (tmp_path / "data" / "files" / "shots").mkdir()
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=transport, base_url="http://127.0.0.1", headers=auth(app)
        ) as client,
    ):
        named = f"{tmp_path}/data/files/./shots/"
        r = await client.post("/v1/instances", json={"model": "reference", "roots": [named]})
        assert r.status_code == 201, r.text
        assert r.json()["roots"] == [f"{files}/shots"]
        instances = (await client.get("/v1/instances")).json()["instances"]
        listed = {i["id"]: i["roots"] for i in instances}
        assert listed == {app.state.default_instance: [files], r.json()["id"]: [f"{files}/shots"]}
        webchat = (await client.get(f"/v1/instances/{app.state.default_instance}")).json()
        assert webchat["roots"] == [files]
        tether = TetherClient("http://127.0.0.1", app.state.token, transport=transport)
        async with tether, Client(build_server(tether), mode="legacy") as mcp:
            answer = await mcp.call_tool("tether_instances", {})
        seen = {i["id"]: i["roots"] for i in json.loads(answer.content[0].text)}  # type: ignore[union-attr]
        assert seen == listed


async def test_odd_create_and_poll_arguments_are_400_naming_the_field(tmp_path: Path) -> None:
    """A NUL in a root was a 500 (``ValueError: embedded null byte`` in the policy); a
    misspelt field (``root``) was dropped, giving the instance every root the operator
    allows instead of the one meant; a session with a NUL was 200 on files and a
    PostgreSQL ``DataError`` on the database."""
    app = create_main_app(
        data=tmp_path / "data",
        model="reference",
        settings=ProviderSettings(reference_url="http://127.0.0.1:9", env={}),
        web=False,
        mcp=False,
    )
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=transport, base_url="http://127.0.0.1", headers=auth(app)
        ) as client,
    ):
        for body, field in (
            ({"model": "reference", "roots": [f"{tmp_path}/\x00x"]}, "body.roots.0"),
            ({"model": "reference", "root": [str(tmp_path)]}, "body.root"),
            ({"model": "reference", "tool": ["view"]}, "body.tool"),
        ):
            r = await client.post("/v1/instances", json=body)
            assert r.status_code == 400, (body, r.status_code, r.text)
            assert r.json()["error"]["field"] == field, r.text
        instances = (await client.get("/v1/instances")).json()["instances"]
        assert [i["id"] for i in instances] == [app.state.default_instance]
        poll = f"/v1/instances/{app.state.default_instance}/tether"
        for route in ("poll", "stream"):
            for session in ("\x00", "a/b", "s" * 500):
                r = await client.get(f"{poll}/{route}", params={"session": session})
                assert r.status_code == 400, (route, session, r.text)
                assert r.json()["error"]["field"] == "query.session", r.text
        r = await client.get(f"{poll}/poll", params={"session": "s1"})
        assert r.status_code == 200, r.text
        # An instance id no instance can have: 400 naming it on every route, whatever the
        # store (PostgreSQL answered a DataError, files 404), and never echoed whole.
        for method, route in (
            ("GET", ""),
            ("DELETE", ""),
            ("POST", "/tether"),
            ("GET", "/tether/poll"),
            ("GET", "/tether/stream"),
        ):
            for bad in ("%00", "i-" + "x" * 5000, "%E2%9C%93"):
                r = await client.request(
                    method, f"/v1/instances/{bad}{route}", json={} if method == "POST" else None
                )
                assert r.status_code == 400, (method, route, bad[:20], r.text[:200])
                assert r.json()["error"]["field"] == "path.instance_id", r.text[:200]
                assert len(r.content) < 1000
        r = await client.get("/v1/instances/i-nothere")
        assert r.status_code == 404, r.text
