from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from visus.errors import InvalidInputError
from visus.record.codec import message_from_dict, message_to_dict
from visus.record.messages import (
    AssistantMessage,
    AttachmentOrigin,
    ChangedFrom,
    Crop,
    DocumentPart,
    ImagePart,
    Message,
    PerceptionOrigin,
    ProviderState,
    TextPart,
    ToolCall,
    ToolResult,
    Usage,
    UserMessage,
)

D1 = "a" * 64
D2 = "0123456789abcdef" * 4

MESSAGES: list[Message] = [
    UserMessage(parts=(TextPart('hello ✓ \n"quoted"'),), turn=1),
    UserMessage(
        parts=(
            TextPart("what is this?"),
            ImagePart(D1, "image/png", 12345, 640, 480, AttachmentOrigin("shot.png")),
            ImagePart(D2, "image/jpeg", 99, 1, 1, AttachmentOrigin()),
        ),
        turn=7,
        request_id="12:m-1",
    ),
    AssistantMessage(),
    AssistantMessage(
        parts=(TextPart("Let me look."),),
        tool_calls=(
            ToolCall("call_1", "view", {"path": "a.png", "page": 2, "nested": {"x": [1, 2.5]}}),
            ToolCall("call_2", "read"),
            ToolCall("call_3", "view", {"path": "b.png"}, signature="c2lnbmF0dXJl"),
        ),
        turn=3,
        model="claude-sonnet-4-6",
        usage=Usage(
            1200, 34, 0.0041, cache_read_tokens=900, cache_write_tokens=200, reasoning_dropped=1
        ),
        stop_reason="tool_use",
        provider_state=ProviderState("openai-responses", '[{"type":"reasoning","id":"rs_1"}]'),
    ),
    ToolResult(
        call_id="call_1",
        tool_name="view",
        parts=(
            TextPart("Viewed a.png (640x480)"),
            ImagePart(D1, "image/png", 12345, 640, 480, PerceptionOrigin("a.png")),
            ImagePart(D2, "image/png", 5, 10, 20, PerceptionOrigin("r.pdf", tool="view", page=3)),
            ImagePart(
                D2, "image/png", 5, 800, 450, PerceptionOrigin("4k.png", region=(0, 0, 800, 450))
            ),
            ImagePart(
                D2, "image/png", 5, 10, 20, PerceptionOrigin("x.png", tool="view_attachment")
            ),
            ImagePart(
                D2,
                "image/png",
                5,
                640,
                480,
                PerceptionOrigin("a.png"),
                changed_from=ChangedFrom(D1, (Crop("b" * 64, "image/png", 77, (8, 16, 120, 40)),)),
            ),
        ),
        turn=3,
    ),
    ToolResult(call_id="c", tool_name="edit", parts=(TextPart("boom"),), is_error=True, turn=4),
    ToolResult(
        call_id="d",
        tool_name="view",
        parts=(TextPart('[image elided: call view("sha256:ab")]', note=True),),
        turn=4,
    ),
    UserMessage(
        parts=(
            TextPart("summarise this"),
            DocumentPart(D1, "application/pdf", 48213, 12, AttachmentOrigin("report.pdf")),
            DocumentPart(D2, "application/pdf", 900, 1, PerceptionOrigin("docs/a.pdf")),
        ),
        turn=5,
    ),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: m.kind)
def test_roundtrip_through_json(message: Message) -> None:
    d = message_to_dict(message)
    assert d["v"] == 1
    assert d["kind"] == message.kind
    text = json.dumps(d, allow_nan=False)
    assert message_from_dict(json.loads(text)) == message


def _all_keys(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _all_keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in _all_keys(v)}
    return set()


def test_every_dataclass_field_is_written() -> None:
    # A field someone adds to a message or part must reach the record.
    keys = set().union(*(_all_keys(message_to_dict(m)) for m in MESSAGES))
    for cls in (
        UserMessage,
        AssistantMessage,
        ToolResult,
        TextPart,
        ImagePart,
        DocumentPart,
        ToolCall,
        Usage,
    ):
        for f in dataclasses.fields(cls):
            assert f.name in keys, (cls.__name__, f.name)
    for cls2 in (PerceptionOrigin, AttachmentOrigin, ChangedFrom, Crop):
        for f in dataclasses.fields(cls2):
            assert f.name in keys, (cls2.__name__, f.name)


