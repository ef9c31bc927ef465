"""The web chat's JSON API over the real main app (tether + agent + reference model).

No browser here: these pin what the page relies on, and that the server checks every
bound again whatever the page did.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from tests.served import auth
from visus import limits
from visus.app import create_main_app
from visus.errors import ConfigError
from visus.providers import ProviderSettings
from visus.reference.grid import make_grid


def _app(data: Path, url: str, token: str | None = None) -> FastAPI:
    return create_main_app(
        data=data,
        model="reference",
        settings=ProviderSettings(reference_url=url, env={}),
        token=token,
    )


@asynccontextmanager
async def _running(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    # The lifespan is entered in the test's own task (MCP's task group needs that).
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=transport, base_url="http://127.0.0.1", headers=auth(app), timeout=60
        ) as c,
    ):
        c.app = app  # type: ignore[attr-defined]
        yield c


@pytest.fixture
def main_app(tmp_path: Path, reference_url: str) -> FastAPI:
    return _app(tmp_path / "data", reference_url)


async def _turn(
    c: httpx.AsyncClient,
    session: str,
    text: str,
    images: list[bytes] = (),  # type: ignore[assignment]
) -> dict[str, Any]:
    iid = c.app.state.default_instance  # type: ignore[attr-defined]
    payload: dict[str, Any] = {"text": text}
    if images:
        payload["images"] = [
            {"media_type": "image/png", "data": base64.b64encode(im).decode()} for im in images
        ]
    r = await c.post(
        f"/v1/instances/{iid}/tether",
        json={"v": 1, "type": "user.message", "session": session, "payload": payload},
    )
    assert r.status_code == 202, r.text
    after = r.json()["seq"]
    for _ in range(60):
        p = await c.get(
            f"/v1/instances/{iid}/tether/poll",
            params={"after_seq": after, "session": session, "wait": 2},
        )
        body = p.json()
        after = body["next_seq"]
        for f in body["frames"]:
            if f["type"] in {"assistant.done", "error"}:
                return dict(f)
    raise AssertionError("no answer")


async def test_config_names_the_instance_model_and_limits(main_app: FastAPI) -> None:
    async with _running(main_app) as client:
        await _test_config_names_the_instance_model_and_limits(client)


async def _test_config_names_the_instance_model_and_limits(client: httpx.AsyncClient) -> None:
    r = await client.get("/web/api/config")
    assert r.status_code == 200
    body = r.json()
    assert body["instance"] == client.app.state.default_instance  # type: ignore[attr-defined]
    assert body["model"] == "reference"
    assert body["limits"]["max_images"] == limits.TETHER_MAX_IMAGES_PER_MESSAGE
    assert body["limits"]["max_image_bytes"] == limits.TETHER_MAX_IMAGE_BYTES
    assert body["limits"]["attachment_max_file_bytes"] == limits.ATTACHMENT_MAX_FILE_BYTES
    assert set(body["limits"]["image_media_types"]) == set(limits.TETHER_MEDIA_TYPES)


async def test_page_and_assets_are_served_without_network(main_app: FastAPI) -> None:
    async with _running(main_app) as client:
        await _test_page_and_assets_are_served_without_network(client)


async def _test_page_and_assets_are_served_without_network(client: httpx.AsyncClient) -> None:
    page = await client.get("/")
    assert page.status_code == 200
    assert "text/html" in page.headers["content-type"]
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["referrer-policy"] == "no-referrer"
    for asset in ("app.js", "api.js", "files.js", "style.css"):
        r = await client.get(f"/web/static/{asset}")
        assert r.status_code == 200, asset
        assert "http://" not in r.text, asset
        assert "https://" not in r.text, asset
    assert "https://" not in page.text


async def test_a_turn_shows_in_sessions_conversation_usage_and_blob(main_app: FastAPI) -> None:
    async with _running(main_app) as client:
        await _test_a_turn_shows_in_sessions_conversation_usage_and_blob(client)


async def _test_a_turn_shows_in_sessions_conversation_usage_and_blob(
    client: httpx.AsyncClient,
) -> None:
    png, expected = make_grid(2, 2, seed=3)
    done = await _turn(client, "web-a", "What is in this grid?", [png])
    assert done["type"] == "assistant.done"

    sessions = (await client.get("/web/api/sessions")).json()["sessions"]
    assert [(s["id"], s["title"], s["turns"]) for s in sessions] == [
        ("web-a", "What is in this grid?", 1)
    ]

    conv = (await client.get("/web/api/sessions/web-a")).json()
    kinds = [m["kind"] for m in conv["messages"]]
    assert kinds == ["user", "assistant"]
    user = conv["messages"][0]
    assert user["text"] == "What is in this grid?"
    [image] = user["images"]
    assert image["url"] == f"/web/api/blobs/{image['digest']}"
    answer = conv["messages"][1]["text"]
    for word, *_ in expected:
        assert word in answer
    [turn] = conv["turns"]
    assert turn["turn"] == 1
    assert turn["usage"]["input_tokens"] > 0
    assert turn["usage"]["output_tokens"] > 0
    assert conv["total"]["input_tokens"] == turn["usage"]["input_tokens"]
    [status] = conv["images"]
    assert status["live"] is True
    assert status["tokens"] > 0
    assert status["turn"] == 1

    blob = await client.get(image["url"])
    assert blob.status_code == 200
    assert blob.headers["content-type"] == image["media_type"]
    assert hashlib.sha256(blob.content).hexdigest() == image["digest"]
    assert "sandbox" in blob.headers["content-security-policy"]


async def test_blob_keys_are_validated(main_app: FastAPI) -> None:
    async with _running(main_app) as client:
        await _test_blob_keys_are_validated(client)


async def _test_blob_keys_are_validated(client: httpx.AsyncClient) -> None:
    bad = await client.get("/web/api/blobs/..%2F..%2Finstance.json")
    assert bad.status_code in {400, 404}
    assert (await client.get("/web/api/blobs/" + "A" * 64)).status_code == 400
    missing = await client.get("/web/api/blobs/" + "0" * 64)
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"


async def test_old_viewed_images_are_listed_as_elided(main_app: FastAPI) -> None:
    async with _running(main_app) as client:
        await _test_old_viewed_images_are_listed_as_elided(client)


async def _test_old_viewed_images_are_listed_as_elided(client: httpx.AsyncClient) -> None:
    files = client.app.state.policy.roots[0]  # type: ignore[attr-defined]
    for i in (1, 2):
        (files / f"g{i}.png").write_bytes(make_grid(1, 1, seed=i)[0])
    for i in (1, 2):
        path = json.dumps({"path": str(files / f"g{i}.png")})
        await _turn(client, "web-v", f"call view {path}")
    conv = (await client.get("/web/api/sessions/web-v")).json()
    statuses = [(im["turn"], im["live"], im["origin"]) for im in conv["images"]]
    assert statuses == [(1, False, "perception"), (2, True, "perception")]
    tools = [m for m in conv["messages"] if m["kind"] == "tool"]
    assert [t["tool_name"] for t in tools] == ["view", "view"]
    assert tools[0]["images"][0]["source"].endswith("g1.png")


async def test_attachment_upload_keeps_the_browser_mime_type(main_app: FastAPI) -> None:
    async with _running(main_app) as client:
        await _test_attachment_upload_keeps_the_browser_mime_type(client)


async def _test_attachment_upload_keeps_the_browser_mime_type(client: httpx.AsyncClient) -> None:
    content = base64.b64encode(b"alpha\nthe zorblat line\n").decode()
    r = await client.post(
        "/web/api/sessions/web-b/attachments",
        json={"filename": "../notes.md", "contentBase64": content, "mimeType": "text/markdown"},
    )
    assert r.status_code == 201, r.text
    assert r.json()["name"] == "notes.md"
    assert r.json()["mime_type"] == "text/markdown"
    listed = (await client.get("/web/api/sessions/web-b/attachments")).json()["attachments"]
    assert [(a["name"], a["mime_type"], a["size"]) for a in listed] == [
        ("notes.md", "text/markdown", 23)
    ]
    # A session with attachments but no turn yet is an empty conversation, not a 404.
    conv = (await client.get("/web/api/sessions/web-b")).json()
    assert conv["exists"] is False
    assert conv["attachments"][0]["name"] == "notes.md"
    done = await _turn(client, "web-b", 'call grep_attachment {"pattern": "zorblat"}')
    assert done["type"] == "assistant.done"
    conv = (await client.get("/web/api/sessions/web-b")).json()
    [tool] = [m for m in conv["messages"] if m["kind"] == "tool"]
    assert tool["tool_name"] == "grep_attachment"
    assert "notes.md:2: the zorblat line" in tool["text"]


async def test_attachment_errors_are_clear(main_app: FastAPI) -> None:
    async with _running(main_app) as client:
        await _test_attachment_errors_are_clear(client)


async def _test_attachment_errors_are_clear(client: httpx.AsyncClient) -> None:
    url = "/web/api/sessions/web-c/attachments"
    r = await client.post(url, json={"filename": "x.txt", "contentBase64": "@@@", "mimeType": ""})
    assert r.status_code == 400
    assert "base64" in r.json()["error"]["message"]
    r = await client.post(url, json={"filename": "x.txt", "mimeType": "text/plain"})
    assert r.status_code == 400
    assert "contentBase64" in r.json()["error"]["message"]
    r = await client.post(url, content=b"not json", headers={"content-type": "application/json"})
    assert r.status_code == 400
    r = await client.post(
        "/web/api/sessions/..%2Fx/attachments",
        json={"filename": "x.txt", "contentBase64": "eA==", "mimeType": "text/plain"},
    )
    assert r.status_code in {400, 404}
    r = await client.post(
        "/web/api/sessions/.hidden/attachments",
        json={"filename": "x.txt", "contentBase64": "eA==", "mimeType": "text/plain"},
    )
    assert r.status_code == 400
    # One byte over the per-file cap: refused with the limit's name, nothing stored.
    big = base64.b64encode(b"a" * (limits.ATTACHMENT_MAX_FILE_BYTES + 1)).decode()
    r = await client.post(url, json={"filename": "big.txt", "contentBase64": big, "mimeType": ""})
    assert r.status_code == 413
    assert r.json()["error"]["limit"] == "ATTACHMENT_MAX_FILE_BYTES"
    assert "ATTACHMENT_MAX_FILE_BYTES" in r.json()["error"]["message"]
    r = await client.post(
        url,
        content=b"{}",
        headers={
            "content-type": "application/json",
            "content-length": str(limits.WEB_ATTACHMENT_MAX_BODY_BYTES + 1),
        },
    )
    assert r.status_code == 413
    listed = (await client.get(f"{url}")).json()["attachments"]
    assert listed == []


async def test_tether_checks_the_image_limits_again(main_app: FastAPI) -> None:
    async with _running(main_app) as client:
        await _test_tether_checks_the_image_limits_again(client)


async def _test_tether_checks_the_image_limits_again(client: httpx.AsyncClient) -> None:
    iid = client.app.state.default_instance  # type: ignore[attr-defined]
    png = make_grid(1, 1, seed=1)[0]
    image = {"media_type": "image/png", "data": base64.b64encode(png).decode()}
    n = limits.TETHER_MAX_IMAGES_PER_MESSAGE + 1
    frame = {
        "type": "user.message",
        "session": "web-d",
        "payload": {"text": "", "images": [image] * n},
    }
    r = await client.post(f"/v1/instances/{iid}/tether", json=frame)
    assert r.status_code == 413
    assert r.json()["error"]["limit"] == "TETHER_MAX_IMAGES_PER_MESSAGE"
    assert (await client.get("/web/api/sessions")).json()["sessions"] == []


async def test_token_guards_the_api_but_not_the_page(tmp_path: Path, reference_url: str) -> None:
    app = _app(tmp_path / "data", reference_url, token="s3cret")
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c,
    ):
        assert (await c.get("/")).status_code == 200
        for path in ("/web/api/config", "/web/api/sessions", f"/web/api/blobs/{'0' * 64}"):
            r = await c.get(path)
            assert r.status_code == 401, path
            assert r.json()["error"]["code"] == "unauthorized"
        wrong = await c.get("/web/api/config", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        up = await c.post(
            "/web/api/sessions/web-x/attachments",
            json={"filename": "x.txt", "contentBase64": "eA==", "mimeType": "text/plain"},
        )
        assert up.status_code == 401
        assert not (
            Path(app.state.registry.get(app.state.default_instance).config.data_dir) / "sessions"
        ).exists()
        ok = await c.get("/web/api/config", headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200
        assert (await c.get("/v1/instances")).status_code == 401


async def test_a_chat_is_renamed_and_deleted_with_its_attachments(main_app: FastAPI) -> None:
    async with _running(main_app) as c:
        await _turn(c, "web-1", "hello")
        await _turn(c, "web-2", "second chat")
        up = await c.post(
            "/web/api/sessions/web-1/attachments",
            json={"filename": "n.txt", "contentBase64": "eA==", "mimeType": "text/plain"},
        )
        assert up.status_code == 201, up.text
        named = await c.patch("/web/api/sessions/web-1", json={"title": "  Trip  photos "})
        assert named.status_code == 200, named.text
        assert named.json()["title"] == "Trip photos"
        listed = (await c.get("/web/api/sessions")).json()["sessions"]
        assert {s["id"]: s["title"] for s in listed}["web-1"] == "Trip photos"
        assert (await c.get("/web/api/sessions/web-1")).json()["title"] == "Trip photos"
        bad = await c.patch("/web/api/sessions/web-1", json={"title": "x" * 201})
        assert bad.status_code == 400
        assert "SESSION_TITLE_MAX_CHARS" in bad.json()["error"]["message"]
        assert (await c.patch("/web/api/sessions/nope", json={"title": "x"})).status_code == 404

        gone = await c.delete("/web/api/sessions/web-1")
        assert gone.status_code == 204, gone.text
        listed = (await c.get("/web/api/sessions")).json()["sessions"]
        assert [s["id"] for s in listed] == ["web-2"]
        conv = (await c.get("/web/api/sessions/web-1")).json()
        assert (conv["exists"], conv["attachments"]) == (False, [])
        assert (await c.delete("/web/api/sessions/web-1")).status_code == 404


async def test_a_chat_with_a_turn_running_is_not_deleted(main_app: FastAPI) -> None:
    async with _running(main_app) as c:
        iid = c.app.state.default_instance  # type: ignore[attr-defined]
        sent = await c.post(
            f"/v1/instances/{iid}/tether",
            json={"v": 1, "type": "user.message", "session": "busy", "payload": {"text": "wait 5"}},
        )
        assert sent.status_code == 202
        refused = await c.delete("/web/api/sessions/busy")
        assert refused.status_code == 409
        assert "stop it" in refused.json()["error"]["message"]


async def test_config_says_what_the_model_is_and_where_files_go(main_app: FastAPI) -> None:
    async with _running(main_app) as c:
        config = (await c.get("/web/api/config")).json()
        assert config["reference"] is True
        assert config["files"] == [str(c.app.state.policy.roots[0])]  # type: ignore[attr-defined]
        assert config["limits"]["fit_max_bytes"] == limits.WEB_FIT_MAX_BYTES


async def test_an_image_over_the_tether_bound_is_fitted_on_the_server(
    main_app: FastAPI,
) -> None:
    import io
    import os

    from PIL import Image

    side = 2400  # random pixels: a PNG that stays over TETHER_MAX_IMAGE_BYTES
    noise = Image.frombytes("RGB", (side, side), os.urandom(side * side * 3))
    buf = io.BytesIO()
    noise.save(buf, "PNG", compress_level=1)
    big = buf.getvalue()
    assert limits.TETHER_MAX_IMAGE_BYTES < len(big) <= limits.WEB_FIT_MAX_BYTES
    async with _running(main_app) as c:
        r = await c.post("/web/api/fit", content=big, headers={"Content-Type": "image/png"})
        assert r.status_code == 200, r.text
        assert r.headers["content-type"] in limits.TETHER_MEDIA_TYPES
        assert len(r.content) <= limits.TETHER_MAX_IMAGE_BYTES
        assert r.headers["x-visus-source-size"] == f"{side}x{side}"
        Image.open(io.BytesIO(r.content)).verify()
        # The fitted image goes through tether as any image does, and is seen.
        done = await _turn(c, "fit-1", "what is this?", [r.content])
        assert done["type"] == "assistant.done"
        over = await c.post(
            "/web/api/fit",
            content=b"\0" * (limits.WEB_FIT_MAX_BYTES + 1),
            headers={"Content-Type": "image/png"},
        )
        assert over.status_code == 413
        assert "files folder" in over.json()["error"]["message"]
        junk = await c.post(
            "/web/api/fit", content=b"not an image", headers={"Content-Type": "image/png"}
        )
        assert junk.status_code == 400
        # Raw bytes, but never of a type another origin's page may post blind.
        for kind in ("text/plain", "multipart/form-data", None):
            sent = {"Content-Type": kind} if kind else {}
            blind = await c.post("/web/api/fit", content=big, headers=sent)
            assert blind.status_code == 415, kind


async def test_the_history_reads_from_postgresql(
    tmp_path: Path, reference_url: str, pg_url: str
) -> None:
    """The page's reads (sessions, a conversation with its images and turns, blobs) on
    a PostgreSQL store, with every database call off the serving loop (the tests make
    one on it an error: tests/pgcluster.py)."""
    app = create_main_app(
        data=tmp_path / "data",
        model="reference",
        settings=ProviderSettings(reference_url=reference_url, env={}),
        store=pg_url,
    )
    async with _running(app) as client:
        assert client.app.state.registry.shared  # type: ignore[attr-defined]
        await _test_a_turn_shows_in_sessions_conversation_usage_and_blob(client)
        await _test_old_viewed_images_are_listed_as_elided(client)
        await _test_blob_keys_are_validated(client)
        conv = (await client.get("/web/api/sessions/web-a")).json()
        assert conv["running"] == []  # no turn in flight on any replica


def test_the_app_makes_a_token_unless_told_not_to(tmp_path: Path, reference_url: str) -> None:
    made = _app(tmp_path / "a", reference_url)
    again = _app(tmp_path / "b", reference_url)
    assert len(made.state.token) >= 32
    assert made.state.token != again.state.token
    assert create_main_app(data=tmp_path / "c", no_token=True).state.token is None
    with pytest.raises(ConfigError, match="loopback only"):
        create_main_app(data=tmp_path / "d", no_token=True, host="0.0.0.0")


async def test_no_cookie_holds_the_token(tmp_path: Path, reference_url: str) -> None:
    """Issue 33, item 7: a cookie reaches every port of a host, so none holds the token.
    The page is served as it is (it keeps a ``?token=`` itself), a cookie an older page
    was given is expired, a cookie opens nothing, and the sign-in only checks a token."""
    app = _app(tmp_path / "data", reference_url, token="s3cret")
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8750") as c,
    ):
        page = await c.get("/?token=s3cret")
        assert page.status_code == 200
        assert "set-cookie" not in page.headers
        # What an older version set (the token itself, named for the port) opens
        # nothing, and the page expires it.
        c.cookies.set("visus-token-8750", "s3cret")
        assert (await c.get("/web/api/config")).status_code == 401
        again = await c.get("/")
        assert 'visus-token-8750=""' in again.headers["set-cookie"]
        assert "max-age=0" in again.headers["set-cookie"].lower()
        c.cookies.clear()
        # The token dialog's check: 204 or 401, and no cookie either way.
        wrong = await c.post("/web/login", json={"token": "nope"})
        assert wrong.status_code == 401
        right = await c.post("/web/login", json={"token": "s3cret"})
        assert right.status_code == 204
        assert "set-cookie" not in right.headers
        assert (await c.get("/web/api/config")).status_code == 401
        bearer = {"Authorization": "Bearer s3cret"}
        for path in ("/web/api/config", "/v1/instances"):
            assert (await c.get(path, headers=bearer)).status_code == 200, path


async def test_the_sign_in_and_the_gate_stop_a_guesser(
    tmp_path: Path, reference_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 33: /web/login had no rate limit (nor had a wrong bearer token). Past
    AUTH_MAX_FAILURES wrong tokens from one address, that address is refused 429 for
    the window, a right token included; another address is not."""
    monkeypatch.setattr(limits, "AUTH_MAX_FAILURES", 5)
    app = _app(tmp_path / "data", reference_url, token="s3cret")
    guesser = httpx.ASGITransport(app=app, client=("192.0.2.7", 4000))
    someone = httpx.ASGITransport(app=app, client=("192.0.2.8", 4000))
    base = "http://127.0.0.1:8750"
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=guesser, base_url=base) as c,
        httpx.AsyncClient(transport=someone, base_url=base) as d,
    ):
        for i in range(3):
            r = await c.post("/web/login", json={"token": f"guess-{i}"})
            assert r.status_code == 401
        for i in range(2):
            r = await c.get("/v1/instances", headers={"Authorization": f"Bearer guess-{i}"})
            assert r.status_code == 401
        for attempt in (
            c.post("/web/login", json={"token": "s3cret"}),
            c.get("/v1/instances", headers={"Authorization": "Bearer s3cret"}),
        ):
            r = await attempt
            assert r.status_code == 429, r.text
            assert int(r.headers["retry-after"]) > 0
            assert r.json()["error"]["code"] == "too_many_failures"
        # No token at all is no guess: still a plain 401.
        assert (await c.get("/v1/instances")).status_code == 401
        assert (await d.post("/web/login", json={"token": "s3cret"})).status_code == 204


