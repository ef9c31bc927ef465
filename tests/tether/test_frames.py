from __future__ import annotations

import base64
import json

import pytest

from visus import limits
from visus.errors import InvalidInputError, LimitError
from visus.tether.frames import (
    AssistantDelta,
    AssistantDone,
    Frame,
    Image,
    UserMessagePayload,
    decode_frame,
    encode_frame,
    encode_outgoing,
    encode_payload,
    frame_size,
    frame_to_dict,
    payload_size,
)
from visus.tether.limits import FrameError, TetherLimitError, check_images
from visus.tether.runner import ImageIn

from .doubles import png

MB = limits.MB


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def msg(payload: dict[str, object], **kw: object) -> dict[str, object]:
    return {
        "v": 1,
        "type": "user.message",
        "session": "s1",
        "msg_id": "m1",
        "payload": payload,
        **kw,
    }


def test_text_only_frame_is_byte_identical_to_the_old_format() -> None:
    old = {
        "v": 1,
        "type": "user.message",
        "ts": "2026-01-01T00:00:00.000Z",
        "session": "s",
        "seq": 7,
        "msg_id": "m",
        "payload": {"text": "Hello", "user": {"id": "123"}},
    }
    old_bytes = json.dumps(old, separators=(",", ":")).encode()
    decoded = decode_frame(json.loads(old_bytes))
    assert decoded.images == ()
    assert encode_frame(decoded.frame) == old_bytes
    assert b"images" not in encode_frame(decoded.frame)
    done = Frame(AssistantDone("ok"), "s", "r", 3, "t")
    assert encode_frame(done) == (
        b'{"v":1,"type":"assistant.done","ts":"t","session":"s","seq":3,"msg_id":"r",'
        b'"payload":{"text":"ok"}}'
    )


def test_images_round_trip_and_padding_is_optional() -> None:
    data = png((255, 0, 0))
    unpadded = b64(data).rstrip("=")
    assert len(unpadded) % 4 != 0  # the test needs a string that really lacks padding
    d = decode_frame(
        msg({"text": "", "images": [{"media_type": "image/png", "data": unpadded}]}), assign=True
    )
    assert d.images == (ImageIn("image/png", data),)
    payload = d.frame.payload
    assert isinstance(payload, UserMessagePayload)
    assert payload.text == ""
    assert payload.images == (Image("image/png", unpadded),)


def test_ref_is_ignored_and_never_emitted() -> None:
    data = png((0, 0, 255))
    d = decode_frame(
        msg(
            {
                "text": "x",
                "images": [
                    {"media_type": "image/png", "data": b64(data), "ref": "sha256:abc", "size": 3}
                ],
            }
        ),
        assign=True,
    )
    assert d.images[0].data == data
    assert b"ref" not in encode_frame(d.frame)


@pytest.mark.parametrize(
    ("image", "field", "needle"),
    [
        (
            {"media_type": "image/png", "data": "data:image/png;base64,AAAA"},
            "payload.images[0].data",
            "data-URI",
        ),
        ({"media_type": "image/tiff", "data": "AAAA"}, "payload.images[0].media_type", "tiff"),
        ({"media_type": "image/png", "data": "AA_-"}, "payload.images[0].data", "base64"),
        ({"media_type": "image/png", "data": "A"}, "payload.images[0].data", "base64"),
        ({"media_type": "image/png", "data": "AA AA"}, "payload.images[0].data", "base64"),
        ({"media_type": "image/png"}, "payload.images[0].data", "required"),
        ({"data": "AAAA"}, "payload.images[0].media_type", "string"),
    ],
)
def test_bad_images_name_the_field(image: dict[str, str], field: str, needle: str) -> None:
    with pytest.raises(FrameError) as e:
        decode_frame(msg({"text": "x", "images": [image]}), assign=True)
    assert e.value.field == field
    assert field in str(e.value)
    assert needle in str(e.value)
    assert isinstance(e.value, InvalidInputError)


@pytest.mark.parametrize(
    ("frame", "field"),
    [
        ({"type": "user.message", "payload": {}}, "payload.text"),
        ({"type": "user.message", "payload": {"text": 3}}, "payload.text"),
        ({"type": "user.message"}, "payload"),
        ({"type": "assistant.done", "payload": {"text": ""}}, "type"),
        ({"v": 2, "type": "user.message", "payload": {"text": ""}}, "v"),
        ({"type": "user.message", "session": "../x", "payload": {"text": ""}}, "session"),
        ({"type": "user.message", "payload": {"text": "", "images": {}}}, "payload.images"),
        ({"type": "user.message", "payload": {"text": "", "user": 5}}, "payload.user"),
    ],
)
def test_bad_frames_name_the_field(frame: dict[str, object], field: str) -> None:
    with pytest.raises(FrameError) as e:
        decode_frame(frame, types=frozenset({"user.message"}), assign=True)
    assert e.value.field == field


