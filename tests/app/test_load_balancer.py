"""docs/replicas.md's load balancer configs, run for real: nginx and Caddy (Debian's
packages; a test skips, saying so, when its server is not installed) in front of three
replicas on one PostgreSQL database. Through the balancer: the token is asked for,
an image frame over nginx's 1 MB default body cap passes, an SSE stream and a long
poll see a frame at once (not at their timeouts), turns spread over the replicas, and
a post from the balancer's own origin is taken (another origin's is not)."""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.app.replicas import replica_apps
from tests.tether.doubles import live_server
from tests.timing import within
from visus import limits

pytestmark = pytest.mark.slow

DOCS = Path(__file__).resolve().parents[2] / "docs" / "examples"
TOKEN = "balancer-test-token"
PORTS = ("8751", "8752", "8753")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _config(name: str, upstreams: list[str], port: int) -> str:
    """The docs' config with this test's ports in place of 8750..8753."""
    text = (DOCS / name).read_text()
    for documented, real in zip(PORTS, upstreams, strict=True):
        text = text.replace(f"127.0.0.1:{documented}", real.removeprefix("http://"))
    text = text.replace("listen 8750;", f"listen 127.0.0.1:{port};")
    return text.replace(":8750 {", f"http://127.0.0.1:{port} {{")


def _nginx(folder: Path, conf: str) -> list[str]:
    (folder / "conf.d").mkdir(parents=True)
    (folder / "conf.d" / "visus.conf").write_text(conf)
    (folder / "logs").mkdir()
    main = f"""
pid {folder}/nginx.pid;
error_log {folder}/logs/error.log warn;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {folder}/body;
    proxy_temp_path {folder}/proxy;
    fastcgi_temp_path {folder}/fastcgi;
    uwsgi_temp_path {folder}/uwsgi;
    scgi_temp_path {folder}/scgi;
    include {folder}/conf.d/visus.conf;
}}
"""
    (folder / "nginx.conf").write_text(main)
    if os.geteuid() == 0:  # as root nginx drops its workers to `nobody`, who must read these
        (folder / "nginx.conf").write_text("user root;\n" + main)
    return ["nginx", "-p", str(folder), "-c", str(folder / "nginx.conf"), "-g", "daemon off;"]


def _caddy(folder: Path, conf: str) -> list[str]:
    folder.mkdir(parents=True)
    (folder / "Caddyfile").write_text("{\n\tadmin off\n}\n\n" + conf)
    return ["caddy", "run", "--config", str(folder / "Caddyfile"), "--adapter", "caddyfile"]