def test_a_note_survives_the_record_and_plain_text_writes_no_note_key() -> None:
    # TextPart.note does not take part in equality, so round trips above cannot see it.
    note = ToolResult("c", "view", (TextPart("[image elided]", note=True), TextPart("x")))
    d = message_to_dict(note)
    assert [sorted(p) for p in d["parts"]] == [["kind", "note", "text"], ["kind", "text"]]
    back = message_from_dict(d)
    assert isinstance(back, ToolResult)
    assert [p.note for p in back.parts if isinstance(p, TextPart)] == [True, False]
    with pytest.raises(InvalidInputError, match="note"):
        message_from_dict({**d, "parts": [{"kind": "text", "text": "x", "note": "yes"}]})


def test_a_user_message_without_request_id_writes_no_key() -> None:
    # Records written before request ids existed (and unnamed turns) stay unchanged.
    d = message_to_dict(UserMessage(parts=(TextPart("hi"),)))
    assert "request_id" not in d
    back = message_from_dict({**d, "request_id": "3:m"})
    assert isinstance(back, UserMessage)
    assert back.request_id == "3:m"
    with pytest.raises(InvalidInputError, match="request_id"):
        message_from_dict({**d, "request_id": 3})


def test_tool_call_without_signature_writes_no_signature_key() -> None:
    # Records written before signatures existed (and calls without one) stay unchanged.
    d = message_to_dict(AssistantMessage(tool_calls=(ToolCall("c1", "view", {}),)))
    assert d["tool_calls"] == [{"id": "c1", "name": "view", "arguments": {}}]
    back = message_from_dict(d)
    assert isinstance(back, AssistantMessage)
    assert back.tool_calls[0].signature is None


def test_stop_reason_and_provider_state_round_trip_and_are_checked() -> None:
    plain = message_to_dict(AssistantMessage())
    assert "stop_reason" not in plain  # older records stay as they were
    assert "provider_state" not in plain
    with pytest.raises(InvalidInputError, match="stop_reason"):
        message_from_dict({**plain, "stop_reason": "bored"})
    with pytest.raises(InvalidInputError, match="provider_state"):
        message_from_dict({**plain, "provider_state": {"wire": 1, "items": "[]"}})
    d = {**plain, "stop_reason": "max_tokens"}
    back = message_from_dict(d)
    assert isinstance(back, AssistantMessage)
    assert back.truncated


def test_document_part_record_holds_no_bytes() -> None:
    doc = DocumentPart(D1, "application/pdf", 30 * 1024 * 1024, 600, AttachmentOrigin("big.pdf"))
    text = json.dumps(message_to_dict(UserMessage(parts=(doc,))), separators=(",", ":"))
    assert len(text) < 300


@pytest.mark.parametrize(
    ("part", "field"),
    [
        ({"digest": "nothex", "page_count": 1}, "digest"),
        ({"digest": "a" * 64, "page_count": -1}, "page_count"),
        ({"digest": "a" * 64}, "page_count"),
    ],
)
def test_bad_document_part_names_the_field(part: dict[str, Any], field: str) -> None:
    record = {
        "v": 1,
        "kind": "user",
        "parts": [
            {
                "kind": "document",
                "media_type": "application/pdf",
                "size": 10,
                "origin": {"kind": "attachment", "filename": "a.pdf"},
                **part,
            }
        ],
    }
    with pytest.raises(InvalidInputError, match=field):
        message_from_dict(record)


def test_bad_signature_is_refused() -> None:
    record = {
        "v": 1,
        "kind": "assistant",
        "parts": [],
        "tool_calls": [{"id": "c", "name": "view", "arguments": {}, "signature": 5}],
    }
    with pytest.raises(InvalidInputError, match="signature"):
        message_from_dict(record)


def test_no_image_bytes_in_record() -> None:
    big = ImagePart(D1, "image/png", 10 * 1024 * 1024, 4000, 3000, PerceptionOrigin("big.png"))
    small = ImagePart(D2, "image/png", 10 * 1024, 40, 30, PerceptionOrigin("big.png"))
    a = json.dumps(message_to_dict(UserMessage(parts=(big,))), separators=(",", ":"))
    b = json.dumps(message_to_dict(UserMessage(parts=(small,))), separators=(",", ":"))
    assert abs(len(a) - len(b)) < 10
    assert len(a) < 300


