"""Issue 23's attacks on `visus serve`'s app, replayed over its tether API: a client may
only narrow what the operator allowed at start (roots, MCP servers, write tools), no
agent reaches visus's own files, and send_image sends images only."""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from PIL import Image

from visus.app import create_main_app
from visus.providers import ProviderSettings
from visus.record.messages import ToolResult
from visus.reference.server import serve_in_background

SECRET = "TOPSECRET-0451"


@pytest.fixture(scope="module")
def reference_url() -> Iterator[str]:
    with serve_in_background() as url:
        yield url


def png(color: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (40, 30), color).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """An allowed folder with a picture and a note, and a secret folder beside it."""
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    allowed.mkdir()
    outside.mkdir()
    (allowed / "pic.png").write_bytes(png())
    (allowed / "notes.txt").write_text("just notes\n")
    (outside / "secret.txt").write_text(SECRET + "\n")
    (outside / "secret.png").write_bytes(png((1, 2, 3)))
    (allowed / "link").symlink_to(outside)
    config = tmp_path / "conf" / "visus.toml"
    config.parent.mkdir()
    config.write_text("")
    monkeypatch.setenv("VISUS_CONFIG", str(config))
    return {"allowed": allowed, "outside": outside, "config": config, "data": tmp_path / "data"}


def _app(places: dict[str, Path], url: str, **kw: Any) -> FastAPI:
    kw.setdefault("roots", [places["allowed"]])
    return create_main_app(
        data=places["data"],
        model="reference",
        settings=ProviderSettings(reference_url=url, env={}),
        web=False,
        mcp=False,
        **kw,
    )


@asynccontextmanager
async def _client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    token = app.state.token
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=transport, base_url="http://127.0.0.1", headers=headers, timeout=60
        ) as client,
    ):
        yield client


async def _turn(client: httpx.AsyncClient, iid: str, text: str) -> dict[str, Any]:
    """Run one turn in session ``s1``; its last frame (``assistant.done`` or ``error``)."""
    frame = {"type": "user.message", "session": "s1", "payload": {"text": text}}
    r = await client.post(f"/v1/instances/{iid}/tether", json=frame)
    assert r.status_code == 202, r.text
    after = r.json()["seq"]
    for _ in range(60):
        body = (
            await client.get(
                f"/v1/instances/{iid}/tether/poll", params={"after_seq": after, "wait": 2}
            )
        ).json()
        after = body["next_seq"]
        for f in body["frames"]:
            if f["type"] in {"assistant.done", "error"}:
                return dict(f)
    raise AssertionError("no answer")


def _tool_results(app: FastAPI, iid: str) -> list[ToolResult]:
    agent = app.state.registry.get(iid).runner.agent
    return [m for m in agent.sessions.load("s1").messages if isinstance(m, ToolResult)]


def _call(tool: str, **args: Any) -> str:
    return f"call {tool} {json.dumps(args)}"


async def test_a_create_request_cannot_widen_the_roots(
    places: dict[str, Path], reference_url: str
) -> None:
    app = _app(places, reference_url)
    async with _client(app) as client:
        for roots in (["/"], [str(places["outside"])], [str(places["allowed"] / "link")]):
            r = await client.post("/v1/instances", json={"model": "reference", "roots": roots})
            assert r.status_code == 403, (roots, r.text)
            error = r.json()["error"]
            assert error["code"] == "outside_reach"
            assert "a create request may only narrow them" in error["message"]
        assert len((await client.get("/v1/instances")).json()["instances"]) == 1  # the default

        # Narrowing works, and the agent sees no file outside, by path or by symlink.
        inner = places["allowed"] / "inner"
        inner.mkdir()
        r = await client.post("/v1/instances", json={"model": "reference", "roots": [str(inner)]})
        assert r.status_code == 201, r.text
        for iid in (r.json()["id"], app.state.default_instance):
            secret = str(places["outside"] / "secret.txt")
            via_link = str(places["allowed"] / "link" / "secret.png")
            done = await _turn(
                client,
                iid,
                "\n".join(
                    [
                        _call("read", path=secret),
                        _call("send_image", path=str(places["outside"] / "secret.png")),
                        _call("send_image", path=via_link),
                    ]
                ),
            )
            assert done["type"] == "assistant.done", done
            assert done["payload"].get("images", []) == []
            results = _tool_results(app, iid)
            assert [r.is_error for r in results] == [True, True, True]
            assert all("outside the allowed roots" in r.text for r in results), results
            assert not any(SECRET in r.text for r in results)


async def test_send_image_sends_images_not_files_rendered_as_images(
    places: dict[str, Path], reference_url: str
) -> None:
    app = _app(places, reference_url)
    async with _client(app) as client:
        iid = app.state.default_instance
        notes = str(places["allowed"] / "notes.txt")
        done = await _turn(client, iid, _call("send_image", path=notes))
        assert done["payload"].get("images", []) == []
        [result] = _tool_results(app, iid)
        assert result.is_error
        assert "not an image file" in result.text

        done = await _turn(
            client, iid, _call("send_image", path=str(places["allowed"] / "pic.png"))
        )
        [image] = done["payload"]["images"]
        assert image["media_type"] == "image/png"


