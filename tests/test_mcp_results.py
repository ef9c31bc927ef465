"""Every MCP tool result stays within the host's size limit (MCP_MAX_RESULT_BYTES):
big images are fitted, extra frames deferred to the next read, indices stay exact."""

from __future__ import annotations

import base64
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.types import CallToolResult, ImageContent, TextContent
from PIL import Image

try:
    from tests.test_mcp_server import harness, read_until_done
except ImportError:  # tests/ not a package: pytest put tests/ itself on sys.path
    from test_mcp_server import harness, read_until_done  # type: ignore[no-redef]
from visus import limits
from visus.errors import ConfigError
from visus.mcp_server import max_result_bytes, read_result


def noisy_png(side: int, corner: tuple[int, int, int] = (0, 0, 0)) -> bytes:
    """Random pixels (PNG cannot shrink them) with a solid 8x8 corner to tell it by."""
    im = Image.frombytes("RGB", (side, side), os.urandom(side * side * 3))
    im.paste(corner, (0, 0, 8, 8))
    buf = io.BytesIO()
    im.save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


def size_of(result: CallToolResult) -> int:
    """Bytes of the result as the SDK sends it."""
    return len(result.model_dump_json(by_alias=True, exclude_none=True).encode())


def answer_of(result: CallToolResult) -> dict[str, Any]:
    item = result.content[0]
    assert isinstance(item, TextContent)
    parsed: dict[str, Any] = json.loads(item.text)
    return parsed


async def send(client: Client, iid: str, text: str, *images: bytes) -> None:
    r = await client.call_tool(
        "tether_send",
        {
            "instance": iid,
            "text": text,
            "images": [
                {"media_type": "image/png", "data": base64.b64encode(im).decode()} for im in images
            ],
        },
    )
    assert not r.is_error, r


async def test_a_big_egress_image_is_fitted_under_the_cap(tmp_path: Path) -> None:
    big = noisy_png(1100, (255, 0, 0))  # ~3.6 MB: alone it would make a 4.8 MB result
    assert len(big) > 3 * limits.MB
    async with harness(tmp_path) as (client, _factory, iid, _tc):
        await send(client, iid, "look", big)
        await read_until_done(client, iid, 1)
        after, answer = 0, {"frames": []}
        for _ in range(10):  # the user's frame, deltas, then the done frame alone
            r = await client.call_tool("tether_read", {"instance": iid, "after_seq": after})
            assert size_of(r) <= limits.MCP_MAX_RESULT_BYTES
            answer = answer_of(r)
            if any(f["type"] == "assistant.done" for f in answer["frames"]):
                break
            assert answer["deferred"] is True  # the done frame waits for a read of its own
            after = answer["next_seq"]
        assert answer["truncated"] is True
        done = next(f for f in answer["frames"] if f["type"] == "assistant.done")
        (stub,) = done["payload"]["images"]
        assert stub["fitted"]["from_bytes"] == len(big)
        item = r.content[stub["_mcp_index"] + 1]
        assert isinstance(item, ImageContent)
        seen = Image.open(io.BytesIO(base64.b64decode(item.data)))
        assert (seen.width, seen.height) == (stub["fitted"]["width"], stub["fitted"]["height"])
        assert max(seen.size) <= 1568


async def test_a_long_history_pages_under_the_cap_with_exact_indices(tmp_path: Path) -> None:
    colours = [(255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 0), (0, 255, 255)]
    sent = [noisy_png(330, c) for c in colours]  # ~330 KB each: three fit in one result
    async with harness(tmp_path) as (client, _factory, iid, _tc):
        for i, image in enumerate(sent):
            await send(client, iid, f"turn {i}", image)
            await read_until_done(client, iid, i + 1)
        after, pages, got, seqs = 0, 0, [], []
        deferred_seen = False
        while True:
            r = await client.call_tool(
                "tether_read",
                {"instance": iid, "after_seq": after, "include_user_images": True},
            )
            assert size_of(r) <= limits.MCP_MAX_RESULT_BYTES
            answer = answer_of(r)
            assert "truncated" not in answer  # nothing needed fitting: whole frames moved on
            deferred_seen |= answer.get("deferred", False)
            if not answer["frames"]:
                break
            pages += 1
            items = r.content[1:]
            indices = []
            for frame in answer["frames"]:
                seqs.append(frame["seq"])
                for stub in frame["payload"].get("images", []):
                    indices.append(stub["_mcp_index"])
                    item = items[stub["_mcp_index"]]
                    assert isinstance(item, ImageContent)
                    got.append((frame["type"], base64.b64decode(item.data)))
            assert indices == list(range(len(items)))  # every item claimed once, in order
            assert answer["next_seq"] == answer["frames"][-1]["seq"]
            after = answer["next_seq"]
        assert deferred_seen
        assert pages >= 3
        assert seqs == sorted(set(seqs))  # no frame twice, none skipped below
        assert seqs == list(range(1, seqs[-1] + 1))
        assert [d for t, d in got if t == "user.message"] == sent
        assert [d for t, d in got if t == "assistant.done"] == sent  # bytes unchanged


