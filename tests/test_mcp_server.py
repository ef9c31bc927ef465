"""The MCP server with the official MCP client: in-process, over stdio, over HTTP."""

from __future__ import annotations

import base64
import io
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, ImageContent, TextContent
from PIL import Image

try:
    from tests.tether.doubles import Factory, live_server, png
except ImportError:  # tests/ not a package: pytest put tests/ itself on sys.path
    from tether.doubles import Factory, live_server, png  # type: ignore[no-redef]
from visus import limits
from visus.mcp_server import build_server, mount_mcp, read_result
from visus.tether.client import TetherClient
from visus.tether.runner import ImageIn
from visus.tether.server import create_app

MB = limits.MB


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def text_of(result: CallToolResult) -> str:
    item = result.content[0]
    assert isinstance(item, TextContent)
    return item.text


async def read_until_done(client: Client, iid: str, count: int) -> dict[str, Any]:
    """tether_read (long) until ``count`` assistant.done frames were seen; one final
    read from 0 returns them all together."""
    after, done = 0, 0
    for _ in range(50):
        r = await client.call_tool(
            "tether_read", {"instance": iid, "after_seq": after, "wait_ms": 5000}
        )
        answer = json.loads(text_of(r))
        done += sum(f["type"] == "assistant.done" for f in answer["frames"])
        after = answer["next_seq"]
        if done >= count:
            break
    assert done >= count
    return answer


Harness = tuple[Client, Factory, str, TetherClient]


@asynccontextmanager
async def harness(tmp_path: Path) -> AsyncIterator[Harness]:
    """An in-process MCP client on the server, which reaches the tether app in-process.

    (A context manager, not a fixture: the SDK's task groups must open and close in
    the test's own task.)
    """
    factory = Factory()
    app = create_app(data_dir=tmp_path / "data", runner_factory=factory)
    tc = TetherClient("http://127.0.0.1", transport=httpx.ASGITransport(app=app))
    iid = (await tc.create_instance("reference"))["id"]
    server = build_server(tc, roots=[tmp_path])
    # mode="legacy": the SDK's memory streams and the initialize handshake, JSON-RPC framed.
    async with Client(server, mode="legacy") as client:
        yield client, factory, iid, tc
    await tc.aclose()
    await app.state.registry.aclose()


async def test_lists_the_tools(tmp_path: Path) -> None:
    async with harness(tmp_path) as (client, _factory, _iid, _tc):
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert {"tether_send", "tether_read", "tether_instances", "view"} <= set(tools)
        send = tools["tether_send"].input_schema
        assert set(send["required"]) == {"instance", "text"}
        assert {"images", "session_id"} <= set(send["properties"])
        # JSON-string answers carry no outputSchema: no second copy as structuredContent
        assert all(t.output_schema is None for t in tools.values())
        answer = await client.call_tool("tether_instances", {})
        assert answer.structured_content is None
        assert json.loads(text_of(answer))[0]["id"] == _iid


async def test_image_round_trip_in_process(
    tmp_path: Path,
) -> None:
    async with harness(tmp_path) as (client, factory, iid, _tc):
        red = png((255, 0, 0))
        r = await client.call_tool(
            "tether_send",
            {
                "instance": iid,
                "text": "what colour?",
                "session_id": "s1",
                "images": [{"media_type": "image/png", "data": b64(red).rstrip("=")}],
            },
        )
        assert not r.is_error, r
        sent = json.loads(text_of(r))
        assert sent["session"] == "s1"
        answer = await read_until_done(client, iid, 1)
        runner_call = factory.runners[iid].calls[0]
        assert runner_call.images == (ImageIn("image/png", red),)
        r = await client.call_tool(
            "tether_read", {"instance": iid, "session_id": "s1", "include_user_images": True}
        )
        answer = json.loads(text_of(r))
        done = next(f for f in answer["frames"] if f["type"] == "assistant.done")
        assert done["reply_to"] == sent["msg_id"]
        assert done["payload"]["images"] == [{"_mcp_index": 1}]  # index 0: the user's image
        images = [c for c in r.content[1:] if isinstance(c, ImageContent)]
        assert len(images) == len(r.content) - 1 == 2
        assert base64.b64decode(images[1].data) == red
        assert images[1].mime_type == "image/png"


