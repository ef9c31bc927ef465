from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image as PILImage

from tests.timing import within
from visus import limits
from visus.errors import ConfigError, InvalidInputError, LimitError, NotFoundError
from visus.tether.client import TetherClient
from visus.tether.frames import AssistantDone, Frame, Image, decode_frame
from visus.tether.instances import BusyError
from visus.tether.limits import FrameError, TetherLimitError
from visus.tether.runner import ImageIn
from visus.tether.server import (
    InUseError,
    check_bind,
    create_app,
    error_status,
    serve,
    serve_dir,
)

from .doubles import Factory, live_server, png

MB = limits.MB


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def poll_until(tc: TetherClient, iid: str, done: Any, after: int = 0) -> list[dict[str, Any]]:
    """Long-poll from ``after`` until ``done(frame)`` holds for a frame; return all seen."""
    seen: list[dict[str, Any]] = []
    for _ in range(50):
        raw = await tc.poll_raw(iid, after, wait=5)
        seen += raw["frames"]
        after = raw["next_seq"]
        if any(done(f) for f in raw["frames"]):
            return seen
    raise AssertionError(f"condition never met: {seen}")


async def poll_until_done(
    tc: TetherClient, iid: str, msg_id: str, after: int = 0
) -> list[dict[str, Any]]:
    """Every frame until the ``assistant.done`` replying to ``msg_id``."""
    return await poll_until(
        tc, iid, lambda f: f.get("reply_to") == msg_id and f["type"] == "assistant.done", after
    )


@pytest.fixture
def factory() -> Factory:
    return Factory()


@pytest.fixture
async def client(tmp_path: Path, factory: Factory) -> Any:
    app = create_app(data_dir=tmp_path, runner_factory=factory)
    async with TetherClient("http://127.0.0.1", transport=httpx.ASGITransport(app=app)) as tc:
        yield tc
    await app.state.registry.aclose()


async def test_instances_crud(client: TetherClient, factory: Factory, tmp_path: Path) -> None:
    inst = await client.create_instance("reference", tools=["view"], roots=[str(tmp_path)])
    assert inst["id"].startswith("i-")
    assert inst["model"] == "reference"
    assert inst["tools"] == ["view"]
    assert inst["roots"] == [str(tmp_path)]
    assert [i["id"] for i in await client.list_instances()] == [inst["id"]]
    assert (await client.get_instance(inst["id"]))["model"] == "reference"
    runner = factory.runners[inst["id"]]
    assert runner.config.data_dir == str(tmp_path / "instances" / inst["id"])
    await client.delete_instance(inst["id"])
    assert runner.closed
    assert not (tmp_path / "instances" / inst["id"]).exists()
    with pytest.raises(NotFoundError):
        await client.get_instance(inst["id"])
    assert await client.list_instances() == []


async def test_create_errors_are_400_naming_the_field(client: TetherClient) -> None:
    with pytest.raises(InvalidInputError, match="no-such-model"):
        await client.create_instance("no-such-model")
    with pytest.raises(InvalidInputError, match="roots"):
        await client.create_instance("reference", roots=["relative/dir"])
    with pytest.raises(InvalidInputError, match="model"):
        await client._json("POST", "/v1/instances", json={"tools": []})
    assert await client.list_instances() == []


async def test_a_huge_create_request_is_refused_short_and_stores_nothing(
    client: TetherClient,
) -> None:
    # redteam: a 20 MB model name came back twice in a 40 MB error (and a long list of
    # tools or roots would be held and stored): each field is bounded, the answer short.
    for body, field in (
        ({"model": "m" * 2_000_000}, "model"),
        ({"model": "reference", "tools": ["view"] * 10_000}, "tools"),
        ({"model": "reference", "roots": ["/" + "a" * 10_000]}, "roots"),
    ):
        resp = await client._http.post("/v1/instances", json=body)
        assert resp.status_code == 400, (field, resp.status_code)
        assert len(resp.content) < 1000, (field, len(resp.content))
        assert resp.json()["error"]["field"].startswith(f"body.{field}")
    assert await client.list_instances() == []


