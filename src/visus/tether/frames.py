"""Tether frames: values, the one JSON encoding, and the checked decoder.

A frame is ``{v: 1, type, ts, session, seq, msg_id, reply_to?, payload}``. The
frames a server writes in answer to a ``user.message`` (deltas, done, errors) share
one ``msg_id`` of their own and name the request's ``msg_id`` in ``reply_to``; other
frames have no ``reply_to`` key. Payloads:

- ``user.message``   ``{text, images?, user?}`` (text required, ``""`` for image-only)
- ``assistant.delta`` ``{text}`` (never images)
- ``assistant.done``  ``{text, images?, stop_reason?, usage?}`` (``stop_reason`` as the model
  gave it: ``max_tokens`` means the answer was cut off at the output limit; ``usage`` the
  turn's ``input_tokens``, ``output_tokens``, ``cache_read_tokens``,
  ``cache_write_tokens`` and ``cost_usd``)
- ``error``          ``{code, message}`` (the server's own notes: a failed turn, a
  refused egress image, ``cancelled`` when a turn was stopped)
- ``turn.cancel``    ``{target}``: stop the turn answering the ``user.message`` whose
  ``msg_id`` is ``target``; the agent stops at its next await and the turn ends with
  an ``error`` frame of code ``cancelled`` (``reply_to`` = ``target``)

An image is ``{media_type, data}``: png, jpeg, gif or webp; standard base64,
padding optional, no data-URI prefix. ``ref`` is reserved: the decoder ignores it
and the encoder never writes it. A payload without images has no ``images`` key,
so text-only frames keep their old bytes exactly.

Example:
    >>> f = Frame(payload=UserMessagePayload(text="hi"), session="s", msg_id="m", seq=1, ts="t")
    >>> encode_frame(f)
    b'{"v":1,"type":"user.message","ts":"t","session":"s","seq":1,"msg_id":"m","payload":{"text":"hi"}}'
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Literal, TypeAlias

from visus import limits
from visus.tether.limits import (
    FrameError,
    check_image,
    check_image_count,
    check_media_type,
    check_total,
)
from visus.tether.runner import ImageIn

__all__ = [
    "FRAME_TYPES",
    "INGRESS_TYPES",
    "AssistantDelta",
    "AssistantDone",
    "AssistantStatus",
    "CancelPayload",
    "Decoded",
    "ErrorPayload",
    "Frame",
    "FrameType",
    "Image",
    "Payload",
    "UserMessagePayload",
    "base64_size",
    "decode_base64",
    "decode_frame",
    "decode_frames",
    "encode_around_seq",
    "encode_frame",
    "encode_outgoing",
    "encode_payload",
    "frame_pieces",
    "frame_size",
    "frame_to_dict",
    "image_from_bytes",
    "new_msg_id",
    "now_ts",
    "padded",
    "payload_size",
    "payload_to_dict",
]

FrameType: TypeAlias = Literal[
    "user.message",
    "assistant.delta",
    "assistant.status",
    "assistant.done",
    "error",
    "turn.cancel",
]
FRAME_TYPES: Final[frozenset[str]] = frozenset(
    {
        "user.message",
        "assistant.delta",
        "assistant.status",
        "assistant.done",
        "error",
        "turn.cancel",
    }
)
#: What a producer may POST: a message, or the stop of one.
INGRESS_TYPES: Final[frozenset[str]] = frozenset({"user.message", "turn.cancel"})
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]*")
_B64_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def _b64_length(raw: bytes) -> int:
    """Length without padding if ``raw`` is standard base64 (padding optional), else -1.

    ``bytes.translate`` and ``find`` scan megabytes in about a millisecond, where a
    regex or ``b64decode(validate=True)`` takes tens.
    """
    pad = 2 if raw.endswith(b"==") else 1 if raw.endswith(b"=") else 0
    n = len(raw) - pad
    if (
        n % 4 == 1
        or (pad and len(raw) % 4)
        or raw.find(b"=", 0, n) != -1
        or raw.translate(None, _B64_ALPHABET + b"=")
    ):
        return -1
    return n


def _is_b64(raw: bytes) -> bool:
    return _b64_length(raw) >= 0


@dataclass(frozen=True, slots=True)
class Image:
    """An image as it rides in a frame: ``data`` is base64 text, kept as received."""

    media_type: str
    data: str

    def __post_init__(self) -> None:
        # Checked once here so encoders can splice ``data`` without escaping it.
        if not isinstance(self.data, str) or not self.data.isascii():
            raise ValueError("Image.data must be base64 text")
        if not _is_b64(self.data.encode("ascii")):
            raise ValueError("Image.data is not standard base64 (RFC 4648)")

    def __repr__(self) -> str:
        return f"Image(media_type={self.media_type!r}, data=<{len(self.data)} b64 chars>)"


def _checked_image(media_type: str, data: str) -> Image:
    """An :class:`Image` whose ``data`` this module has just produced or checked.

    Skips ``__post_init__``: re-scanning megabytes of base64 that ``b64encode`` just
    wrote, or that :func:`base64_size` just checked with the same rules, cost 13% of
    tether ingress. Callers outside this module always get the checked constructor.
    """
    image = object.__new__(Image)
    object.__setattr__(image, "media_type", media_type)
    object.__setattr__(image, "data", data)
    return image


@dataclass(frozen=True, slots=True)
class UserMessagePayload:
    text: str
    images: tuple[Image, ...] = ()
    user: Mapping[str, Any] | None = None
    kind: Literal["user.message"] = "user.message"


@dataclass(frozen=True, slots=True)
class AssistantDelta:
    text: str
    kind: Literal["assistant.delta"] = "assistant.delta"


@dataclass(frozen=True, slots=True)
class AssistantStatus:
    """What the agent does now, in words (``viewing report.pdf page 4``, ``waiting for
    gpt-4.1``); ``tool`` is the call that starts (``{"id", "name", "arguments"}``), so a
    client shows it as it starts, not only in the record afterwards."""

    text: str
    tool: Mapping[str, Any] | None = None
    kind: Literal["assistant.status"] = "assistant.status"


@dataclass(frozen=True, slots=True)
class AssistantDone:
    text: str
    images: tuple[Image, ...] = ()
    #: Why the model stopped (``end_turn``, ``max_tokens``: cut off, ...); None: unknown.
    stop_reason: str | None = None
    #: The turn's tokens and cost: ``input_tokens``, ``output_tokens``,
    #: ``cache_read_tokens``, ``cache_write_tokens``, ``cost_usd``; None: not reported.
    usage: Mapping[str, int | float] | None = None
    kind: Literal["assistant.done"] = "assistant.done"


@dataclass(frozen=True, slots=True)
class ErrorPayload:
    """A note from the server: ``code`` is short and stable, ``message`` says what to do."""

    code: str
    message: str
    kind: Literal["error"] = "error"


@dataclass(frozen=True, slots=True)
class CancelPayload:
    """Stop the turn answering the ``user.message`` whose ``msg_id`` is ``target``."""

    target: str
    kind: Literal["turn.cancel"] = "turn.cancel"


Payload: TypeAlias = (
    UserMessagePayload
    | AssistantDelta
    | AssistantStatus
    | AssistantDone
    | ErrorPayload
    | CancelPayload
)


@dataclass(frozen=True, slots=True)
class Frame:
    """One tether frame. ``seq`` is given by the ring (0 until appended); ``reply_to``
    is the ``msg_id`` of the request a server frame answers ("" for none)."""

    payload: Payload
    session: str = "default"
    msg_id: str = ""
    seq: int = 0
    ts: str = ""
    v: int = 1
    reply_to: str = ""

    @property
    def type(self) -> FrameType:
        return self.payload.kind


@dataclass(frozen=True, slots=True)
class Decoded:
    """A checked frame plus its images decoded (in payload order)."""

    frame: Frame
    images: tuple[ImageIn, ...] = field(default=())


def now_ts() -> str:
    """UTC now as RFC 3339 with milliseconds: ``2026-11-22T06:48:19.123Z``."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_msg_id() -> str:
    return uuid.uuid4().hex