def test_a_missing_type_says_it_is_required() -> None:
    # Not "must be a string": the sender left it out, so say what to put there.
    with pytest.raises(FrameError) as e:
        decode_frame({"payload": {"text": "hi"}}, types=frozenset({"user.message"}), assign=True)
    assert e.value.field == "type"
    assert str(e.value) == "type: required, one of user.message"


def test_delta_never_carries_images() -> None:
    f = {
        "type": "assistant.delta",
        "ts": "t",
        "seq": 1,
        "msg_id": "m",
        "payload": {"text": "a", "images": []},
    }
    with pytest.raises(FrameError, match="never carries images"):
        decode_frame(f)
    assert encode_frame(Frame(AssistantDelta("a"), msg_id="m", seq=1, ts="t")).endswith(
        b'"payload":{"text":"a"}}'
    )


def test_consumer_limits_15mb_image() -> None:
    big = b64(b"\0" * (15 * MB))
    with pytest.raises(TetherLimitError) as e:
        decode_frame(
            msg({"text": "", "images": [{"media_type": "image/png", "data": big}]}), assign=True
        )
    assert e.value.limit == "TETHER_MAX_IMAGE_BYTES"
    assert "15.0 MB" in str(e.value)
    assert "10.0 MB" in str(e.value)


def test_consumer_limits_frame_total_and_count() -> None:
    eight = {"media_type": "image/jpeg", "data": b64(b"\0" * (8 * MB))}
    with pytest.raises(TetherLimitError) as e:
        decode_frame(msg({"text": "", "images": [eight] * 4}), assign=True)
    assert e.value.limit == "TETHER_MAX_FRAME_IMAGE_BYTES"
    small = {"media_type": "image/png", "data": b64(png((1, 2, 3)))}
    with pytest.raises(TetherLimitError) as e:
        decode_frame(msg({"text": "", "images": [small] * 5}), assign=True)
    assert e.value.limit == "TETHER_MAX_IMAGES_PER_MESSAGE"
    assert len(decode_frame(msg({"text": "", "images": [small] * 4}), assign=True).images) == 4


def test_producer_checks() -> None:
    with pytest.raises(LimitError, match="TETHER_MAX_IMAGE_BYTES"):
        check_images([ImageIn("image/png", b"\0" * (15 * MB))])
    with pytest.raises(LimitError, match="TETHER_MAX_FRAME_IMAGE_BYTES"):
        check_images([ImageIn("image/png", b"\0" * (8 * MB))] * 4)
    with pytest.raises(LimitError, match="TETHER_MAX_IMAGES_PER_MESSAGE"):
        check_images([ImageIn("image/png", b"x")] * 5)
    with pytest.raises(FrameError, match="media_type"):
        check_images([ImageIn("image/svg+xml", b"<svg/>")])
    check_images([ImageIn("image/png", b"\0" * (10 * MB))] * 2)  # exactly at the bounds


@pytest.mark.parametrize(
    "payload",
    [
        UserMessagePayload('hé "q" \u2603', (Image("image/png", b64(b"abc")),), {"n": "Zoë"}),
        UserMessagePayload("", (Image("image/png", "AAAA"), Image("image/gif", "AA"))),
        AssistantDone("done", (Image("image/webp", b64(png((3, 4, 5)))),)),
        AssistantDelta("no images"),
    ],
)
def test_fast_encoding_equals_the_json_encoder(payload: object) -> None:
    frame = Frame(payload, "s", "m", 4, "t")  # type: ignore[arg-type]
    expected = json.dumps(frame_to_dict(frame), separators=(",", ":"), ensure_ascii=False)
    assert encode_frame(frame) == expected.encode()
    assert json.loads(encode_frame(frame)) == frame_to_dict(frame)
    assert frame_size(frame) == len(encode_frame(frame))
    assert payload_size(frame.payload) == len(encode_payload(frame.payload))


