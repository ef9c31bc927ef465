"""Issue 23's attacks against two replicas on one PostgreSQL database: each replica
keeps its operator's boundary, and an instance row that asks for more (written by an
older version, or straight into the database) is refused where it is loaded."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.app.replicas import replica_apps
from tests.tether.doubles import live_server
from visus.store.postgres import PostgresStore

pytestmark = pytest.mark.slow

SECRET = "TOPSECRET-0452"


@pytest.fixture
def two(pg_url: str, tmp_path: Path) -> Iterator[tuple[list[str], list[PostgresStore], Path]]:
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (tmp_path / "secret.txt").write_text(SECRET)
    apps, stores = replica_apps(pg_url, tmp_path / "data", 2, roots=[allowed])
    with live_server(apps[0]) as u0, live_server(apps[1]) as u1:
        yield [u0, u1], stores, tmp_path


async def _answer(http: httpx.AsyncClient, url: str, iid: str, text: str) -> dict[str, Any]:
    frame = {"type": "user.message", "session": "s1", "payload": {"text": text}}
    r = await http.post(f"{url}/v1/instances/{iid}/tether", json=frame)
    assert r.status_code == 202, r.text
    after = r.json()["seq"]
    for _ in range(60):
        page = (
            await http.get(
                f"{url}/v1/instances/{iid}/tether/poll", params={"after_seq": after, "wait": 2}
            )
        ).json()
        after = page["next_seq"]
        for f in page["frames"]:
            if f["type"] in {"assistant.done", "error"}:
                return dict(f)
    raise AssertionError("no answer")


async def test_replicas_keep_the_boundary(
    two: tuple[list[str], list[PostgresStore], Path],
) -> None:
    (u0, u1), stores, tmp_path = two
    marker = tmp_path / "ran"
    program = {"name": "x", "command": sys.executable, "args": ["-c", f"open({str(marker)!r},'w')"]}
    async with httpx.AsyncClient(timeout=60) as http:
        for url in (u0, u1):
            r = await http.post(f"{url}/v1/instances", json={"model": "reference", "roots": ["/"]})
            assert r.status_code == 403, r.text
            r = await http.post(
                f"{url}/v1/instances", json={"model": "reference", "mcp_servers": [program]}
            )
            assert r.status_code == 403, r.text

        # A row asking for more than this operator allows, written behind the API.
        for iid, extra in (("i-wide", {}), ("i-program", {"mcp_servers": [program]})):
            stores[0].put_instance(
                {
                    "id": iid,
                    "model": "reference",
                    "created": "2026-01-01T00:00:00Z",
                    "data_dir": "",
                    "tools": None,
                    "roots": ["/"] if iid == "i-wide" else [],
                    "extra": extra,
                }
            )
            for url in (u0, u1):
                r = await http.get(f"{url}/v1/instances/{iid}")
                assert r.status_code == 404, r.text
                frame = {"type": "user.message", "payload": {"text": "hi"}}
                r = await http.post(f"{url}/v1/instances/{iid}/tether", json=frame)
                assert r.status_code == 404, r.text

        # An instance made on one replica, answered on the other, reads nothing outside.
        iid = (await http.post(f"{u0}/v1/instances", json={"model": "reference"})).json()["id"]
        path = json.dumps({"path": str(tmp_path / "secret.txt")})
        done = await _answer(http, u1, iid, f"call read {path}\ncall send_image {path}")
        assert done["type"] == "assistant.done", done
        assert done["payload"].get("images", []) == []
    store = stores[1]
    record = store.sessions(f"instances/{iid}").load("s1")
    texts = [m.text for m in record.messages if m.kind == "tool"]
    assert len(texts) == 2, texts
    assert all("outside the allowed roots" in t for t in texts), texts
    assert not any(SECRET in t for t in texts)
    assert not marker.exists()