def image_from_bytes(image: ImageIn) -> Image:
    """Encode a decoded image for a frame (standard base64, padded)."""
    # b64encode writes standard, padded base64: nothing to check again.
    return _checked_image(image.media_type, base64.b64encode(image.data).decode("ascii"))


# --- encoding -----------------------------------------------------------------------


def _images(images: tuple[Image, ...]) -> list[dict[str, str]]:
    return [{"media_type": im.media_type, "data": im.data} for im in images]


def payload_to_dict(payload: Payload) -> dict[str, Any]:
    """The JSON object of a payload; ``images`` appears only when there are some."""
    out: dict[str, Any]
    match payload:
        case UserMessagePayload():
            out = {"text": payload.text}
            if payload.images:
                out["images"] = _images(payload.images)
            if payload.user is not None:
                out["user"] = dict(payload.user)
        case AssistantDone():
            out = {"text": payload.text}
            if payload.images:
                out["images"] = _images(payload.images)
            if payload.stop_reason is not None:
                out["stop_reason"] = payload.stop_reason
            if payload.usage is not None:
                out["usage"] = dict(payload.usage)
        case AssistantDelta():
            out = {"text": payload.text}
        case AssistantStatus():
            out = {"text": payload.text}
            if payload.tool is not None:
                out["tool"] = dict(payload.tool)
        case ErrorPayload():
            out = {"code": payload.code, "message": payload.message}
        case CancelPayload():
            out = {"target": payload.target}
    return out


