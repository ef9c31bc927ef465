"""What the commands and the README say agree with what they do (issue 36, "What the
page and docs say"): the public routes, ``visus mcp --no-fetch-urls``, the address
``--host 0.0.0.0`` prints, ``--schema``'s exit code, ``send_image``'s refusals, and a
server log that keeps each line whole."""

from __future__ import annotations

import base64
import gc
import io
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image
from typer.testing import CliRunner

from visus.agent import ToolContext, ToolRegistry
from visus.app import create_main_app
from visus.cli import app
from visus.models import get_model
from visus.perception import Reach
from visus.record.blobs import MemoryBlobStore
from visus.record.messages import TextPart
from visus.tether import server as tether_server_module
from visus.web.auth import LOGIN_PATH

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def _readme() -> str:
    return " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())


def _flat(text: str) -> str:
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


# --- the token ---------------------------------------------------------------------------


def test_the_readme_names_every_route_that_needs_no_token(tmp_path: Path) -> None:
    # pydantic reads some models' docstrings with ast.parse, and CPython 3.11.7 fails it
    # ("AST constructor recursion depth mismatch") when an earlier test's finalizer runs
    # in the middle: no collection while the app is built.
    gc.collect()
    gc.disable()
    try:
        served = create_main_app(
            data=tmp_path / "data", token="t0123456789abcdef", model="reference"
        )
    finally:
        gc.enable()
    page = {"/", "/favicon.ico", LOGIN_PATH}
    public = set(served.state.public_paths) - page
    assert "/openapi.json" in public
    said = _readme()
    start = said.index("Every route needs a token")
    sentence = said[start : said.index("--token", start)]
    for path in sorted(public):
        assert f"`{path}`" in sentence, (path, sentence)

    async def check() -> None:
        transport = httpx.ASGITransport(app=served)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            assert (await c.get("/openapi.json")).status_code == 200
            assert (await c.get("/v1/instances")).status_code == 401
            assert (await c.get("/web/api/config")).status_code == 401

    import asyncio

    asyncio.run(check())


# --- visus mcp --no-fetch-urls -------------------------------------------------------------


def test_mcp_help_and_readme_say_the_same_of_no_fetch_urls(tmp_path: Path) -> None:
    shown = _flat(runner.invoke(app, ["mcp", "--help"], env={"COLUMNS": "200"}).stdout)
    help_text = shown[shown.index("--no-fetch-urls") :]
    # The switch covers view too (its reach carries it), not only vision_analyze.
    assert "view refuses it (outside_reach)" in help_text
    assert "vision_analyze its file_url (url_blocked)" in help_text
    said = _readme()
    assert "`visus mcp --no-fetch-urls`" in said
    assert '`view("https://...")` is refused (`outside_reach`) and `vision_analyze`\'s' in said
    printed = runner.invoke(
        app, ["mcp", "--print-config", "--root", str(tmp_path), "--no-fetch-urls"]
    )
    entry = json.loads(printed.stdout)["mcpServers"]["visus"]
    assert entry["args"][-1] == "--no-fetch-urls"  # the host starts it as it was asked


# --- --host 0.0.0.0 --------------------------------------------------------------------------


class _NoServer:
    def run(self) -> None:
        pass


def test_a_wildcard_host_prints_an_address_a_browser_can_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tether_server_module, "tether_server", lambda app, **kw: _NoServer())
    monkeypatch.setenv("VISUS_CONFIG", os.devnull)
    result = runner.invoke(
        app,
        ["serve", "--host", "0.0.0.0", "--port", "0", "--no-mcp", "--data", str(tmp_path)],
        env={"VISUS_TOKEN": "tok-0123456789"},
    )
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    assert "0.0.0.0:" not in result.stdout.replace("(0.0.0.0 port", "")
    assert "  web chat   http://127.0.0.1:0/?token=<your token>" in result.stdout
    assert f"http://{socket.gethostname()}:0/" in result.stdout  # from another machine


# --- --schema ------------------------------------------------------------------------------


def test_a_bad_schema_is_a_command_line_mistake_like_a_missing_one(tmp_path: Path) -> None:
    bad = tmp_path / "bad.schema.json"
    bad.write_text('{"type": "strin"}', encoding="utf-8")
    sign = str(ROOT / "docs" / "examples" / "sign.png")
    missing = runner.invoke(app, ["analyze", sign, "-p", "x", "--schema", "/nonexistent.json"])
    invalid = runner.invoke(app, ["analyze", sign, "-p", "x", "--schema", str(bad)])
    assert (missing.exit_code, invalid.exit_code) == (2, 2), invalid.stderr
    (line,) = invalid.stderr.splitlines()
    assert line.startswith(f"visus: --schema {bad}: format is not a valid JSON Schema")


# --- send_image ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "reason"),
    [("missing.png", "not_found"), ("notes.txt", "unsupported_type"), ("../out.png", None)],
)
async def test_send_image_refuses_as_view_does(tmp_path: Path, path: str, reason: str) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "notes.txt").write_text("hello\n", encoding="utf-8")
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), "red").save(buf, "PNG")
    (tmp_path / "out.png").write_bytes(buf.getvalue())
    ctx = ToolContext(
        reach=Reach([root]), model=get_model("gpt-4.1"), blobs=MemoryBlobStore(), session_id="s"
    )
    registry = ToolRegistry.builtin()
    sent = await registry.call("send_image", {"path": path}, ctx)
    viewed = await registry.call("view", {"path": path}, ctx)
    (text,) = sent.parts
    assert isinstance(text, TextPart)
    assert sent.is_error
    expected = reason or "outside_reach"
    assert text.text.startswith(f"refused ({expected}): {path}"), text.text
    if reason != "unsupported_type":  # a text file is viewable, but not sendable
        assert str(viewed.parts[0]).count(f"refused ({expected})") == 1


# --- the server's log ------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_servers_log_file_keeps_each_line_whole(tmp_path: Path) -> None:
    """A failed turn's warning, longer than 80 columns, is one line of the log file
    (the MCP SDK's rich handler wrapped it, and wrote it twice)."""
    log = tmp_path / "serve.log"
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env |= {"VISUS_CONFIG": os.devnull, "VISUS_DATA": str(tmp_path / "data")}
    visus = str(Path(sys.executable).with_name("visus"))
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [visus, "serve", "--port", str(port), "--no-token"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        buf = io.BytesIO()
        Image.new("RGB", (300, 200), "red").save(buf, "PNG")
        broken = base64.b64encode(buf.getvalue()[:200]).decode()
        frame: dict[str, Any] = {
            "type": "user.message",
            "session": "logs",
            "payload": {"text": "hi", "images": [{"media_type": "image/png", "data": broken}]},
        }
        posted = httpx.post(f"{base}/v1/instances/i-webchat/tether", json=frame, timeout=30)
        assert posted.status_code in (200, 201, 202), posted.text
        while "turn failed" not in log.read_text(errors="replace"):
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        time.sleep(0.5)  # anything else written for the same record
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    lines = log.read_text(errors="replace").splitlines()
    failed = [line for line in lines if "turn failed" in line]
    assert len(failed) == 1, lines
    assert len(failed[0]) > 80, failed
    assert failed[0].rstrip().endswith("truncated") or "could not be decoded" in failed[0]
    assert not any(line.startswith(" " * 20) for line in lines), lines
