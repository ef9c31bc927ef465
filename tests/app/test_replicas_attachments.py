"""A session's attachments on a shared store: a file the web chat uploads through one
``visus serve`` replica is listed by every replica and read by the turn another
replica runs. Two real replicas (``create_main_app`` on one throwaway PostgreSQL
database, each with its own data folder), real agents answering through the offline
reference model, which calls ``grep_attachment`` when told to."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from fastapi import FastAPI

from tests.tether.doubles import live_server
from tests.timing import within
from visus.app import create_main_app

pytestmark = pytest.mark.slow

#: Replicas share one token, as the README says.
TOKEN = "replica-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
NOTES = b"first line\nthe zorblat is here\nlast line\n"


@pytest.fixture
def apps(pg_url: str, tmp_path: Path) -> Iterator[list[FastAPI]]:
    made = [
        create_main_app(
            data=tmp_path / f"r{k}", model="reference", store=pg_url, mcp=False, token=TOKEN
        )
        for k in range(2)
    ]
    yield made
    for app in made:
        app.state.registry.store.close()


async def _turn(http: httpx.AsyncClient, url: str, inst: str, text: str) -> dict[str, Any]:
    body = {"type": "user.message", "session": "shared", "payload": {"text": text}}
    r = await http.post(f"{url}/v1/instances/{inst}/tether", json=body)
    assert r.status_code == 202, r.text
    after = r.json()["seq"]
    for _ in range(30):
        page = (
            await http.get(
                f"{url}/v1/instances/{inst}/tether/poll",
                params={"after_seq": after, "session": "shared", "wait": 5},
            )
        ).json()
        after = page["next_seq"]
        for f in page["frames"]:
            if f["type"] in ("assistant.done", "error"):
                return dict(f)
    raise AssertionError("no answer")


async def test_an_upload_to_one_replica_is_grepped_by_a_turn_another_runs(
    apps: list[FastAPI], pg_url: str
) -> None:
    a, b = apps
    inst = a.state.default_instance
    assert b.state.default_instance == inst  # the one web-chat instance they share
    api = "/web/api/sessions/shared/attachments"
    async with httpx.AsyncClient(headers=AUTH, timeout=60) as http:
        with live_server(b) as url_b:
            with live_server(a) as url_a:
                up = await http.post(
                    f"{url_a}{api}",
                    json={
                        "filename": "notes.md",
                        "contentBase64": base64.b64encode(NOTES).decode(),
                        "mimeType": "text/markdown",
                    },
                )
                assert up.status_code == 201, up.text
                # Whichever replica the balancer picks lists the same attachments.
                for url in (url_a, url_b):
                    listed = (await http.get(f"{url}{api}")).json()["attachments"]
                    assert [(f["name"], f["size"]) for f in listed] == [("notes.md", len(NOTES))]
                conv = (await http.get(f"{url_b}/web/api/sessions/shared")).json()
                assert [f["name"] for f in conv["attachments"]] == ["notes.md"]
            # Replica A is gone (its worker with it): replica B runs the turn.
            done = await _turn(http, url_b, inst, 'call grep_attachment {"pattern": "zorblat"}')
            assert done["type"] == "assistant.done", done
            conv = (await http.get(f"{url_b}/web/api/sessions/shared")).json()
    tools = [m for m in conv["messages"] if m["kind"] == "tool"]
    assert [t["tool_name"] for t in tools] == ["grep_attachment"]
    assert "notes.md:2: the zorblat is here" in tools[0]["text"]
    with psycopg.connect(pg_url) as conn:
        owners = conn.execute("SELECT DISTINCT owner FROM visus_turns").fetchall()
    assert owners == [(b.state.registry.store.replica,)]
    # Nothing of the upload is in either replica's own data folder.
    for app in apps:
        folder = Path(app.state.registry.data_dir)
        assert not list(folder.rglob("notes.md"))


async def test_any_replica_lists_a_session_s_running_turns(apps: list[FastAPI]) -> None:
    """The web page reloaded behind a balancer asks whichever replica: each one lists
    the turns still open (so the page shows them working, with Stop) until they end."""
    a, b = apps
    inst = a.state.default_instance
    sessions = "/web/api/sessions"
    async with httpx.AsyncClient(headers=AUTH, timeout=60) as http:
        with live_server(a) as url_a, live_server(b) as url_b:

            async def send(url: str, text: str) -> str:
                body = {"type": "user.message", "session": "shared", "payload": {"text": text}}
                r = await http.post(f"{url}/v1/instances/{inst}/tether", json=body)
                assert r.status_code == 202, r.text
                return str(r.json()["msg_id"])

            slow = await send(url_a, "wait 5")
            queued = await send(url_b, "hello")  # waits behind "wait 5" in its session
            for url in (url_a, url_b):
                conv = (await http.get(f"{url}{sessions}/shared")).json()
                assert conv["running"] == [slow, queued]
            assert (await http.get(f"{url_b}{sessions}/elsewhere")).json()["running"] == []
            deadline = time.monotonic() + within(30)
            while (await http.get(f"{url_b}{sessions}/shared")).json()["running"]:
                assert time.monotonic() < deadline, "the turns never ended"
                await asyncio.sleep(0.2)
            assert (await http.get(f"{url_a}{sessions}/shared")).json()["running"] == []