def frame_to_dict(frame: Frame) -> dict[str, Any]:
    return {**_head(frame), "payload": payload_to_dict(frame.payload)}


def _dumps(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


_IMG_OPEN = b'{"media_type":'
_IMG_DATA = b',"data":"'
_IMG_CLOSE = b'"}'


def _payload_parts(payload: Payload) -> list[bytes | str]:
    """The payload's JSON in parts; image data stays the frame's own text (``str``, pure
    ASCII base64), encoded by whoever joins or slices the parts."""
    if not isinstance(payload, UserMessagePayload | AssistantDone) or not payload.images:
        return [_dumps(payload_to_dict(payload))]
    parts: list[bytes | str] = [_dumps({"text": payload.text})[:-1], b',"images":[']
    for i, im in enumerate(payload.images):
        # Image data is checked base64 (see Image): it never needs escaping.
        parts += [
            b"," if i else b"",
            _IMG_OPEN,
            _dumps(im.media_type),
            _IMG_DATA,
            im.data,
            _IMG_CLOSE,
        ]
    parts.append(b"]")
    if isinstance(payload, UserMessagePayload) and payload.user is not None:
        parts += [b',"user":', _dumps(dict(payload.user))]
    if isinstance(payload, AssistantDone) and payload.stop_reason is not None:
        parts += [b',"stop_reason":', _dumps(payload.stop_reason)]
    parts.append(b"}")
    return parts


def encode_payload(payload: Payload) -> bytes:
    """The payload's JSON, byte for byte ``json.dumps(payload_to_dict(p))`` (compact).

    Image data (megabytes of base64) is joined in once rather than run through
    the JSON encoder.
    """
    return _joined(_payload_parts(payload))


def _joined(parts: Sequence[bytes | str]) -> bytes:
    return b"".join(p if isinstance(p, bytes) else p.encode("ascii") for p in parts)


def frame_pieces(frame: Frame, size: int) -> Iterator[bytes]:
    """:func:`encode_frame` in pieces of at most ``size`` bytes (short parts are not
    joined), image data sliced from the frame's own text: no reader of a stream holds a
    copy of a whole frame (a 25 MB image frame cost each slow SSE reader 32 MB).

    Example:
        >>> f = Frame(AssistantDelta("hello"), "s", "m", ts="t")
        >>> b"".join(frame_pieces(f, 4)) == encode_frame(f)
        True
    """
    head = _dumps(_head(frame))[:-1] + b',"payload":'
    for part in (head, *_payload_parts(frame.payload), b"}"):
        for at in range(0, len(part), size):
            piece = part[at : at + size]
            yield piece if isinstance(piece, bytes) else piece.encode("ascii")


def payload_size(payload: Payload) -> int:
    """``len(encode_payload(payload))`` without building it (no copy of image data)."""
    if not isinstance(payload, UserMessagePayload | AssistantDone) or not payload.images:
        return len(_dumps(payload_to_dict(payload)))
    text = AssistantDone(payload.text)
    size = len(_dumps(payload_to_dict(text))) - 1 + len(b',"images":[]') + 1
    for i, im in enumerate(payload.images):
        size += (1 if i else 0) + len(_IMG_OPEN) + len(_dumps(im.media_type))
        size += len(_IMG_DATA) + len(im.data) + len(_IMG_CLOSE)
    if isinstance(payload, UserMessagePayload) and payload.user is not None:
        size += len(b',"user":') + len(_dumps(dict(payload.user)))
    if isinstance(payload, AssistantDone) and payload.stop_reason is not None:
        size += len(b',"stop_reason":') + len(_dumps(payload.stop_reason))
    if isinstance(payload, AssistantDone) and payload.usage is not None:
        size += len(b',"usage":') + len(_dumps(dict(payload.usage)))
    return size


def frame_size(frame: Frame) -> int:
    """``len(encode_frame(frame))`` without building it."""
    return len(_dumps(_head(frame))) + len(b',"payload":') + payload_size(frame.payload)


def encode_frame(frame: Frame) -> bytes:
    """The one wire encoding of a frame: compact JSON, keys in protocol order."""
    head = _dumps(_head(frame))[:-1] + b',"payload":'
    return _joined([head, *_payload_parts(frame.payload), b"}"])


def encode_around_seq(frame: Frame) -> tuple[bytes, bytes]:
    """The frame's encoding cut where its seq goes: ``head + b"%d" % seq + tail`` is
    :func:`encode_frame` of the frame with that seq. A store that gives seqs itself
    (PostgreSQL) writes the body in the same statement that takes the seq.

    Example:
        >>> f = Frame(AssistantDelta("hi"), "s", "m", ts="t")
        >>> head, tail = encode_around_seq(f)
        >>> import dataclasses
        >>> head + b"7" + tail == encode_frame(dataclasses.replace(f, seq=7))
        True
    """
    head = _head(frame)
    before = {k: head.pop(k) for k in ("v", "type", "ts", "session")}
    del head["seq"]
    after = _dumps(head)  # msg_id (and reply_to), in protocol order
    return (
        _dumps(before)[:-1] + b',"seq":',
        _joined([b",", after[1:-1], b',"payload":', *_payload_parts(frame.payload), b"}"]),
    )


def encode_outgoing(frame: Frame) -> bytes:
    """A frame as a producer POSTs it: no ``seq`` and no ``ts`` (the server gives both)."""
    head = {"v": frame.v, "type": frame.type, "session": frame.session, "msg_id": frame.msg_id}
    return _joined([_dumps(head)[:-1], b',"payload":', *_payload_parts(frame.payload), b"}"])


def _head(frame: Frame) -> dict[str, Any]:
    head: dict[str, Any] = {
        "v": frame.v,
        "type": frame.type,
        "ts": frame.ts,
        "session": frame.session,
        "seq": frame.seq,
        "msg_id": frame.msg_id,
    }
    if frame.reply_to:
        head["reply_to"] = frame.reply_to
    return head


# --- decoding -----------------------------------------------------------------------


def base64_size(data: object, field: str) -> int:
    """Check ``data`` as tether base64 and return its decoded size, without decoding.

    Standard base64 (RFC 4648), padding optional, no data-URI prefix, no whitespace,
    not empty; errors are :class:`FrameError` naming ``field``.
    """
    if not isinstance(data, str):
        raise FrameError(f"{field}: must be a base64 string", field=field)
    if data[:5].lower() == "data:":
        raise FrameError(
            f"{field}: data-URI prefix not allowed; send bare base64 and put the type "
            "in media_type",
            field=field,
        )
    n = _b64_length(data.encode("ascii", errors="replace"))
    if n < 0:
        raise FrameError(f"{field}: not standard base64 (RFC 4648)", field=field)
    if n == 0:
        raise FrameError(f"{field}: empty; an image has at least one byte", field=field)
    return n * 3 // 4


def padded(data: str) -> str:
    """Checked base64 with its padding restored (for consumers that require it)."""
    return data + "=" * (-len(data) % 4)


def decode_base64(data: object, field: str) -> bytes:
    """Decode tether base64 (see :func:`base64_size`); an image past
    TETHER_MAX_IMAGE_BYTES is refused before it is decoded."""
    size = base64_size(data, field)
    check_image(size, field.rsplit(".", 1)[0])
    assert isinstance(data, str)
    try:
        return binascii.a2b_base64(padded(data).encode("ascii"))
    except binascii.Error as e:
        raise FrameError(f"{field}: not standard base64 (RFC 4648): {e}", field=field) from e


def _obj(value: object, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise FrameError(f"{field}: must be a JSON object", field=field)
    return value


def _str(value: object, field: str) -> str:
    if not isinstance(value, str):
        raise FrameError(f"{field}: must be a string", field=field)
    _utf8(value, field)
    return value


def _utf8(value: object, field: str) -> None:
    # JSON may carry lone surrogates ("\ud800") that no UTF-8 encoder accepts.
    try:
        (value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)).encode()
    except UnicodeEncodeError as e:
        raise FrameError(f"{field}: not valid Unicode ({e.reason})", field=field) from e


def _ident(value: object, field: str) -> str:
    s = _str(value, field)
    if len(s) > limits.TETHER_MAX_ID_CHARS or not _ID.fullmatch(s):
        raise FrameError(
            f"{field}: must be 1 to {limits.TETHER_MAX_ID_CHARS} characters of "
            "letters, digits and . _ : @ - (starting with a letter or digit)",
            field=field,
        )
    return s


def _decode_images(value: object, field: str) -> tuple[tuple[Image, ...], tuple[ImageIn, ...]]:
    if value is None:
        return (), ()
    if not isinstance(value, list):
        raise FrameError(f"{field}: must be a list of images", field=field)
    check_image_count(len(value), field)
    images: list[Image] = []
    decoded: list[ImageIn] = []
    total = 0
    for i, item in enumerate(value):
        name = f"{field}[{i}]"
        obj = _obj(item, name)
        # `ref` is reserved for a later content-addressed form: ignored here, never emitted.
        media_type = check_media_type(obj.get("media_type"), f"{name}.media_type")
        if "data" not in obj:
            raise FrameError(f"{name}.data: required", field=f"{name}.data")
        raw = decode_base64(obj["data"], f"{name}.data")
        check_image(len(raw), name)
        total += len(raw)
        # decode_base64 checked obj["data"] with the rules Image.__post_init__ applies.
        images.append(_checked_image(media_type, obj["data"]))
        decoded.append(ImageIn(media_type, raw))
    check_total(total, field)
    return tuple(images), tuple(decoded)


def _payload(kind: str, obj: Mapping[str, Any]) -> tuple[Payload, tuple[ImageIn, ...]]:
    if kind == "turn.cancel":
        return CancelPayload(_ident(obj.get("target"), "payload.target")), ()
    if kind == "error":
        code = _str(obj.get("code"), "payload.code")
        return ErrorPayload(code, _str(obj.get("message"), "payload.message")), ()
    if "text" not in obj:
        raise FrameError(
            'payload.text: required (use "" for an image-only message)', field="payload.text"
        )
    text = _str(obj["text"], "payload.text")
    if kind in ("assistant.delta", "assistant.status"):
        if "images" in obj:
            raise FrameError(f"payload.images: {kind} never carries images", field="payload.images")
        if kind == "assistant.delta":
            return AssistantDelta(text), ()
        tool = obj.get("tool")
        return AssistantStatus(text, None if tool is None else dict(_obj(tool, "payload.tool"))), ()
    images, decoded = _decode_images(obj.get("images"), "payload.images")
    if kind == "assistant.done":
        stop = obj.get("stop_reason")
        stop = None if stop is None else _str(stop, "payload.stop_reason")
        return AssistantDone(text, images, stop, _usage(obj.get("usage"))), decoded
    user = obj.get("user")
    if user is not None:
        user = dict(_obj(user, "payload.user"))
        _utf8(user, "payload.user")
    return UserMessagePayload(text, images, user), decoded


def _usage(value: object) -> dict[str, int | float] | None:
    """An ``assistant.done`` usage: an object of numbers (absent: None)."""
    if value is None:
        return None
    usage = _obj(value, "payload.usage")
    out: dict[str, int | float] = {}
    for key, number in usage.items():
        if isinstance(number, bool) or not isinstance(number, int | float):
            raise FrameError(f"payload.usage.{key}: expected a number", field="payload.usage")
        out[str(key)] = number
    return out


def decode_frame(
    value: object, *, types: frozenset[str] = FRAME_TYPES, assign: bool = False
) -> Decoded:
    """Check a parsed JSON frame and return it with its images decoded.

    Every error is a :class:`~visus.tether.limits.FrameError` or
    :class:`~visus.tether.limits.TetherLimitError` naming the field. ``types``
    restricts the accepted frame types (ingress takes only ``user.message``).
    With ``assign`` a missing ``msg_id`` or ``ts`` is filled in and ``seq`` is
    ignored (the ring gives it); otherwise ``seq`` must be a non-negative int.

    Example:
        >>> d = decode_frame({"type": "user.message", "payload": {"text": ""}}, assign=True)
        >>> d.frame.type, d.frame.session
        ('user.message', 'default')
    """
    obj = _obj(value, "frame")
    v = obj.get("v", 1)
    if v != 1 or isinstance(v, bool):
        raise FrameError(f"v: unsupported protocol version {v!r} (expected 1)", field="v")
    if "type" not in obj:
        raise FrameError(f"type: required, one of {', '.join(sorted(types))}", field="type")
    kind = _str(obj["type"], "type")
    if kind not in types:
        raise FrameError(f"type: {kind!r} is not one of {', '.join(sorted(types))}", field="type")
    session = _ident(obj.get("session", "default"), "session")
    msg_id = obj.get("msg_id")
    ts = obj.get("ts")
    if assign:
        msg_id = new_msg_id() if msg_id is None else _ident(msg_id, "msg_id")
        ts = now_ts() if ts is None else _str(ts, "ts")
        seq = 0
    else:
        msg_id = _str(msg_id, "msg_id")
        ts = _str(ts, "ts")
        raw_seq = obj.get("seq")
        if not isinstance(raw_seq, int) or isinstance(raw_seq, bool) or raw_seq < 0:
            raise FrameError("seq: must be a non-negative integer", field="seq")
        seq = raw_seq
    # A producer never answers a request: reply_to is read only from server frames.
    reply_to = "" if assign or "reply_to" not in obj else _str(obj["reply_to"], "reply_to")
    payload, decoded = _payload(kind, _obj(obj.get("payload"), "payload"))
    return Decoded(Frame(payload, session, msg_id, seq, ts, reply_to=reply_to), decoded)


def decode_frames(values: Sequence[object]) -> list[Decoded]:
    """Consumer-side check of every frame of a poll answer."""
    return [decode_frame(v) for v in values]