class Hits:
    """Counts the requests that reach one replica (an ASGI wrapper around its app)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.paths: list[str] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] != "/readyz":
            self.paths.append(scope["path"])
        await self.app(scope, receive, send)


@contextmanager
def _balancer(server: str, pg_url: str, tmp_path: Path) -> Iterator[tuple[str, list[Hits]]]:
    """The balancer's URL, three replicas behind it (and what reaches each)."""
    binary = shutil.which(server) or shutil.which(server, path="/usr/sbin")  # nginx is there
    if binary is None:
        pytest.skip(f"{server} is not installed (apt-get install {server})")
    apps, _ = replica_apps(pg_url, tmp_path / "replicas", 3, token=TOKEN)
    hits = [Hits(a) for a in apps]
    port = _free_port()
    with live_server(hits[0]) as u0, live_server(hits[1]) as u1, live_server(hits[2]) as u2:
        for u in (u0, u1, u2):  # one at a time: each app builds its routes on first use
            httpx.get(f"{u}/v1/instances", headers={"Authorization": f"Bearer {TOKEN}"})
        name, build = ("nginx-visus.conf", _nginx) if server == "nginx" else ("Caddyfile", _caddy)
        cmd = [binary, *build(tmp_path / server, _config(name, [u0, u1, u2], port))[1:]]
        env = {**os.environ, "HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "xdg")}
        log = open(tmp_path / f"{server}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        url = f"http://127.0.0.1:{port}"
        try:
            _wait(url, proc, tmp_path / f"{server}.log")
            yield url, hits
        finally:
            proc.terminate()
            proc.wait(10)
            log.close()


@pytest.fixture(params=["nginx", "caddy"])
def balanced(request: pytest.FixtureRequest, pg_url: str, tmp_path: Path) -> Iterator[str]:
    """The balancer's URL, three replicas behind it."""
    with _balancer(str(request.param), pg_url, tmp_path) as (url, _):
        yield url


def _wait(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + within(20)
    while True:
        try:
            if httpx.get(f"{url}/v1/instances", timeout=2).status_code == 401:
                return
        except httpx.HTTPError:
            pass
        assert proc.poll() is None, log.read_text(errors="replace")
        assert time.monotonic() < deadline, log.read_text(errors="replace")
        time.sleep(0.1)


def _big_png() -> str:
    """A PNG of about 1.5 MB (noise does not compress): over nginx's default body cap."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.frombytes("RGB", (720, 720), os.urandom(720 * 720 * 3)).save(buf, "PNG")
    assert buf.tell() > 1024 * 1024
    return base64.b64encode(buf.getvalue()).decode()


async def _first_sse_frame(http: httpx.AsyncClient, url: str, got: list[float]) -> None:
    async with http.stream("GET", url) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        async for line in r.aiter_lines():
            if line.startswith("id: "):
                got.append(time.monotonic())
                return


async def test_three_replicas_behind_the_documented_balancer(balanced: str, pg_url: str) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(timeout=60) as http:
        assert (await http.get(f"{balanced}/v1/instances")).status_code == 401
        http.headers.update(auth)
        made = await http.post(f"{balanced}/v1/instances", json={"model": "reference"})
        inst = made.json()["id"]
        base = f"{balanced}/v1/instances/{inst}/tether"
        sse: list[float] = []
        stream = asyncio.create_task(_first_sse_frame(http, f"{base}/stream", sse))
        poll = asyncio.create_task(http.get(f"{base}/poll", params={"wait": 30}))
        await asyncio.sleep(0.5)  # both are waiting on some replica by now
        sent = time.monotonic()
        body: dict[str, Any] = {
            "type": "user.message",
            "session": "s0",
            "payload": {"text": "hi", "images": [{"media_type": "image/png", "data": _big_png()}]},
        }
        r = await http.post(base, json=body)
        assert r.status_code == 202, r.text
        page = (await asyncio.wait_for(poll, within(10))).json()
        assert page["frames"][0]["type"] == "user.message"
        await asyncio.wait_for(stream, within(10))
        # The frame itself, not the poll's 30 s timeout or a buffer's end.
        assert sse[0] - sent < min(within(5), 25)
        # Seven more: with the first still running that is the instance's
        # TETHER_MAX_PENDING_TURNS (8), so none is refused for capacity (a ninth was,
        # 429, whenever the first turn had not finished yet).
        for k in range(1, limits.TETHER_MAX_PENDING_TURNS):
            small = {"type": "user.message", "session": f"s{k}", "payload": {"text": "hi"}}
            assert (await http.post(base, json=small)).status_code == 202
        await _answered(http, base, limits.TETHER_MAX_PENDING_TURNS)
        await _origins_through_the_balancer(http, balanced, base)
    with psycopg.connect(pg_url) as conn:
        owners = conn.execute("SELECT DISTINCT owner FROM visus_turns").fetchall()
    assert len(owners) >= 2  # the balancer spread the messages, so the turns


async def _origins_through_the_balancer(http: httpx.AsyncClient, balanced: str, base: str) -> None:
    """A browser's post from the balancer's own origin (its port included) is taken, one
    from another origin is not: the balancer must pass the Host header with its port,
    or the replicas cannot tell their own origin."""
    message = {"type": "user.message", "session": "web-b", "payload": {"text": "hi"}}
    own = await http.post(base, json=message, headers={"Origin": balanced})
    assert own.status_code == 202, own.text
    other = await http.post(base, json=message, headers={"Origin": "http://127.0.0.1:1"})
    assert other.status_code == 403, other.text


async def _answered(http: httpx.AsyncClient, base: str, want: int) -> None:
    after, done = 0, 0
    deadline = time.monotonic() + within(60)
    while done < want:
        assert time.monotonic() < deadline, f"{done} of {want} turns answered"
        page = (await http.get(f"{base}/poll", params={"after_seq": after, "wait": 5})).json()
        done += sum(f["type"] == "assistant.done" for f in page["frames"])
        after = page["next_seq"]


def test_caddy_sends_nothing_new_to_an_unready_replica(pg_url: str, tmp_path: Path) -> None:
    """The documented Caddyfile probes /readyz: a replica switched to unready (as one
    draining after SIGTERM is) gets no request until it is ready again."""
    with _balancer("caddy", pg_url, tmp_path) as (url, hits):
        auth = {"Authorization": f"Bearer {TOKEN}"}
        unready = hits[1]
        unready.app.state.draining = True
        # Caddy probes every second; a loaded machine may take a few rounds to see it.
        deadline = time.monotonic() + within(30)
        while True:
            before = len(unready.paths)
            for _ in range(9):  # three rounds of round robin
                assert httpx.get(f"{url}/v1/instances", headers=auth).status_code == 200
            if len(unready.paths) == before:
                break
            assert time.monotonic() < deadline, "Caddy kept sending to the unready replica"
            time.sleep(0.5)
        served = [len(h.paths) for h in hits]
        for _ in range(12):
            assert httpx.get(f"{url}/v1/instances", headers=auth).status_code == 200
        after = [len(h.paths) - n for h, n in zip(hits, served, strict=True)]
        assert after[1] == 0
        assert after[0] > 0
        assert after[2] > 0  # the rest share the traffic
        unready.app.state.draining = False  # ready again: it gets its share back
        deadline = time.monotonic() + within(30)
        while len(unready.paths) == served[1] + after[1]:
            assert time.monotonic() < deadline, "Caddy did not come back to the ready replica"
            httpx.get(f"{url}/v1/instances", headers=auth)
            time.sleep(0.2)