@pytest.mark.parametrize("data", ['a"b\\c', "AAAA\n", "AA=A", "é", "A"])
def test_an_image_value_holds_only_base64(data: str) -> None:
    # Encoders splice image data unescaped: a value that would need escaping never exists.
    with pytest.raises(ValueError, match="base64"):
        Image("image/png", data)


def test_outgoing_frames_leave_seq_and_ts_to_the_server() -> None:
    frame = Frame(UserMessagePayload("hi", (Image("image/png", "AAAA"),), {"id": 1}), "s", "m")
    out = json.loads(encode_outgoing(frame))
    assert out == {
        "v": 1,
        "type": "user.message",
        "session": "s",
        "msg_id": "m",
        "payload": {
            "text": "hi",
            "images": [{"media_type": "image/png", "data": "AAAA"}],
            "user": {"id": 1},
        },
    }
    assert decode_frame(out, assign=True).frame.payload == frame.payload


def _count_checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per base64 scan of Image.__post_init__ from now on."""
    from visus.tether import frames

    calls: list[int] = []
    real = frames._is_b64

    def spy(raw: bytes) -> bool:
        calls.append(len(raw))
        return real(raw)

    monkeypatch.setattr(frames, "_is_b64", spy)
    return calls


def test_trusted_paths_do_not_rescan_base64(monkeypatch: pytest.MonkeyPatch) -> None:
    from visus.tether.frames import image_from_bytes

    calls = _count_checks(monkeypatch)
    raw = png((1, 2, 3))
    # Ingress: the decoder checks each image's base64 once (base64_size), not twice.
    image = {"media_type": "image/png", "data": b64(raw)}
    d = decode_frame(msg({"text": "", "images": [image]}), assign=True)
    built = image_from_bytes(ImageIn("image/png", raw))
    assert calls == []
    assert d.frame.payload.images == (built,)  # type: ignore[union-attr]
    assert d.images == (ImageIn("image/png", raw),)
    # Anyone else building an Image is still checked.
    Image("image/png", b64(raw))
    assert len(calls) == 1


@pytest.mark.parametrize(
    "data", ['a"b\\c', "AAAA\n", "AA=A", "é", "A", "data:image/png;base64,AAAA"]
)
def test_untrusted_base64_is_still_refused_at_ingress(data: str) -> None:
    frame = msg({"text": "", "images": [{"media_type": "image/png", "data": data}]})
    with pytest.raises(FrameError, match=r"base64|data-URI"):
        decode_frame(frame, assign=True)


def test_assistant_done_carries_the_turns_usage() -> None:
    usage = {
        "input_tokens": 1200,
        "output_tokens": 30,
        "cache_read_tokens": 1000,
        "cache_write_tokens": 150,
        "cost_usd": 0.0012,
    }
    frame = Frame(AssistantDone("ok", usage=usage), "s", "m-1", seq=3, ts="t")
    wire = frame_to_dict(frame)
    assert wire["payload"]["usage"] == usage
    decoded = decode_frame(json.loads(json.dumps(wire))).frame.payload
    assert isinstance(decoded, AssistantDone)
    assert decoded.usage == usage
    wire["payload"]["usage"] = {"input_tokens": "many"}
    with pytest.raises(FrameError, match=r"payload\.usage\.input_tokens"):
        decode_frame(wire)


def test_a_status_frame_names_the_phase_and_the_call_that_starts() -> None:
    from visus.tether.frames import AssistantStatus, Frame, decode_frame, frame_to_dict

    tool = {"id": "c1", "name": "view", "arguments": {"path": "report.pdf", "page": 4}}
    frame = Frame(AssistantStatus("viewing report.pdf page 4", tool), "s", "m1", reply_to="u1")
    wire = frame_to_dict(frame)
    assert wire["type"] == "assistant.status"
    assert wire["payload"] == {"text": "viewing report.pdf page 4", "tool": tool}
    back = decode_frame(json.loads(json.dumps(wire))).frame
    assert back.payload == AssistantStatus("viewing report.pdf page 4", tool)
    plain = decode_frame({**wire, "payload": {"text": "waiting for gpt-4.1"}}).frame
    assert plain.payload == AssistantStatus("waiting for gpt-4.1")
    with pytest.raises(FrameError, match=r"payload\.images"):
        decode_frame({**wire, "payload": {"text": "x", "images": []}})
    with pytest.raises(FrameError, match=r"assistant\.status"):
        decode_frame({**wire, "type": "assistant.status"}, types=frozenset({"user.message"}))
