"""Property tests: the decoder never fails but with a typed error; the ring keeps its
invariants under any sequence of appends and reads."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from visus.tether.frames import (
    AssistantDelta,
    Frame,
    decode_frame,
    encode_around_seq,
    encode_frame,
    encode_payload,
)
from visus.tether.limits import FrameError, TetherLimitError
from visus.tether.ring import Ring

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
image = st.fixed_dictionaries(
    {
        "media_type": st.sampled_from(["image/png", "image/jpeg", "image/tiff", 3]),
        "data": st.one_of(
            st.binary(min_size=1, max_size=40).map(lambda b: base64.b64encode(b).decode()),
            st.binary(min_size=1, max_size=40).map(
                lambda b: base64.b64encode(b).decode().rstrip("=")
            ),
            st.text(max_size=12),
        ),
    },
    optional={"ref": st.text(max_size=8)},
)
frames = st.fixed_dictionaries(
    {
        "type": st.sampled_from(["user.message", "assistant.done", "assistant.delta", "x"]),
        "payload": st.fixed_dictionaries(
            {},
            optional={
                "text": st.text() | st.integers(),
                "images": st.lists(image, max_size=6) | json_values,
                "user": st.none() | st.dictionaries(st.text(max_size=5), st.text(max_size=5)),
            },
        )
        | json_values,
    },
    optional={
        "v": st.sampled_from([1, 2, True, "1"]),
        "session": st.text(max_size=10),
        "msg_id": st.text(max_size=10),
        "ts": st.text(max_size=5) | st.integers(),
    },
)

good_image = st.builds(
    lambda mt, b, pad: {"media_type": mt, "data": base64.b64encode(b).decode().rstrip(pad)},
    st.sampled_from(["image/png", "image/jpeg", "image/gif", "image/webp"]),
    st.binary(min_size=1, max_size=40),
    st.sampled_from(["", "="]),
)
good_frames = st.fixed_dictionaries(
    {
        "type": st.sampled_from(["user.message", "assistant.done"]),
        "payload": st.fixed_dictionaries(
            {"text": st.text()},
            optional={
                "images": st.lists(good_image, max_size=5),
                "user": st.none() | st.dictionaries(st.text(max_size=5), st.text(max_size=5)),
            },
        ),
    },
    optional={"session": st.from_regex(r"[a-z0-9][a-z0-9._-]{0,9}", fullmatch=True)},
)


@settings(max_examples=300, deadline=None)
@given(good_frames | frames | json_values)
def test_decoder_fails_only_with_typed_errors_and_round_trips(value: Any) -> None:
    refused: FrameError | TetherLimitError | None = None
    try:
        decoded = decode_frame(value, assign=True)
    except (FrameError, TetherLimitError) as e:
        refused = e
    event("refused" if refused else "accepted")
    if refused is not None:
        assert refused.field  # every refusal names its field
        return
    event(f"accepted with {len(decoded.images)} images")
    # What was accepted re-encodes to JSON that decodes to the same frame.
    again = decode_frame(json.loads(encode_frame(decoded.frame)))
    assert again.frame == decoded.frame
    assert again.images == decoded.images
    payload = value["payload"]
    if not payload.get("images"):
        assert b'"images"' not in encode_payload(decoded.frame.payload)


@settings(max_examples=200, deadline=None)
@given(good_frames, st.integers(1, 10**12), st.sampled_from(["", "m-42"]))
def test_a_body_cut_around_its_seq_is_the_frame_with_any_seq(
    value: Any, seq: int, reply_to: str
) -> None:
    """What PostgreSQL writes (head, its own seq, tail) is the one encoding."""
    value["payload"]["images"] = value["payload"].get("images", [])[:4]
    frame = dataclasses.replace(
        decode_frame(value, assign=True).frame, ts="2026-01-01T00:00:00.000Z", reply_to=reply_to
    )
    head, tail = encode_around_seq(frame)
    assert head + str(seq).encode() + tail == encode_frame(dataclasses.replace(frame, seq=seq))


ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 3000), st.sampled_from(["a", "b"])),
        st.tuples(st.just("read"), st.integers(0, 60), st.sampled_from([None, "a", "b"])),
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(ops, st.integers(1, 8), st.integers(1, 6000))
def test_ring_invariants(
    steps: list[tuple[str, int, Any]], max_frames: int, max_bytes: int
) -> None:
    ring = Ring(max_frames=max_frames, max_bytes=max_bytes)
    appended: list[Frame] = []
    for op, n, session in steps:
        if op == "append":
            f = asyncio.run(ring.append(Frame(AssistantDelta("x" * n), session, "m")))
            appended.append(f)
            held = ring.read(0).frames
            assert [h.seq for h in held] == list(range(held[0].seq, f.seq + 1))  # contiguous
            assert held[-1] == f  # the newest always stays
            assert len(held) <= max_frames
            assert ring.bytes == sum(len(encode_payload(h.payload)) for h in held)
            assert ring.bytes <= max_bytes or len(held) == 1
        else:
            page = ring.read(n, session=session)
            missed = [a for a in appended if a.seq > n and a.seq < ring.first_seq]
            assert page.gap == (bool(missed) or n > ring.last_seq)
            for f in page.frames:
                assert session is None or f.session == session
            if n <= ring.last_seq:
                expect = [
                    a.seq
                    for a in appended
                    if a.seq > n
                    and a.seq >= ring.first_seq
                    and (session is None or a.session == session)
                ]
                assert [f.seq for f in page.frames] == expect
