"""A server refuses what a web page in the user's browser could send it: without a
token, other host names (DNS rebinding); with or without one, any origin but its own
and state-changing bodies that are not JSON."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from visus.tether.guard import IN_PROCESS_HOST
from visus.tether.server import create_app

from .doubles import Factory

FRAME = '{"v": 1, "type": "user.message", "session": "s", "payload": {"text": "edit my files"}}'


async def _client(tmp_path: Path, token: str | None, host: str) -> httpx.AsyncClient:
    app = create_app(data_dir=tmp_path, runner_factory=Factory(), token=token)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=f"http://{host}")


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8750", "192.168.1.10:8750"])
async def test_dns_rebinding_host_is_refused_without_a_token(tmp_path: Path, host: str) -> None:
    async with await _client(tmp_path, None, host) as c:
        r = await c.get("/v1/instances")
    assert r.status_code == 421
    assert r.json()["error"]["code"] == "misdirected_request"


@pytest.mark.parametrize(
    "host", ["127.0.0.1:8750", "localhost:8750", "[::1]:8750", "127.0.0.2", IN_PROCESS_HOST]
)
async def test_loopback_names_are_served(tmp_path: Path, host: str) -> None:
    async with await _client(tmp_path, None, host) as c:
        r = await c.get("/v1/instances")
    assert r.status_code == 200


async def test_cross_site_simple_post_is_refused(tmp_path: Path) -> None:
    async with await _client(tmp_path, None, "127.0.0.1:8750") as c:
        iid = (await c.post("/v1/instances", json={"model": "m"})).json()["id"]
        # What a page on another site can send without a CORS preflight.
        r = await c.post(
            f"/v1/instances/{iid}/tether",
            content=FRAME,
            headers={"Content-Type": "text/plain", "Origin": "https://evil.example"},
        )
        assert r.status_code == 403
        assert r.json()["error"]["code"] == "cross_origin"
        frames = (await c.get(f"/v1/instances/{iid}/tether/poll", params={"after_seq": 0})).json()
        assert frames["frames"] == []  # nothing reached the agent
        # The server's own page (a loopback origin) is served.
        same = await c.post(
            f"/v1/instances/{iid}/tether",
            content=FRAME,
            headers={"Content-Type": "application/json", "Origin": "http://127.0.0.1:8750"},
        )
        assert same.status_code in {200, 202}


async def test_with_a_token_any_host_is_served_to_the_bearer(tmp_path: Path) -> None:
    async with await _client(tmp_path, "sekrit", "visus.example.com") as c:
        assert (await c.get("/v1/instances")).status_code == 401
        ok = await c.get("/v1/instances", headers={"Authorization": "Bearer sekrit"})
        assert ok.status_code == 200


@pytest.mark.parametrize("token", [None, "sekrit"])
@pytest.mark.parametrize(
    "origin",
    [
        "http://127.0.0.1:3000",  # another local web app: a loopback origin, another port
        "http://localhost:8750",  # the same port under another name is another origin
        "https://127.0.0.1:8750",  # another scheme
        "http://127.0.0.1:8750.evil.example",
        "null",
    ],
)
async def test_only_the_servers_own_origin_is_served(
    tmp_path: Path, token: str | None, origin: str
) -> None:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with await _client(tmp_path, token, "127.0.0.1:8750") as c:
        c.headers.update(headers)
        r = await c.post("/v1/instances", json={"model": "m"}, headers={"Origin": origin})
        assert r.status_code == 403, r.text
        assert r.json()["error"]["code"] == "cross_origin"
        assert (await c.get("/v1/instances")).json()["instances"] == []
        own = await c.post(
            "/v1/instances", json={"model": "m"}, headers={"Origin": "http://127.0.0.1:8750"}
        )
        assert own.status_code == 201, own.text


@pytest.mark.parametrize("token", [None, "sekrit"])
@pytest.mark.parametrize(
    "kind", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data", None]
)
async def test_state_changing_bodies_must_be_json(
    tmp_path: Path, token: str | None, kind: str | None
) -> None:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with await _client(tmp_path, token, "127.0.0.1:8750") as c:
        c.headers.update(headers)
        iid = (await c.post("/v1/instances", json={"model": "m"})).json()["id"]
        # No Origin at all (a client that is not a browser, or an old one): still refused.
        sent = {"Content-Type": kind} if kind else {}
        r = await c.post(f"/v1/instances/{iid}/tether", content=FRAME, headers=sent)
        assert r.status_code == 415, r.text
        assert r.json()["error"]["code"] == "unsupported_media_type"
        page = (await c.get(f"/v1/instances/{iid}/tether/poll", params={"after_seq": 0})).json()
        assert page["frames"] == []
        # A DELETE without a body needs no type.
        assert (await c.delete(f"/v1/instances/{iid}")).status_code == 204