async def test_user_images_come_back_only_when_asked(tmp_path: Path) -> None:
    mine = noisy_png(16, (1, 2, 3))
    async with harness(tmp_path) as (client, _factory, iid, _tc):
        await send(client, iid, "hi", mine)
        await read_until_done(client, iid, 1)
        r = await client.call_tool("tether_read", {"instance": iid})
        frames = answer_of(r)["frames"]
        user = next(f for f in frames if f["type"] == "user.message")
        assert "_mcp_index" not in user["payload"]["images"][0]
        assert user["payload"]["images"][0]["media_type"] == "image/png"
        assert "_mcp_omitted" in user["payload"]["images"][0]
        done = next(f for f in frames if f["type"] == "assistant.done")
        assert done["payload"]["images"] == [{"_mcp_index": 0}]
        assert len(r.content) == 2  # the text, then the assistant's image only
        r = await client.call_tool("tether_read", {"instance": iid, "include_user_images": True})
        assert len(r.content) == 3


def test_read_result_cap_is_a_parameter_and_text_is_cut_when_alone_too_big() -> None:
    frame = {"seq": 1, "type": "assistant.done", "payload": {"text": 'é"' * 200_000}}
    r = read_result({"frames": [frame], "next_seq": 1, "gap": False}, max_bytes=100_000)
    assert size_of(r) <= 100_000
    answer = answer_of(r)
    assert answer["truncated"] is True
    assert answer["frames"][0]["truncated"] is True
    assert answer["frames"][0]["payload"]["text"].startswith('é"é')


def test_the_cap_is_configurable(monkeypatch: pytest.MonkeyPatch) -> None:
    assert max_result_bytes() == limits.MCP_MAX_RESULT_BYTES
    monkeypatch.setenv("VISUS_MCP_MAX_RESULT_BYTES", str(200_000))
    assert max_result_bytes() == 200_000
    monkeypatch.setenv("VISUS_MCP_MAX_RESULT_BYTES", "lots")
    with pytest.raises(ConfigError, match="VISUS_MCP_MAX_RESULT_BYTES"):
        max_result_bytes()
    with pytest.raises(ConfigError, match="MCP_MIN_RESULT_BYTES"):
        max_result_bytes(1000)


async def test_over_streamable_http_a_big_image_read_stays_under_the_cap(tmp_path: Path) -> None:
    """The official client over /mcp on a loopback server (its SSE events are capped
    at 1 MB too): the 3.6 MB echo comes back fitted, in a result under the cap."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    try:
        from tests.tether.doubles import Factory, live_server
    except ImportError:  # tests/ not a package
        from tether.doubles import Factory, live_server  # type: ignore[no-redef]
    from visus.mcp_server import mount_mcp
    from visus.tether.client import TetherClient
    from visus.tether.server import create_app

    app = create_app(data_dir=tmp_path, runner_factory=Factory(), token="tok")
    mount_mcp(app, roots=[tmp_path])
    big = noisy_png(1100, (0, 0, 255))
    with live_server(app) as base:
        async with TetherClient(base, "tok") as tc:
            iid = (await tc.create_instance("reference"))["id"]
        http = httpx2.AsyncClient(headers={"Authorization": "Bearer tok"}, timeout=60)
        async with http, Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client:
            await send(client, iid, "look", big)
            await read_until_done(client, iid, 1)
            after, fitted = 0, None
            for _ in range(10):
                r = await client.call_tool("tether_read", {"instance": iid, "after_seq": after})
                assert not r.is_error
                assert size_of(r) <= limits.MCP_MAX_RESULT_BYTES
                answer = answer_of(r)
                for frame in answer["frames"]:
                    if frame["type"] == "assistant.done":
                        fitted = frame["payload"]["images"][0]
                if fitted is not None or not answer["frames"]:
                    break
                after = answer["next_seq"]
            assert fitted is not None
            assert fitted["fitted"]["from_bytes"] == len(big)