@pytest.mark.parametrize(
    ("record", "field"),
    [
        ({"kind": "user", "parts": []}, "v"),
        ({"v": 2, "kind": "user", "parts": []}, "version"),
        ({"v": 1, "kind": "robot", "parts": []}, "kind"),
        ({"v": 1, "kind": "user", "parts": "nope"}, "parts"),
        ({"v": 1, "kind": "user", "parts": [{"kind": "video"}]}, "kind"),
        ({"v": 1, "kind": "user", "parts": [{"kind": "text"}]}, "text"),
        ({"v": 1, "kind": "user", "turn": "1", "parts": []}, "turn"),
        ({"v": 1, "kind": "user", "turn": True, "parts": []}, "turn"),
        (
            {
                "v": 1,
                "kind": "user",
                "parts": [
                    {
                        "kind": "image",
                        "digest": "../../etc/passwd",
                        "media_type": "image/png",
                        "size": 1,
                        "width": 1,
                        "height": 1,
                        "origin": {"kind": "attachment", "filename": None},
                    }
                ],
            },
            "digest",
        ),
        (
            {
                "v": 1,
                "kind": "user",
                "parts": [
                    {
                        "kind": "image",
                        "digest": D1,
                        "media_type": "image/png",
                        "size": -1,
                        "width": 1,
                        "height": 1,
                        "origin": {"kind": "attachment"},
                    }
                ],
            },
            "size",
        ),
        ({"v": 1, "kind": "tool", "parts": []}, "call_id"),
        ({"v": 1, "kind": "tool", "call_id": "c", "tool_name": "t", "is_error": "yes"}, "is_error"),
        ({"v": 1, "kind": "assistant", "tool_calls": [{"id": "c"}]}, "name"),
        ({"v": 1, "kind": "assistant", "usage": {"input_tokens": -5}}, "input_tokens"),
        ({"v": 1, "kind": "assistant", "model": ["x"]}, "model"),
        ([1, 2, 3], "object"),
    ],
)
def test_malformed_records_raise_naming_the_field(record: Any, field: str) -> None:
    with pytest.raises(InvalidInputError, match=field):
        message_from_dict(record)


def test_assistant_image_part_refused() -> None:
    record = message_to_dict(MESSAGES[1])
    record["kind"] = "assistant"
    with pytest.raises(InvalidInputError, match="text parts only"):
        message_from_dict(record)


def test_an_origin_without_a_region_writes_no_region_key() -> None:
    # Records written before zoom existed read the same, and read back the same.
    plain = UserMessage((ImagePart(D1, "image/png", 5, 4, 3, PerceptionOrigin("a.png")),), turn=1)
    d = message_to_dict(plain)
    assert "region" not in d["parts"][0]["origin"]
    assert message_from_dict(d) == plain


def test_a_bad_region_in_a_record_is_named() -> None:
    zoomed = UserMessage(
        (ImagePart(D1, "image/png", 5, 4, 3, PerceptionOrigin("a.png", region=(0, 0, 4, 3))),),
        turn=1,
    )
    d = message_to_dict(zoomed)
    d["parts"][0]["origin"]["region"] = [0, 0, "4", 3]
    with pytest.raises(InvalidInputError, match="region"):
        message_from_dict(d)


def test_an_image_without_crops_writes_no_key_and_bad_crops_are_refused() -> None:
    plain = ToolResult("c", "view", (ImagePart(D1, "image/png", 1, 4, 4, PerceptionOrigin("a")),))
    assert "changed_from" not in message_to_dict(plain)["parts"][0]
    cut = ImagePart(
        D1,
        "image/png",
        1,
        4,
        4,
        PerceptionOrigin("a"),
        changed_from=ChangedFrom(D2, (Crop("b" * 64, "image/png", 9, (0, 0, 2, 2)),)),
    )
    d = message_to_dict(ToolResult("c", "view", (cut,)))
    # A crop's blob is named by a "digest" key: collecting blobs keeps it with its record.
    assert '"digest": "' + "b" * 64 + '"' in json.dumps(d)
    changed = d["parts"][0]["changed_from"]
    for bad, field in (
        ({**changed, "base": "nope"}, "base"),
        ({**changed, "crops": []}, "crops"),
        ({**changed, "crops": [{**changed["crops"][0], "region": [5, 0, 2, 2]}]}, "region"),
        ({**changed, "crops": [{**changed["crops"][0], "digest": "x"}]}, "digest"),
    ):
        part = {**d["parts"][0], "changed_from": bad}
        with pytest.raises(InvalidInputError, match=field):
            message_from_dict({**d, "parts": [part]})