async def test_text_turn_streams_deltas_then_done(client: TetherClient, factory: Factory) -> None:
    iid = (await client.create_instance("reference"))["id"]
    sent = await client.send(iid, "hello tether world", session="chat-1", user={"id": "7"})
    assert sent["session"] == "chat-1"
    frames = await poll_until_done(client, iid, sent["msg_id"])
    kinds = [f["type"] for f in frames]
    # Three words streamed at once leave as one delta (joined within the window).
    assert kinds == ["user.message", "assistant.delta", "assistant.done"]
    assert [f["seq"] for f in frames] == [1, 2, 3]
    assert frames[1]["payload"]["text"] == "hello tether world "
    assert frames[-1]["payload"] == {"text": "echo: hello tether world"}  # no "images" key
    assert frames[0]["payload"] == {"text": "hello tether world", "user": {"id": "7"}}
    call = factory.runners[iid].calls[0]
    assert (call.session, call.text, call.images, call.user) == (
        "chat-1",
        "hello tether world",
        (),
        {"id": "7"},
    )


async def test_no_images_keeps_the_posted_bytes(client: TetherClient) -> None:
    iid = (await client.create_instance("reference"))["id"]
    body = b'{"v":1,"type":"user.message","session":"s","msg_id":"m1","payload":{"text":"hi"}}'
    resp = await client._http.post(
        f"/v1/instances/{iid}/tether", content=body, headers={"Content-Type": "application/json"}
    )
    assert resp.status_code == 202
    resp = await client._http.get(f"/v1/instances/{iid}/tether/poll", params={"limit": 1})
    frame = resp.json()["frames"][0]
    raw = resp.content
    assert b'"payload":{"text":"hi"}}' in raw
    assert b"images" not in raw
    assert {k: frame[k] for k in ("v", "type", "session", "msg_id", "seq")} == {
        "v": 1,
        "type": "user.message",
        "session": "s",
        "msg_id": "m1",
        "seq": 1,
    }


async def test_image_in_reaches_the_runner_and_comes_back_out(
    client: TetherClient, factory: Factory
) -> None:
    iid = (await client.create_instance("reference"))["id"]
    red, blue = png((255, 0, 0)), png((0, 0, 255))
    sent = await client.send(iid, "", [ImageIn("image/png", red), ImageIn("image/png", blue)])
    frames = await poll_until_done(client, iid, sent["msg_id"])
    assert factory.runners[iid].calls[0].images == (
        ImageIn("image/png", red),
        ImageIn("image/png", blue),
    )
    done = decode_frame(frames[-1])
    assert isinstance(done.frame.payload, AssistantDone)
    assert done.images == (ImageIn("image/png", red), ImageIn("image/png", blue))


async def test_producer_rejects_before_sending(client: TetherClient) -> None:
    iid = (await client.create_instance("reference"))["id"]
    cases = [
        ([ImageIn("image/png", b"\0" * (15 * MB))], "TETHER_MAX_IMAGE_BYTES"),
        ([ImageIn("image/png", b"\0" * (8 * MB))] * 4, "TETHER_MAX_FRAME_IMAGE_BYTES"),
        ([ImageIn("image/png", png((1, 1, 1)))] * 5, "TETHER_MAX_IMAGES_PER_MESSAGE"),
    ]
    for images, limit in cases:
        with pytest.raises(LimitError, match=limit):
            await client.send(iid, "x", images)
    assert (await client.get_instance(iid))["last_seq"] == 0  # nothing reached the server


