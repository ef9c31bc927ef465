"""Messages to and from plain JSON values: the session log's record format.

Every record carries ``"v": 1``. An image part is written as its reference
(digest, media type, size, dimensions, origin), never its bytes, so a record's
size does not depend on the image's. Decoding is strict: a record that does not
describe a message raises :class:`~visus.errors.InvalidInputError` naming the
field, so the session store can report the line and carry on.

Example:
    >>> from visus.record.messages import UserMessage, TextPart
    >>> d = message_to_dict(UserMessage(parts=(TextPart("hi"),), turn=2))
    >>> d
    {'v': 1, 'kind': 'user', 'turn': 2, 'parts': [{'kind': 'text', 'text': 'hi'}]}
    >>> message_from_dict(d) == UserMessage(parts=(TextPart("hi"),), turn=2)
    True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, assert_never, cast, get_args

from visus.errors import InvalidInputError, InvalidKeyError
from visus.record.blobs import validate_digest
from visus.record.messages import (
    AssistantMessage,
    AttachmentOrigin,
    ChangedFrom,
    Crop,
    DocumentPart,
    ImagePart,
    Message,
    Origin,
    Part,
    PerceptionOrigin,
    ProviderState,
    StopReason,
    TextPart,
    ToolCall,
    ToolResult,
    Usage,
    UserMessage,
)

__all__ = ["RECORD_VERSION", "message_from_dict", "message_to_dict", "origin_to_dict"]

#: The record format version written into every line.
RECORD_VERSION = 1

# Fields written by hand below; any other (scalar) field a message or part grows
# later is carried through generically, so adding a defaulted field never loses data.
_HANDLED = {
    "kind",
    "parts",
    "tool_calls",
    "usage",
    "origin",
    "stop_reason",
    "provider_state",
    "request_id",
}
_STOP_REASONS = frozenset(get_args(StopReason))


def _extra_fields(value: Any) -> dict[str, Any]:
    return {
        f.name: getattr(value, f.name) for f in dataclasses.fields(value) if f.name not in _HANDLED
    }


def origin_to_dict(origin: Origin) -> dict[str, Any]:
    """An image origin as the record writes it."""
    if isinstance(origin, PerceptionOrigin):
        return {
            "kind": "perception",
            "source": origin.source,
            "tool": origin.tool,
            "page": origin.page,
            # Only a zoomed view writes it: older records (and readers) never see the key.
            **({"region": list(origin.region)} if origin.region is not None else {}),
        }
    if isinstance(origin, AttachmentOrigin):
        return {"kind": "attachment", "filename": origin.filename}
    assert_never(origin)


def _part_to_dict(part: Part) -> dict[str, Any]:
    if isinstance(part, TextPart):
        # A note is written only when set, so records of plain text stay as they were.
        return {"kind": "text", "text": part.text, **({"note": True} if part.note else {})}
    if isinstance(part, ImagePart):
        return {
            "kind": "image",
            "digest": part.digest,
            "media_type": part.media_type,
            "size": part.size,
            "width": part.width,
            "height": part.height,
            "origin": origin_to_dict(part.origin),
            # Only an image cut into crops writes it: other records stay as they were.
            **({"changed_from": _changed_to_dict(part.changed_from)} if part.changed_from else {}),
        }
    if isinstance(part, DocumentPart):
        return {
            "kind": "document",
            "digest": part.digest,
            "media_type": part.media_type,
            "size": part.size,
            "page_count": part.page_count,
            "origin": origin_to_dict(part.origin),
        }
    assert_never(part)


def _changed_to_dict(changed: ChangedFrom) -> dict[str, Any]:
    # Each crop's blob is named by a "digest" key, which is what collecting blobs
    # (``visus gc``) looks for: a crop is kept as long as its record is.
    return {
        "base": changed.base,
        "crops": [
            {
                "digest": c.digest,
                "media_type": c.media_type,
                "size": c.size,
                "region": list(c.region),
            }
            for c in changed.crops
        ],
    }


def _tool_call_to_dict(call: ToolCall) -> dict[str, Any]:
    out: dict[str, Any] = {"id": call.id, "name": call.name, "arguments": dict(call.arguments)}
    if call.signature is not None:  # written only when present: older records stay as they were
        out["signature"] = call.signature
    return out


def message_to_dict(m: Message) -> dict[str, Any]:
    """A JSON-ready dict for ``m`` (``"v": 1``); image parts hold references only.

    Example:
        >>> from visus.record.messages import AssistantMessage, ToolCall
        >>> call = ToolCall("c1", "view", {"path": "a.png"})
        >>> message_to_dict(AssistantMessage(tool_calls=(call,)))["tool_calls"]
        [{'id': 'c1', 'name': 'view', 'arguments': {'path': 'a.png'}}]
    """
    out: dict[str, Any] = {"v": RECORD_VERSION, "kind": m.kind}
    extra = _extra_fields(m)
    if isinstance(m, UserMessage):
        out.update(extra)
        out["parts"] = [_part_to_dict(p) for p in m.parts]
        if m.request_id is not None:  # written only when named: older records unchanged
            out["request_id"] = m.request_id
    elif isinstance(m, AssistantMessage):
        out.update(extra)
        out["parts"] = [_part_to_dict(p) for p in m.parts]
        out["tool_calls"] = [_tool_call_to_dict(c) for c in m.tool_calls]
        out["usage"] = _usage_to_dict(m.usage)
        # Written only when present: older records stay as they were.
        if m.stop_reason is not None:
            out["stop_reason"] = m.stop_reason
        if m.provider_state is not None:
            out["provider_state"] = {
                "wire": m.provider_state.wire,
                "items": m.provider_state.items,
            }
    elif isinstance(m, ToolResult):
        out.update(extra)
        out["parts"] = [_part_to_dict(p) for p in m.parts]
        if m.usage is not None:
            out["usage"] = _usage_to_dict(m.usage)
    else:
        assert_never(m)
    return out


def _usage_to_dict(usage: Usage | None) -> dict[str, Any] | None:
    if usage is None:
        return None
    out: dict[str, Any] = {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cost_usd": usage.cost_usd,
    }
    # Only when the provider cached: records of uncached steps stay as they were.
    if usage.cache_read_tokens:
        out["cache_read_tokens"] = usage.cache_read_tokens
    if usage.cache_write_tokens:
        out["cache_write_tokens"] = usage.cache_write_tokens
    if usage.reasoning_dropped:
        out["reasoning_dropped"] = usage.reasoning_dropped
    return out


# --- decoding -------------------------------------------------------------------


def _bad(where: str, why: str) -> InvalidInputError:
    return InvalidInputError(f"bad record: {where}: {why}")


def _obj(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _bad(where, f"expected an object, got {type(value).__name__}")
    return value


def _str(d: Mapping[str, Any], key: str, where: str) -> str:
    value = d.get(key)
    if not isinstance(value, str):
        raise _bad(f"{where}.{key}", "expected a string")
    return value


def _opt_str(d: Mapping[str, Any], key: str, where: str) -> str | None:
    value = d.get(key)
    if value is not None and not isinstance(value, str):
        raise _bad(f"{where}.{key}", "expected a string or null")
    return value


def _int(d: Mapping[str, Any], key: str, where: str, *, minimum: int = 0) -> int:
    value = d.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _bad(f"{where}.{key}", f"expected an integer >= {minimum}")
    return value


def _list(d: Mapping[str, Any], key: str, where: str) -> list[Any]:
    value = d.get(key, [])
    if not isinstance(value, list):
        raise _bad(f"{where}.{key}", "expected a list")
    return value


def _region(value: object, where: str) -> tuple[int, int, int, int] | None:
    if value is None:
        return None
    if (
        isinstance(value, list)
        and len(value) == 4
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        x0, y0, x1, y1 = value
        return (x0, y0, x1, y1)
    raise _bad(where, "expected [x0, y0, x1, y1] or null")


def _origin_from_dict(value: object, where: str) -> Origin:
    d = _obj(value, where)
    kind = d.get("kind")
    if kind == "perception":
        page = d.get("page")
        if page is not None and (isinstance(page, bool) or not isinstance(page, int)):
            raise _bad(f"{where}.page", "expected an integer or null")
        return PerceptionOrigin(
            source=_str(d, "source", where),
            tool=_str(d, "tool", where),
            page=page,
            region=_region(d.get("region"), f"{where}.region"),
        )
    if kind == "attachment":
        return AttachmentOrigin(filename=_opt_str(d, "filename", where))
    raise _bad(f"{where}.kind", f"unknown origin kind {kind!r}")


def _part_from_dict(value: object, where: str) -> Part:
    d = _obj(value, where)
    kind = d.get("kind")
    if kind == "text":
        note = d.get("note", False)
        if not isinstance(note, bool):
            raise _bad(f"{where}.note", "must be a boolean")
        return TextPart(_str(d, "text", where), note=note)
    if kind == "image":
        digest = _str(d, "digest", where)
        try:
            validate_digest(digest)
        except InvalidKeyError as e:
            raise _bad(f"{where}.digest", str(e)) from e
        return ImagePart(
            digest=digest,
            media_type=_str(d, "media_type", where),
            size=_int(d, "size", where),
            width=_int(d, "width", where),
            height=_int(d, "height", where),
            origin=_origin_from_dict(d.get("origin"), f"{where}.origin"),
            changed_from=_changed_from_dict(d.get("changed_from"), f"{where}.changed_from"),
        )
    if kind == "document":
        return DocumentPart(
            digest=_digest(d, where),
            media_type=_str(d, "media_type", where),
            size=_int(d, "size", where),
            page_count=_int(d, "page_count", where),
            origin=_origin_from_dict(d.get("origin"), f"{where}.origin"),
        )
    raise _bad(f"{where}.kind", f"unknown part kind {kind!r}")


def _changed_from_dict(value: object, where: str) -> ChangedFrom | None:
    if value is None:
        return None
    d = _obj(value, where)
    base = _digest_of(d.get("base"), f"{where}.base")
    crops: list[Crop] = []
    for i, raw in enumerate(_list(d, "crops", where)):
        at = f"{where}.crops[{i}]"
        c = _obj(raw, at)
        region = _region(c.get("region"), f"{at}.region")
        if region is None or region[2] <= region[0] or region[3] <= region[1]:
            raise _bad(f"{at}.region", "expected a non-empty [x0, y0, x1, y1]")
        crops.append(Crop(_digest(c, at), _str(c, "media_type", at), _int(c, "size", at), region))
    if not crops:
        raise _bad(f"{where}.crops", "expected at least one crop")
    return ChangedFrom(base, tuple(crops))


def _digest_of(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise _bad(where, "expected a string")
    try:
        validate_digest(value)
    except InvalidKeyError as e:
        raise _bad(where, str(e)) from e
    return value


def _digest(d: Mapping[str, Any], where: str) -> str:
    digest = _str(d, "digest", where)
    try:
        validate_digest(digest)
    except InvalidKeyError as e:
        raise _bad(f"{where}.digest", str(e)) from e
    return digest


def _parts(d: Mapping[str, Any]) -> tuple[Part, ...]:
    return tuple(_part_from_dict(p, f"parts[{i}]") for i, p in enumerate(_list(d, "parts", "")))


def _scalars(cls: type[Any], d: Mapping[str, Any]) -> dict[str, Any]:
    # Scalar fields present in the record; absent ones take the class default.
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in _HANDLED or f.name not in d:
            continue
        value = d[f.name]
        if value is not None and not isinstance(value, str | int | float | bool):
            raise _bad(f.name, "expected a JSON scalar")
        out[f.name] = value
    return out


def _check_scalars(m: Message) -> Message:
    turn = m.turn
    if isinstance(turn, bool) or not isinstance(turn, int) or turn < 0:
        raise _bad("turn", "expected an integer >= 0")
    if isinstance(m, ToolResult):
        if not isinstance(m.call_id, str) or not isinstance(m.tool_name, str):
            raise _bad("call_id/tool_name", "expected strings")
        if not isinstance(m.is_error, bool):
            raise _bad("is_error", "expected a boolean")
    if isinstance(m, AssistantMessage) and not isinstance(m.model, str):
        raise _bad("model", "expected a string")
    return m


def _stop_reason(value: object) -> StopReason | None:
    if value is None:
        return None
    if value not in _STOP_REASONS:
        raise _bad("stop_reason", f"expected one of {', '.join(sorted(_STOP_REASONS))}")
    return cast("StopReason", value)


def _provider_state(value: object) -> ProviderState | None:
    if value is None:
        return None
    d = _obj(value, "provider_state")
    wire, items = d.get("wire"), d.get("items")
    if not isinstance(wire, str) or not isinstance(items, str):
        raise _bad("provider_state", "expected {wire, items} strings")
    return ProviderState(wire, items)


def _usage_from_dict(value: object) -> Usage | None:
    if value is None:
        return None
    d = _obj(value, "usage")
    cost = d.get("cost_usd", 0.0)
    if isinstance(cost, bool) or not isinstance(cost, int | float):
        raise _bad("usage.cost_usd", "expected a number")
    return Usage(
        input_tokens=_int(d, "input_tokens", "usage"),
        output_tokens=_int(d, "output_tokens", "usage"),
        cost_usd=float(cost),
        cache_read_tokens=_int(d, "cache_read_tokens", "usage") if "cache_read_tokens" in d else 0,
        cache_write_tokens=(
            _int(d, "cache_write_tokens", "usage") if "cache_write_tokens" in d else 0
        ),
        reasoning_dropped=(
            _int(d, "reasoning_dropped", "usage") if "reasoning_dropped" in d else 0
        ),
    )


def _tool_call_from_dict(value: object, where: str) -> ToolCall:
    d = _obj(value, where)
    arguments = d.get("arguments", {})
    if not isinstance(arguments, dict):
        raise _bad(f"{where}.arguments", "expected an object")
    return ToolCall(
        id=_str(d, "id", where),
        name=_str(d, "name", where),
        arguments=arguments,
        signature=_opt_str(d, "signature", where),
    )


def message_from_dict(d: Mapping[str, Any]) -> Message:
    """The message a :func:`message_to_dict` record describes.

    Raises :class:`~visus.errors.InvalidInputError` naming the field when the record
    is malformed or of an unknown version.

    Example:
        >>> message_from_dict({"v": 1, "kind": "tool", "call_id": "c1", "tool_name": "read",
        ...                    "parts": [{"kind": "text", "text": "ok"}]}).text
        'ok'
    """
    d = _obj(d, "record")
    version = d.get("v")
    if version != RECORD_VERSION:
        raise _bad(
            "v", f"unsupported record version {version!r} (this visus reads {RECORD_VERSION})"
        )
    kind = d.get("kind")
    try:
        if kind == "user":
            request_id = _opt_str(d, "request_id", "message")
            user = UserMessage(parts=_parts(d), request_id=request_id, **_scalars(UserMessage, d))
            return _check_scalars(user)
        if kind == "assistant":
            parts = _parts(d)
            if not all(isinstance(p, TextPart) for p in parts):
                raise _bad("parts", "assistant messages hold text parts only")
            calls = tuple(
                _tool_call_from_dict(c, f"tool_calls[{i}]")
                for i, c in enumerate(_list(d, "tool_calls", ""))
            )
            return _check_scalars(
                AssistantMessage(
                    parts=tuple(p for p in parts if isinstance(p, TextPart)),
                    tool_calls=calls,
                    usage=_usage_from_dict(d.get("usage")),
                    stop_reason=_stop_reason(d.get("stop_reason")),
                    provider_state=_provider_state(d.get("provider_state")),
                    **_scalars(AssistantMessage, d),
                )
            )
        if kind == "tool":
            for key in ("call_id", "tool_name"):
                _str(d, key, "")
            return _check_scalars(
                ToolResult(
                    parts=_parts(d),
                    usage=_usage_from_dict(d.get("usage")),
                    **_scalars(ToolResult, d),
                )
            )
    except TypeError as e:  # a required field missing from the record
        raise _bad(str(kind), str(e)) from e
    raise _bad("kind", f"unknown message kind {kind!r}")