async def test_mcp_index_correlates_images_across_frames(
    tmp_path: Path,
) -> None:
    async with harness(tmp_path) as (client, _factory, iid, _tc):
        colours = {"a": [(255, 0, 0), (0, 255, 0)], "b": [(0, 0, 255)]}
        for session, cols in colours.items():
            r = await client.call_tool(
                "tether_send",
                {
                    "instance": iid,
                    "text": f"msg {session}",
                    "session_id": session,
                    "images": [{"media_type": "image/png", "data": b64(png(c))} for c in cols],
                },
            )
            assert not r.is_error
        await read_until_done(client, iid, 2)
        r = await client.call_tool("tether_read", {"instance": iid, "include_user_images": True})
        answer = json.loads(text_of(r))
        items = r.content[1:]
        dones = [f for f in answer["frames"] if f["type"] == "assistant.done"]
        assert len(dones) == 2  # two assistant.done frames with images in one read
        total = 0
        for frame in answer["frames"]:
            stubs = frame["payload"].get("images", [])
            expected = (
                colours[frame["session"]]
                if frame["type"] in ("user.message", "assistant.done")
                else []
            )
            assert len(stubs) == len(expected)
            for stub, colour in zip(stubs, expected, strict=True):
                item = items[stub["_mcp_index"]]
                assert isinstance(item, ImageContent)
                pixel = Image.open(io.BytesIO(base64.b64decode(item.data))).getpixel((0, 0))
                assert pixel == colour
                total += 1
        assert total == len(items) == 6  # 3 in, 3 out; every item claimed by exactly one stub
        indices = [
            s["_mcp_index"] for f in answer["frames"] for s in f["payload"].get("images", [])
        ]
        assert indices == list(range(6))  # in order across frames


@pytest.mark.parametrize(
    ("images", "needle"),
    [
        ([b"\0" * (15 * MB)], "TETHER_MAX_IMAGE_BYTES"),
        ([b"\0" * (8 * MB)] * 4, "TETHER_MAX_FRAME_IMAGE_BYTES"),
        ([b"\0" * 100] * 5, "TETHER_MAX_IMAGES_PER_MESSAGE"),
    ],
)
async def test_tether_send_rejects_before_sending(
    tmp_path: Path, images: list[bytes], needle: str
) -> None:
    async with harness(tmp_path) as (client, _factory, iid, tc):
        r = await client.call_tool(
            "tether_send",
            {
                "instance": iid,
                "text": "x",
                "images": [{"media_type": "image/png", "data": b64(d)} for d in images],
            },
        )
        assert r.is_error
        assert needle in text_of(r)
        assert (await tc.get_instance(iid))["last_seq"] == 0


async def test_tether_send_rejects_bad_images(
    tmp_path: Path,
) -> None:
    async with harness(tmp_path) as (client, _factory, iid, tc):
        for image, needle in (
            ({"media_type": "image/png", "data": "data:image/png;base64,AAAA"}, "data-URI"),
            ({"media_type": "image/heic", "data": "AAAA"}, "images[0].media_type"),
            ({"media_type": "image/png", "data": "@@@@"}, "base64"),
        ):
            r = await client.call_tool(
                "tether_send", {"instance": iid, "text": "", "images": [image]}
            )
            assert r.is_error
            assert needle in text_of(r)
        r = await client.call_tool("tether_send", {"instance": "i-missing", "text": "hi"})
        assert r.is_error
        assert "not found" in text_of(r)
        assert (await tc.get_instance(iid))["last_seq"] == 0


async def test_no_images_means_no_images_key(
    tmp_path: Path,
) -> None:
    async with harness(tmp_path) as (client, _factory, iid, _tc):
        await client.call_tool("tether_send", {"instance": iid, "text": "plain"})
        await read_until_done(client, iid, 1)
        r = await client.call_tool("tether_read", {"instance": iid})
        assert len(r.content) == 1
        assert "images" not in text_of(r)
        frames = json.loads(text_of(r))["frames"]
        assert frames[0]["payload"] == {"text": "plain"}
        assert frames[-1]["payload"] == {"text": "echo: plain"}


def test_read_result_drops_bad_images_with_a_note() -> None:
    good = b64(png((9, 9, 9)))
    answer = {
        "next_seq": 2,
        "gap": False,
        "frames": [
            {
                "seq": 2,
                "type": "assistant.done",
                "payload": {
                    "text": "",
                    "images": [
                        {"media_type": "image/png", "data": "data:x"},
                        {"media_type": "image/png", "data": good},
                        {"media_type": "text/html", "data": good},
                    ],
                },
            }
        ],
    }
    r = read_result(answer)
    stubs = json.loads(text_of(r))["frames"][0]["payload"]["images"]
    assert "data-URI" in stubs[0]["_mcp_error"]
    assert stubs[1] == {"_mcp_index": 0}
    assert "media_type" in stubs[2]["_mcp_error"]
    assert len(r.content) == 2


