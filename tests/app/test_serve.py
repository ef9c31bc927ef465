"""`visus serve`'s app end to end: a tether user.message with a pasted grid image goes
through the real agent and the reference model, and comes back as assistant.done.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from tests.served import auth
from visus.app import create_main_app
from visus.providers import ProviderSettings
from visus.reference.grid import make_grid, score_grid
from visus.reference.server import serve_in_background


async def _poll_done(client: httpx.AsyncClient, iid: str, session: str) -> list[dict]:  # type: ignore[type-arg]
    after = 0
    frames: list[dict] = []  # type: ignore[type-arg]
    for _ in range(120):
        r = await client.get(
            f"/v1/instances/{iid}/tether/poll",
            params={"after_seq": after, "session": session, "wait": 2},
        )
        r.raise_for_status()
        body = r.json()
        frames.extend(body["frames"])
        after = body["next_seq"]
        if any(f["type"] in {"assistant.done", "error"} for f in frames):
            return frames
    raise AssertionError(f"no assistant.done: {frames}")


def _app(tmp_path: Path, url: str) -> FastAPI:
    return create_main_app(
        data=tmp_path / "data",
        model="reference",
        settings=ProviderSettings(reference_url=url, env={}),
        web=False,
    )


@pytest.fixture(scope="module")
def reference_url() -> object:
    with serve_in_background() as url:
        yield url


async def test_pasted_image_reaches_the_model_through_tether(
    tmp_path: Path, reference_url: str
) -> None:
    app = _app(tmp_path, reference_url)
    png, expected = make_grid(2, 2, seed=5)
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=transport, base_url="http://127.0.0.1", headers=auth(app), timeout=60
        ) as client,
    ):
        iid = app.state.default_instance
        frame = {
            "v": 1,
            "type": "user.message",
            "session": "chat-1",
            "payload": {
                "text": "What do you see?",
                "images": [{"media_type": "image/png", "data": base64.b64encode(png).decode()}],
            },
        }
        r = await client.post(f"/v1/instances/{iid}/tether", json=frame)
        assert r.status_code in {200, 201, 202}, r.text
        frames = await _poll_done(client, iid, "chat-1")
    done = [f for f in frames if f["type"] == "assistant.done"]
    assert done, frames
    usage = done[0]["payload"]["usage"]  # the turn's tokens and cost, cache included
    assert set(usage) == {
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
        "cost_usd",
    }
    assert usage["input_tokens"] > 0
    text = done[0]["payload"]["text"]
    block = re.search(r"```json\n(.*?)\n```", text, re.DOTALL)
    assert block, text
    words = json.loads(block.group(1))["images"][0]["words"]
    assert score_grid(expected, words, 2, 2)[0] == 4
    # The session log holds a reference to the image, never its bytes.
    log = next((tmp_path / "data" / "serve").rglob("chat-1.jsonl")).read_text()
    assert '"digest"' in log
    assert base64.b64encode(png).decode()[:200] not in log


async def test_default_instance_is_stable_across_restarts(
    tmp_path: Path, reference_url: str
) -> None:
    first = _app(tmp_path, reference_url)
    second = _app(tmp_path, reference_url)
    assert first.state.default_instance == second.state.default_instance
    await asyncio.sleep(0)


async def test_send_image_comes_back_in_assistant_done(tmp_path: Path, reference_url: str) -> None:
    app = _app(tmp_path, reference_url)
    iid = app.state.default_instance
    files = app.state.policy.roots[0]  # the data folder's files folder, made at start
    png, _ = make_grid(2, 2, seed=8)
    (files / "chart.png").write_bytes(png)
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=transport, base_url="http://127.0.0.1", headers=auth(app), timeout=60
        ) as client,
    ):
        frame = {
            "v": 1,
            "type": "user.message",
            "session": "out-1",
            "payload": {"text": 'call send_image {"path": "chart.png"}'},
        }
        r = await client.post(f"/v1/instances/{iid}/tether", json=frame)
        assert r.status_code in {200, 201, 202}, r.text
        frames = await _poll_done(client, iid, "out-1")
    done = next(f for f in frames if f["type"] == "assistant.done")
    images = done["payload"]["images"]
    assert len(images) == 1
    assert images[0]["media_type"] == "image/png"
    assert base64.b64decode(images[0]["data"]) == png  # small enough to leave unchanged
    assert "ref" not in images[0]
    # The record keeps what was sent, by reference, so surfaces can show it again.
    log = next((tmp_path / "data" / "serve").rglob("out-1.jsonl")).read_text()
    assert hashlib.sha256(png).hexdigest() in log


async def _turn(app: FastAPI, session: str, payload: dict) -> list[dict]:  # type: ignore[type-arg]
    iid = app.state.default_instance
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=transport, base_url="http://127.0.0.1", headers=auth(app), timeout=60
        ) as client,
    ):
        frame = {"v": 1, "type": "user.message", "session": session, "payload": payload}
        r = await client.post(f"/v1/instances/{iid}/tether", json=frame)
        assert r.status_code in {200, 201, 202}, r.text
        return await _poll_done(client, iid, session)


async def test_restart_keeps_sessions_and_blobs_and_a_deleted_blob_degrades_to_text(
    tmp_path: Path, reference_url: str
) -> None:
    png, expected = make_grid(2, 2, seed=13)
    image = {"media_type": "image/png", "data": base64.b64encode(png).decode()}

    first = _app(tmp_path, reference_url)
    await _turn(first, "r-1", {"text": "remember this", "images": [image]})

    # A new server over the same data folder carries on the same session: the pasted
    # image (an attachment, never auto-elided) is still live in turn 2.
    second = _app(tmp_path, reference_url)
    frames = await _turn(second, "r-1", {"text": "what did I send?"})
    done = next(f for f in frames if f["type"] == "assistant.done")
    block = re.search(r"```json\n(.*?)\n```", done["payload"]["text"], re.DOTALL)
    assert block
    words = json.loads(block.group(1))["images"][0]["words"]
    assert score_grid(expected, words, 2, 2)[0] == 4

    # Delete the blob behind the session's back: the next server still loads the
    # session, the text survives, the image becomes a note naming its digest.
    digest = hashlib.sha256(png).hexdigest()
    (blob,) = (tmp_path / "data" / "serve").rglob(f"{digest}.*")
    blob.unlink()
    third = _app(tmp_path, reference_url)
    frames = await _turn(third, "r-1", {"text": "and now?"})
    done = next(f for f in frames if f["type"] == "assistant.done")
    block = re.search(r"```json\n(.*?)\n```", done["payload"]["text"], re.DOTALL)
    assert block
    assert json.loads(block.group(1))["images"] == []
    log = next((tmp_path / "data" / "serve").rglob("r-1.jsonl")).read_text()
    assert "remember this" in log