async def test_write_tools_are_off_unless_the_operator_turns_them_on(
    places: dict[str, Path], reference_url: str
) -> None:
    app = _app(places, reference_url)
    async with _client(app) as client:
        runner = app.state.registry.get(app.state.default_instance).runner
        assert "edit" not in runner.agent.tools.names()
        assert {"read", "view", "send_image"} <= set(runner.agent.tools.names())
        r = await client.post("/v1/instances", json={"model": "reference", "tools": ["edit"]})
        assert r.status_code == 403, r.text
        assert r.json()["error"]["code"] == "forbidden"
        assert "--allow-write" in r.json()["error"]["message"]


async def test_an_agent_cannot_edit_the_servers_config_and_gates_are_read_once(
    places: dict[str, Path], reference_url: str
) -> None:
    config = places["config"]
    # The operator's root holds visus's own config file and data folder; edits are on.
    app = _app(places, reference_url, roots=[config.parents[1]], write_tools=True)
    async with _client(app) as client:
        iid = app.state.default_instance
        record = str(next(places["data"].rglob("instance.json")))
        text = "\n".join(
            [
                _call("read", path=str(config)),
                _call("edit", path=str(config), old_string="", new_string="[mcp]\n"),
                _call("read", path=record),
            ]
        )
        await _turn(client, iid, text)
        results = _tool_results(app, iid)
        assert [r.is_error for r in results] == [True, True, True], results
        assert all("among visus's own files" in r.text for r in results), results
        assert config.read_text() == ""

        # Whatever writes the file now, the running server's gates stay as they started.
        config.write_text(
            "[mcp]\nallow_client_urls = true\n\n[server]\nroots = ['/']\n\n"
            f"[[mcp.servers]]\nname = 'evil'\ncommand = '{sys.executable}'\n"
        )
        os.environ["VISUS_MCP__ALLOW_PRIVATE_URLS"] = "true"
        try:
            for body in (
                {"mcp_servers": [{"name": "evil"}]},
                {"mcp_servers": [{"name": "web", "url": "https://mcp.example.com/mcp"}]},
                {"roots": ["/"]},
            ):
                r = await client.post("/v1/instances", json={"model": "reference", **body})
                assert r.status_code == 403, (body, r.text)
        finally:
            del os.environ["VISUS_MCP__ALLOW_PRIVATE_URLS"]


async def test_a_create_request_cannot_start_a_program(
    places: dict[str, Path], reference_url: str, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    program = {
        "name": "x",
        "command": sys.executable,
        "args": ["-c", f"open({str(marker)!r}, 'w')"],
    }
    app = _app(places, reference_url)
    async with _client(app) as client:
        for entry in (
            program,
            {"name": "x", "url": "https://a.example/mcp", "headers": {"a": "b"}},
        ):
            r = await client.post(
                "/v1/instances", json={"model": "reference", "mcp_servers": [entry]}
            )
            assert r.status_code == 403, r.text
            error = r.json()["error"]
            assert error["code"] == "forbidden"
            assert "a create request cannot give" in error["message"]
        # Not even through the old switch, set after start or before.
        os.environ["VISUS_MCP__ALLOW_REMOTE_COMMANDS"] = "true"
        try:
            r = await client.post(
                "/v1/instances", json={"model": "reference", "mcp_servers": [program]}
            )
            assert r.status_code == 403, r.text
        finally:
            del os.environ["VISUS_MCP__ALLOW_REMOTE_COMMANDS"]
        r = await client.post(
            "/v1/instances", json={"model": "reference", "mcp_servers": [{"name": "nope"}]}
        )
        assert r.status_code == 403, r.text
        assert "no MCP server named 'nope'" in r.json()["error"]["message"]
    assert not marker.exists()


async def test_mcp_vision_analyze_keeps_the_configuration_read_at_start(
    places: dict[str, Path], reference_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/mcp's vision_analyze re-read visus.toml on every call (redteam): whatever was
    written there later decided its model and provider. It resolves with the start's."""
    from mcp import Client

    monkeypatch.setenv("VISUS_PROVIDERS__REFERENCE__BASE_URL", reference_url)
    app = create_main_app(
        data=places["data"],
        model="reference",
        settings=ProviderSettings(reference_url=reference_url, env={}),
        web=False,
        roots=[places["allowed"]],
    )
    # Written after the start (by an agent's edit, say): not valid TOML, another URL.
    places["config"].write_text("[providers.reference\nbase_url = 'http://10.0.0.1'\n")
    monkeypatch.setenv("VISUS_PROVIDERS__REFERENCE__BASE_URL", "http://127.0.0.1:9")
    async with Client(app.state.mcp_server, mode="legacy") as client:
        r = await client.call_tool(
            "vision_analyze", {"prompt": "What colour is it?", "file_path": "pic.png"}
        )
    text = "".join(getattr(c, "text", "") for c in r.content)
    assert not r.is_error, text
    assert json.loads(text)["model"] == "reference"