async def test_view_fits_under_the_mcp_result_cap(tmp_path: Path) -> None:
    async with harness(tmp_path) as (client, _factory, _iid, _tc):
        noise = Image.frombytes("RGB", (3000, 2000), os.urandom(3000 * 2000 * 3))
        noise.save(tmp_path / "noise.png")
        assert (tmp_path / "noise.png").stat().st_size > 10 * MB
        r = await client.call_tool("view", {"path": "noise.png"})
        assert not r.is_error, r
        item = r.content[1]
        assert isinstance(item, ImageContent)
        size = sum(len(c.text) if isinstance(c, TextContent) else len(c.data) for c in r.content)
        assert size <= limits.MCP_MAX_RESULT_BYTES
        seen = Image.open(io.BytesIO(base64.b64decode(item.data)))
        assert max(seen.size) <= 1568
        assert "3000x2000" in text_of(r)
        r = await client.call_tool("view", {"path": "missing.png"})
        assert r.is_error
        assert "not_found" in text_of(r)
        r = await client.call_tool("view", {"path": "/etc/passwd"})
        assert r.is_error
        assert "outside_reach" in text_of(r)
        # a text too large to render: no hint at a read tool this server lacks
        lines = limits.MAX_TEXT_BYTES // 100 + 1
        (tmp_path / "big.log").write_text(("y" * 99 + "\n") * lines, encoding="utf-8")
        r = await client.call_tool("view", {"path": "big.log"})
        assert r.is_error
        refusal = json.loads(text_of(r))
        assert refusal["reason"] == "too_large"
        assert "read(" not in refusal["message"]
        assert "this server has no read tool" in refusal["message"]


async def test_view_pages_through_a_long_text_file(tmp_path: Path) -> None:
    (tmp_path / "long.py").write_text("".join(f"x_{i} = {i}\n" for i in range(5000)))
    async with harness(tmp_path) as (client, _factory, _iid, _tc):
        listed = {t.name: t for t in (await client.list_tools()).tools}
        props = listed["view"].input_schema["properties"]
        assert {"offset", "limit"} <= set(props)
        first = await client.call_tool("view", {"path": "long.py"})
        assert not first.is_error, first
        # The host is told what it saw and how to go on (a long file shows its start).
        assert "lines 1-120 of 5000" in text_of(first)
        assert "offset=120 shows the next lines" in text_of(first)
        later = await client.call_tool("view", {"path": "long.py", "offset": 4000, "limit": 60})
        assert not later.is_error, later
        assert "lines 4001-4060 of 5000" in text_of(later)
        assert "offset=4060 shows the next lines" in text_of(later)
        assert isinstance(later.content[1], ImageContent)
        last = await client.call_tool("view", {"path": "long.py", "offset": 4990})
        assert "lines 4991-5000 of 5000" in text_of(last)
        assert "next lines" not in text_of(last)
        bad = await client.call_tool("view", {"path": "long.py", "offset": -1})
        assert bad.is_error


async def test_round_trip_over_stdio(tmp_path: Path) -> None:
    factory = Factory()
    app = create_app(data_dir=tmp_path, runner_factory=factory, token="tok")
    with live_server(app) as base:
        async with TetherClient(base, "tok") as tc:
            iid = (await tc.create_instance("reference"))["id"]
        visus = Path(sys.executable).with_name("visus")
        params = StdioServerParameters(
            command=str(visus),
            args=["mcp", "--url", base, "--root", str(tmp_path)],
            env={**os.environ, "VISUS_TOKEN": "tok"},
        )
        blue = png((0, 0, 255))
        async with Client(params, mode="legacy") as client:
            r = await client.call_tool(
                "tether_send",
                {
                    "instance": iid,
                    "text": "",
                    "images": [{"media_type": "image/png", "data": b64(blue)}],
                },
            )
            assert not r.is_error, r
            await read_until_done(client, iid, 1)
            r = await client.call_tool("tether_read", {"instance": iid, "after_seq": 1})
            frames = json.loads(text_of(r))["frames"]
            done = next(f for f in frames if f["type"] == "assistant.done")
            assert done["payload"]["images"] == [{"_mcp_index": 0}]
            item = r.content[1]
            assert isinstance(item, ImageContent)
            assert base64.b64decode(item.data) == blue
    assert factory.runners[iid].calls[0].images == (ImageIn("image/png", blue),)


