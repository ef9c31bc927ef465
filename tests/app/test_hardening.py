"""Hostile bodies and headers against the composed app (tether, /mcp, web chat API):
a clear 4xx naming the bound, never a 500 or a RecursionError."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from tests.served import auth
from visus import limits
from visus.app import create_main_app
from visus.providers import ProviderSettings

DEEP = {
    "arrays": b"[" * 100_000,
    "objects": b'{"a":' * 50_000,
    # Past the bound but well within what json.loads itself survives.
    "just_past_the_bound": b'{"v":1,"payload":'
    + b"[" * limits.JSON_MAX_DEPTH
    + b"]" * limits.JSON_MAX_DEPTH
    + b"}",
}


@asynccontextmanager
async def _client(
    tmp_path: Path, *, no_token: bool = False
) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    app = create_main_app(
        data=tmp_path / "data",
        model="reference",
        settings=ProviderSettings(reference_url="http://127.0.0.1:9", env={}),
        no_token=no_token,
    )
    # raise_app_exceptions=False: an escaping exception shows as the 500 a client sees.
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", headers=auth(app)) as c,
    ):
        yield c, app.state.default_instance


@pytest.mark.parametrize("kind", sorted(DEEP))
async def test_deeply_nested_json_is_400_invalid_input_everywhere(
    tmp_path: Path, kind: str
) -> None:
    body = DEEP[kind]
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    async with _client(tmp_path) as (c, iid):
        for path in (
            f"/v1/instances/{iid}/tether",
            "/v1/instances",
            "/web/api/sessions/s1/attachments",
            "/mcp",
        ):
            r = await c.post(path, content=body, headers=headers)
            assert r.status_code == 400, (path, r.status_code, r.text[:300])
            text = r.text
            assert "invalid_input" in text, (path, text)
            if path != "/v1/instances" or kind == "just_past_the_bound":
                # FastAPI parses instance create itself; its own message names no bound
                assert "JSON_MAX_DEPTH" in text or path == "/v1/instances", (path, text)


async def test_nesting_at_the_bound_is_still_accepted_as_json(tmp_path: Path) -> None:
    from visus.tether.limits import load_json

    depth = limits.JSON_MAX_DEPTH
    assert load_json(b"[" * depth + b"]" * depth) is not None


@pytest.mark.parametrize(
    "host",
    [
        "evil.example:80@127.0.0.1",
        "evil.example@127.0.0.1:8750",
        "evil.example\\@127.0.0.1",
        "127.0.0.1\\@evil.example",
        "127.0.0.1:8750\\evil.example",
        "127.0.0.1/evil.example",
        "127.0.0.1:8750:80",
        "",
    ],
)
async def test_host_guard_takes_only_a_plain_host_and_port(tmp_path: Path, host: str) -> None:
    async with _client(tmp_path, no_token=True) as (c, _iid):
        r = await c.get("/v1/instances", headers={"host": host})
        assert r.status_code == 421, r.text
        assert r.json()["error"]["code"] == "misdirected_request"
        assert (await c.get("/v1/instances", headers={"host": "127.0.0.1:8750"})).status_code == 200