@pytest.mark.parametrize(
    ("images", "limit"),
    [
        ([b"\0" * (15 * MB)], "TETHER_MAX_IMAGE_BYTES"),
        ([b"\0" * (7 * MB)] * 2 + [b"\0" * (13 * MB // 2)], "TETHER_MAX_FRAME_IMAGE_BYTES"),
        ([b"\0" * 10] * 5, "TETHER_MAX_IMAGES_PER_MESSAGE"),
        ([b"\0" * (8 * MB)] * 4, "TETHER_MAX_WIRE_BYTES"),
    ],
)
async def test_server_checks_again(client: TetherClient, images: list[bytes], limit: str) -> None:
    iid = (await client.create_instance("reference"))["id"]
    frame = {
        "type": "user.message",
        "payload": {
            "text": "",
            "images": [{"media_type": "image/png", "data": b64(d)} for d in images],
        },
    }
    resp = await client._http.post(f"/v1/instances/{iid}/tether", json=frame)
    assert resp.status_code == 413
    err = resp.json()["error"]
    assert err["limit"] == limit
    assert limit in err["message"]
    assert (await client.get_instance(iid))["last_seq"] == 0


async def test_bad_frames_are_400_naming_the_field(client: TetherClient) -> None:
    iid = (await client.create_instance("reference"))["id"]
    url = f"/v1/instances/{iid}/tether"
    cases: list[tuple[Any, str]] = [
        ({"type": "user.message", "payload": {}}, "payload.text"),
        ({"type": "assistant.done", "payload": {"text": ""}}, "type"),
        (
            {
                "type": "user.message",
                "payload": {
                    "text": "",
                    "images": [{"media_type": "image/png", "data": "data:image/png;base64,AAAA"}],
                },
            },
            "payload.images[0].data",
        ),
        (
            {
                "type": "user.message",
                "payload": {"text": "", "images": [{"media_type": "image/bmp", "data": "AAAA"}]},
            },
            "payload.images[0].media_type",
        ),
    ]
    for body, field in cases:
        resp = await client._http.post(url, json=body)
        assert resp.status_code == 400, body
        assert resp.json()["error"]["field"] == field
    resp = await client._http.post(
        url, content=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert resp.status_code == 400
    assert resp.json()["error"]["field"] == "body"
    resp = await client._http.get(f"/v1/instances/{iid}/tether/poll", params={"after_seq": "x"})
    assert resp.status_code == 400
    assert "after_seq" in resp.json()["error"]["field"]
    resp = await client._http.post("/v1/instances/i-nope/tether", json=cases[0][0])
    assert resp.status_code == 404


async def test_failed_turn_and_oversize_egress_become_error_frames(
    tmp_path: Path,
) -> None:
    big = ImageIn("image/png", b"\0" * (11 * MB))
    factory = Factory(extra=(big, ImageIn("image/tiff", b"II*")))
    app = create_app(data_dir=tmp_path, runner_factory=factory)
    async with TetherClient("http://127.0.0.1", transport=httpx.ASGITransport(app=app)) as tc:
        iid = (await tc.create_instance("reference"))["id"]
        sent = await tc.send(iid, "one", [ImageIn("image/png", png((0, 255, 0)))])
        frames = await poll_until_done(tc, iid, sent["msg_id"])
        errors = [f["payload"] for f in frames if f["type"] == "error"]
        assert [e["code"] for e in errors] == ["egress_limit", "egress_invalid"]
        assert "TETHER_MAX_IMAGE_BYTES" in errors[0]["message"]
        assert "image/tiff" in errors[1]["message"]
        done = frames[-1]["payload"]
        assert len(done["images"]) == 1  # the good image went through
        after = frames[-1]["seq"]
        sent = await tc.send(iid, "boom")
        seen = await poll_until(tc, iid, lambda f: f["type"] == "error", after)
        err = seen[-1]
        assert err["reply_to"] == sent["msg_id"]
        assert ":" not in err["msg_id"]
        assert err["msg_id"] != sent["msg_id"]
        assert err["payload"]["code"] == "turn_failed"
        assert "the runner broke" in err["payload"]["message"]
        sent = await tc.send(iid, "still alive")  # the instance outlives a failed turn
        seen = await poll_until_done(tc, iid, sent["msg_id"], err["seq"])
        assert seen[-1]["payload"]["text"] == "echo: still alive"
    await app.state.registry.aclose()


async def test_restart_keeps_instances(tmp_path: Path) -> None:
    first = Factory()
    app = create_app(data_dir=tmp_path, runner_factory=first)
    async with TetherClient("http://127.0.0.1", transport=httpx.ASGITransport(app=app)) as tc:
        a = await tc.create_instance("reference", tools=["view", "read"], roots=["/srv"])
        b = await tc.create_instance("other-model")
    await app.state.registry.aclose()
    second = Factory()
    app2 = create_app(data_dir=tmp_path, runner_factory=second)
    async with TetherClient("http://127.0.0.1", transport=httpx.ASGITransport(app=app2)) as tc:
        listed = await tc.list_instances()
        assert [(i["id"], i["model"], i["tools"], i["roots"]) for i in listed] == [
            (a["id"], "reference", ["view", "read"], ["/srv"]),
            (b["id"], "other-model", None, []),
        ]
        assert set(second.runners) == {a["id"], b["id"]}
        assert second.runners[a["id"]].config == first.runners[a["id"]].config
        sent = await tc.send(a["id"], "after restart")
        frames = await poll_until_done(tc, a["id"], sent["msg_id"])
        assert frames[-1]["payload"]["text"] == "echo: after restart"
    await app2.state.registry.aclose()


async def test_token_is_required_when_set(tmp_path: Path) -> None:
    app = create_app(data_dir=tmp_path, runner_factory=Factory(), token="s3cret")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
            resp = await http.get("/v1/instances", headers=headers)
            assert resp.status_code == 401
            assert resp.headers["www-authenticate"] == "Bearer"
            assert resp.json()["error"]["code"] == "unauthorized"
        resp = await http.post("/v1/instances/x/tether", content=b"{}")
        assert resp.status_code == 401
        assert (await http.get("/openapi.json")).status_code == 200
    async with TetherClient("http://127.0.0.1", "s3cret", transport=transport) as tc:
        assert await tc.list_instances() == []
    async with TetherClient("http://127.0.0.1", "nope", transport=transport) as tc:
        with pytest.raises(ConfigError, match="401"):
            await tc.list_instances()


async def test_openapi_declares_bearer_and_two_apps_share_the_routes(tmp_path: Path) -> None:
    # The routes live at module level: two apps over two folders keep their own registry.
    one = create_app(data_dir=tmp_path / "a", runner_factory=Factory(), token="t")
    two = create_app(data_dir=tmp_path / "b", runner_factory=Factory())
    spec = one.openapi()
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    assert spec["paths"]["/v1/instances"]["get"]["security"] == [{"HTTPBearer": []}]
    t1 = httpx.ASGITransport(app=one)
    t2 = httpx.ASGITransport(app=two)
    async with TetherClient("http://127.0.0.1", "t", transport=t1) as a:
        made = await a.create_instance("reference")
        async with TetherClient("http://127.0.0.1", transport=t2) as b:
            assert await b.list_instances() == []
            with pytest.raises(NotFoundError):
                await b.get_instance(made["id"])
        assert [i["id"] for i in await a.list_instances()] == [made["id"]]
    await one.state.registry.aclose()
    await two.state.registry.aclose()


def test_error_table_maps_each_kind() -> None:
    assert error_status(NotFoundError("x")).status == 404
    assert error_status(InUseError("x")).status == 409
    busy = error_status(BusyError("x"))
    assert (busy.status, busy.limit, busy.retry_after) == (429, "TETHER_MAX_PENDING_TURNS", "1")
    assert error_status(TetherLimitError("x", limit="L", field="f")).status == 413
    assert error_status(LimitError("x")).code == "too_large"
    assert error_status(FrameError("x", field="f")).status == 400
    assert error_status(ConfigError("x")).code == "invalid_input"


def test_serve_folder_follows_visus_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VISUS_DATA", str(tmp_path / "data"))
    assert serve_dir() == tmp_path / "data" / "serve"
    assert serve_dir(tmp_path / "x") == tmp_path / "x"


def test_refuses_non_loopback_without_token(tmp_path: Path) -> None:
    for host in ("0.0.0.0", "192.168.1.5", "::", "example.org"):
        with pytest.raises(ConfigError, match="without a token"):
            check_bind(host, None)
        with pytest.raises(ConfigError, match="without a token"):
            serve(host, 0, None, runner_factory=Factory(), data_dir=tmp_path, no_token=True)
    for host in ("127.0.0.1", "localhost", "::1", "[::1]", "127.0.0.2"):
        check_bind(host, None)
    check_bind("0.0.0.0", "a-token")


def _raw_http(port: int, head: bytes, body_chunks: list[bytes] = ()) -> bytes:  # type: ignore[assignment]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(head)
        for chunk in body_chunks:
            try:
                s.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break
        s.settimeout(10)
        data = b""
        while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
            part = s.recv(65536)
            if not part:
                break
            data += part
        return data


def test_413_from_content_length_before_the_body_is_read(tmp_path: Path) -> None:
    app = create_app(data_dir=tmp_path, runner_factory=Factory())
    with live_server(app) as url:
        port = int(url.rsplit(":", 1)[1])
        iid = httpx.post(f"{url}/v1/instances", json={"model": "m"}).json()["id"]
        size = limits.TETHER_MAX_WIRE_BYTES + 1
        head = (
            f"POST /v1/instances/{iid}/tether HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Type: application/json\r\nContent-Length: {size}\r\n\r\n"
        ).encode()
        # Not one byte of the body is sent: the answer can only come from the header.
        reply = _raw_http(port, head)
        assert reply.startswith(b"HTTP/1.1 413")
        body = json.loads(reply.split(b"\r\n\r\n", 1)[1])
        assert body["error"]["limit"] == "TETHER_MAX_WIRE_BYTES"
        # A chunked body carries no Content-Length: it is counted while read.
        head = (
            f"POST /v1/instances/{iid}/tether HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        ).encode()
        chunk = b"x" * MB
        chunks = [b"%x\r\n%s\r\n" % (len(chunk), chunk)] * 30 + [b"0\r\n\r\n"]
        reply = _raw_http(port, head, chunks)
        assert reply.startswith(b"HTTP/1.1 413")
        assert httpx.get(f"{url}/v1/instances/{iid}").json()["last_seq"] == 0


async def test_turns_in_flight_are_bounded(tmp_path: Path) -> None:
    gate = asyncio.Event()
    factory = Factory(gate=gate)
    app = create_app(data_dir=tmp_path, runner_factory=factory)
    async with TetherClient("http://127.0.0.1", transport=httpx.ASGITransport(app=app)) as tc:
        iid = (await tc.create_instance("reference"))["id"]
        cap = limits.TETHER_MAX_PENDING_TURNS
        for i in range(cap):  # separate sessions, so turns run side by side
            await tc.send(iid, f"m{i}", session=f"s{i}")
        assert (await tc.get_instance(iid))["pending"] == cap
        resp = await tc._http.post(
            f"/v1/instances/{iid}/tether", json={"type": "user.message", "payload": {"text": "x"}}
        )
        assert resp.status_code == 429
        assert resp.headers["retry-after"] == "1"
        assert resp.json()["error"]["limit"] == "TETHER_MAX_PENDING_TURNS"
        with pytest.raises(LimitError, match="TETHER_MAX_PENDING_TURNS"):
            await tc.send(iid, "one too many")
        assert (await tc.get_instance(iid))["last_seq"] == cap  # refused frames never landed
        gate.set()
        deadline = time.monotonic() + within(10)
        while time.monotonic() < deadline:
            if (await tc.get_instance(iid))["pending"] == 0:
                break
            await asyncio.sleep(0.01)
        assert (await tc.get_instance(iid))["pending"] == 0
        await tc.send(iid, "room again")
    await app.state.registry.aclose()


async def test_egress_images_past_a_bound_are_fitted(tmp_path: Path) -> None:
    buf = io.BytesIO()
    PILImage.new("RGB", (40, 30), (10, 200, 30)).save(buf, format="TIFF")
    tiff = buf.getvalue()
    buf = io.BytesIO()
    noise = PILImage.frombytes("RGB", (2000, 1900), os.urandom(2000 * 1900 * 3))
    noise.save(buf, format="PNG", compress_level=1)
    big = buf.getvalue()
    assert len(big) > limits.TETHER_MAX_IMAGE_BYTES
    factory = Factory(extra=(ImageIn("image/tiff", tiff), ImageIn("image/png", big)))
    app = create_app(data_dir=tmp_path, runner_factory=factory)
    async with TetherClient("http://127.0.0.1", transport=httpx.ASGITransport(app=app)) as tc:
        iid = (await tc.create_instance("reference"))["id"]
        sent = await tc.send(iid, "charts")
        frames = await poll_until_done(tc, iid, sent["msg_id"])
        assert [f["type"] for f in frames if f["type"] == "error"] == []
        images = decode_frame(frames[-1]).images
        assert len(images) == 2
        assert images[0].media_type in limits.TETHER_MEDIA_TYPES
        with PILImage.open(io.BytesIO(images[0].data)) as im:
            assert im.size == (40, 30)
            assert im.getpixel((0, 0))[:3] == (10, 200, 30)
        assert len(images[1].data) <= limits.TETHER_MAX_IMAGE_BYTES
        with PILImage.open(io.BytesIO(images[1].data)) as im:
            assert im.format in ("PNG", "JPEG", "WEBP", "GIF")
    await app.state.registry.aclose()


async def test_turns_of_one_session_run_in_order(tmp_path: Path) -> None:
    factory = Factory(delay=0.01)
    app = create_app(data_dir=tmp_path, runner_factory=factory)
    async with TetherClient("http://127.0.0.1", transport=httpx.ASGITransport(app=app)) as tc:
        iid = (await tc.create_instance("reference"))["id"]
        sent = [await tc.send(iid, f"{w} {w} {w}", session="s") for w in ("a", "b", "c")]
        other = await tc.send(iid, "z", session="t")
        seen: list[dict[str, Any]] = []
        after = 0
        while sum(f["type"] == "assistant.done" for f in seen) < 4:
            raw = await tc.poll_raw(iid, after, wait=5)
            seen += raw["frames"]
            after = raw["next_seq"]
        answers = [f for f in seen if f["type"] != "user.message" and f["session"] == "s"]
        replies = [f["reply_to"] for f in answers]
        # Each reply's deltas and done are contiguous, and the replies come in send order.
        order = [m for i, m in enumerate(replies) if i == 0 or replies[i - 1] != m]
        assert order == [s["msg_id"] for s in sent]
        # The frames of one answer share one msg_id of their own.
        ids = {r: {f["msg_id"] for f in answers if f["reply_to"] == r} for r in order}
        assert all(len(v) == 1 for v in ids.values())
        assert len(set.union(*ids.values())) == 3
        assert any(f.get("reply_to") == other["msg_id"] for f in seen)
        assert [c.text for c in factory.runners[iid].calls if c.session == "s"] == [
            "a a a",
            "b b b",
            "c c c",
        ]
        assert app.state.registry.get(iid)._locks == {}  # no lock outlives its session's turns
    await app.state.registry.aclose()


async def test_a_turn_can_be_stopped_when_the_instance_is_busy(tmp_path: Path) -> None:
    gate = asyncio.Event()
    app = create_app(data_dir=tmp_path, runner_factory=Factory(gate=gate))
    async with TetherClient("http://127.0.0.1", transport=httpx.ASGITransport(app=app)) as tc:
        iid = (await tc.create_instance("reference"))["id"]
        sent = [
            await tc._http.post(
                f"/v1/instances/{iid}/tether",
                json={"type": "user.message", "session": f"s{i}", "payload": {"text": "x"}},
            )
            for i in range(limits.TETHER_MAX_PENDING_TURNS)
        ]
        assert (await tc.get_instance(iid))["pending"] == limits.TETHER_MAX_PENDING_TURNS
        target = sent[0].json()["msg_id"]
        stop = await tc._http.post(
            f"/v1/instances/{iid}/tether",
            json={"type": "turn.cancel", "session": "s0", "payload": {"target": target}},
        )
        assert stop.status_code == 202, stop.text
        deadline = time.monotonic() + within(10)
        while time.monotonic() < deadline:
            if (await tc.get_instance(iid))["pending"] < limits.TETHER_MAX_PENDING_TURNS:
                break
            await asyncio.sleep(0.01)
        page = await tc.poll(iid, session="s0")
        assert [f.type for f in page.frames] == ["user.message", "turn.cancel", "error"]
        assert page.frames[-1].reply_to == target
        gate.set()
    await app.state.registry.aclose()


async def test_poll_answers_are_bounded_by_default(tmp_path: Path) -> None:
    app = create_app(data_dir=tmp_path, runner_factory=Factory())
    async with TetherClient("http://127.0.0.1", transport=httpx.ASGITransport(app=app)) as tc:
        iid = (await tc.create_instance("reference"))["id"]
        ring = app.state.registry.get(iid).ring
        data = b64(os.urandom(3 * limits.MB))
        for _ in range(8):  # ~32 MB of frames
            ring.append_nowait(Frame(AssistantDone("", (Image("image/png", data),)), "s", "m"))
        http = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
        )
        async with http:
            r = await http.get(f"/v1/instances/{iid}/tether/poll")
            assert r.status_code == 200
            assert len(r.content) <= limits.TETHER_POLL_DEFAULT_MAX_BYTES + 64 * 1024
            first = r.json()
            assert first["more"] is True
            assert 0 < len(first["frames"]) < 8
            r = await http.get(f"/v1/instances/{iid}/tether/poll", params={"max_bytes": 1})
            assert [f["seq"] for f in r.json()["frames"]] == [1]  # one frame, whatever the budget
            after, seqs = 0, []
            while True:
                page = (
                    await http.get(f"/v1/instances/{iid}/tether/poll", params={"after_seq": after})
                ).json()
                seqs += [f["seq"] for f in page["frames"]]
                after = page["next_seq"]
                if not page["more"]:
                    break
            assert seqs == list(range(1, 9))
    await app.state.registry.aclose()