async def test_another_origin_cannot_post_even_with_the_token(
    tmp_path: Path, reference_url: str
) -> None:
    app = _app(tmp_path / "data", reference_url, token="s3cret")
    transport = httpx.ASGITransport(app=app)
    bearer = {"Authorization": "Bearer s3cret"}
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=transport, base_url="http://127.0.0.1:8750", headers=bearer
        ) as c,
    ):
        iid = app.state.default_instance
        url = f"/v1/instances/{iid}/tether"
        frame = json.dumps({"type": "user.message", "session": "web-o", "payload": {"text": "x"}})
        # Another local web app (another port) posting blind, as a page may without a
        # CORS preflight: refused for its origin, and for its text/plain body.
        for origin in ("http://127.0.0.1:3000", "http://localhost:8750", "null"):
            r = await c.post(
                url, content=frame, headers={"Origin": origin, "Content-Type": "text/plain"}
            )
            assert r.status_code == 403, (origin, r.text)
            assert r.json()["error"]["code"] == "cross_origin"
        r = await c.post(url, content=frame, headers={"Content-Type": "text/plain"})
        assert r.status_code == 415
        assert "application/json" in r.json()["error"]["message"]
        form = await c.post("/web/api/sessions/web-o/attachments", data={"filename": "a.txt"})
        assert form.status_code == 415
        same = {"Origin": "http://127.0.0.1:8750", "Content-Type": "application/json"}
        assert (await c.post(url, content=frame, headers=same)).status_code == 202