async def test_streamable_http_at_mcp_with_token(tmp_path: Path) -> None:
    factory = Factory()
    app = create_app(data_dir=tmp_path, runner_factory=factory, token="tok")
    mount_mcp(app, roots=[tmp_path])
    with live_server(app) as base:
        assert httpx.post(f"{base}/mcp", json={}).status_code == 401
        async with TetherClient(base, "tok") as tc:
            iid = (await tc.create_instance("reference"))["id"]
        http = httpx2.AsyncClient(headers={"Authorization": "Bearer tok"}, timeout=30)
        async with http, Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client:
            green = png((0, 255, 0))
            r = await client.call_tool(
                "tether_send",
                {
                    "instance": iid,
                    "text": "hi",
                    "images": [{"media_type": "image/png", "data": b64(green)}],
                },
            )
            assert not r.is_error, r
            await read_until_done(client, iid, 1)
            r = await client.call_tool("tether_read", {"instance": iid, "after_seq": 1})
            item = r.content[-1]
            assert isinstance(item, ImageContent)
            assert base64.b64decode(item.data) == green


@pytest.mark.slow
async def test_vision_analyze_asks_the_reference_model(tmp_path: Path) -> None:
    from PIL import ImageDraw, ImageFont

    from visus.config import load_config
    from visus.media import font_path
    from visus.reference.server import serve_in_background

    font = font_path("DejaVuSans.ttf")
    sign = Image.new("RGB", (640, 240), "white")
    ImageDraw.Draw(sign).text(
        (60, 70), "LANTERN", fill="black", font=ImageFont.truetype(str(font), 72)
    )
    sign.save(tmp_path / "sign.png")
    with serve_in_background() as url:
        cfg = load_config(
            env={
                "VISUS_DATA": str(tmp_path / "data"),
                "VISUS_PROVIDERS__REFERENCE__BASE_URL": url,
                "VISUS_CONFIG": "",
            }
        )
        tc = TetherClient("http://unused")
        server = build_server(tc, roots=[tmp_path], analyze_config=cfg)
        async with Client(server, mode="legacy") as client:
            r = await client.call_tool(
                "vision_analyze", {"prompt": "What does the sign say?", "file_path": "sign.png"}
            )
            assert not r.is_error, r
            envelope = json.loads(text_of(r))
            assert envelope["model"] == "reference"
            assert "LANTERN" in envelope["text"]
            r = await client.call_tool("vision_analyze", {"prompt": "?", "file_path": "nope.png"})
            assert r.is_error
            refusal = json.loads(text_of(r))  # analyze's code, spelled as view's reasons
            assert (refusal["reason"], refusal["ok"]) == ("file_not_found", False)
            assert "nope.png" in refusal["message"]
        await tc.aclose()


async def test_streamable_http_takes_what_stdio_takes_and_names_the_bound_past_it(
    tmp_path: Path,
) -> None:
    """A 10 MB image goes through /mcp as over stdio (the SDK's own 4 MiB body cap
    refused it with an opaque -32603); 15 MB gets visus's per-image limit error, and a
    body past MCP_MAX_REQUEST_BYTES visus's own 413."""
    factory = Factory()
    app = create_app(data_dir=tmp_path, runner_factory=factory, token="tok")
    mount_mcp(app, roots=[tmp_path])
    ten = png((1, 2, 3)) + os.urandom(10 * MB - len(png((1, 2, 3))))
    with live_server(app) as base:
        async with TetherClient(base, "tok") as tc:
            iid = (await tc.create_instance("reference"))["id"]
        http = httpx2.AsyncClient(headers={"Authorization": "Bearer tok"}, timeout=60)
        async with http, Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client:
            image = {"media_type": "image/png", "data": b64(ten)}
            r = await client.call_tool(
                "tether_send", {"instance": iid, "text": "", "images": [image]}
            )
            assert not r.is_error, text_of(r)[:300]
            image = {"media_type": "image/png", "data": b64(ten + ten[: 5 * MB])}
            r = await client.call_tool(
                "tether_send", {"instance": iid, "text": "", "images": [image]}
            )
            assert r.is_error
            assert "TETHER_MAX_IMAGE_BYTES" in text_of(r)
            assert "15.0 MB" in text_of(r)
        huge = (
            b'{"jsonrpc":"2.0","id":1,"method":"x","params":{"d":"'
            + b"A" * limits.MCP_MAX_REQUEST_BYTES
            + b'"}}'
        )
        r = httpx.post(
            f"{base}/mcp",
            content=huge,
            headers={"Authorization": "Bearer tok", "content-type": "application/json"},
        )
        assert r.status_code == 413
        assert "MCP_MAX_REQUEST_BYTES" in r.json()["error"]["message"]
        for _ in range(200):  # the turn starts in the background
            if factory.runners[iid].calls:
                break
            await anyio.sleep(0.05)
    sent = factory.runners[iid].calls[0].images
    assert len(sent) == 1
    assert sent[0].data == ten
