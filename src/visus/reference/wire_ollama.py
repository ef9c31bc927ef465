"""Ollama wire: ``POST /api/chat``, NDJSON when streaming (Ollama's default) or one JSON.

Images are base64 strings in a message's ``images``; the reference server takes
them on user messages only (where every Ollama vision model reads them), rejects
base64 that does not decode (Go's own message) or bytes that are not an image,
and answers past the context window with Ollama's ``{"error": ...}``.

Example:
    >>> _reject("model is required").body
    {'error': 'model is required'}
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from visus.errors import InvalidInputError, UndecodableError
from visus.reference.common import Reject, Settings, answer, b64decode, check_image, read_json
from visus.reference.model import NEUTRAL_ROLES, Conversation, InCall, InImage, InMessage, Reply

__all__ = ["chat"]


def _reject(message: str, status: int = 400) -> Reject:
    return Reject(status, {"error": message})


def _too_long(tokens: int, window: int) -> Reject:
    return _reject(f"the input length exceeds the context length: {tokens} tokens > {window}")


def _images(i: int, role: str, raw: object) -> list[InImage]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise _reject("json: cannot unmarshal into Go struct field Message.messages.images")
    if raw and role != "user":
        raise _reject(f"messages[{i}]: images are only accepted on user messages")
    out: list[InImage] = []
    for k, item in enumerate(raw):
        try:
            data = b64decode(item)
        except InvalidInputError as e:
            raise _reject("illegal base64 data at input byte 0") from e
        try:
            checked = check_image(data)
        except UndecodableError as e:
            raise _reject("image: unknown format") from e
        out.append(
            InImage(
                data=data,
                width=checked.width,
                height=checked.height,
                where=f"messages[{i}] ({role}) image {k}",
            )
        )
    return out


def _conversation(body: dict[str, Any]) -> Conversation:
    raw = body.get("messages")
    if not isinstance(raw, list):
        raise _reject("messages is required")
    out: list[InMessage] = []
    for i, m in enumerate(raw):
        if not isinstance(m, dict):
            raise _reject("json: cannot unmarshal into Go value of type api.Message")
        role = m.get("role")
        if role not in {"system", "user", "assistant", "tool"}:
            raise _reject(f"invalid role: {role}")
        content = m.get("content") or ""
        if not isinstance(content, str):
            raise _reject(
                "json: cannot unmarshal array into Go struct field Message.messages."
                "content of type string"
            )
        calls = [
            InCall(
                id=f"{i}:{k}",
                name=str((c.get("function") or {}).get("name", "")),
                arguments=json.dumps((c.get("function") or {}).get("arguments") or {}),
            )
            for k, c in enumerate(m.get("tool_calls") or [])
            if isinstance(c, dict)
        ]
        out.append(
            InMessage(
                role=NEUTRAL_ROLES[role],
                texts=(content,) if content else (),
                images=tuple(_images(i, role, m.get("images"))),
                tool_calls=tuple(calls),
                tool_call_id=str(m.get("tool_name", "")) if role == "tool" else None,
            )
        )
    tools = body.get("tools") or []
    names = tuple(str((t.get("function") or {}).get("name")) for t in tools if isinstance(t, dict))
    return Conversation(
        messages=tuple(out), tools=names, tool_text=json.dumps(tools) if tools else ""
    )


def _stamp() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _final(model: str, reply: Reply, started: float) -> dict[str, Any]:
    elapsed = int((time.monotonic() - started) * 1e9)
    return {
        "model": model,
        "created_at": _stamp(),
        "message": {"role": "assistant", "content": ""},
        "done": True,
        "done_reason": "length" if reply.truncated else "stop",
        "total_duration": elapsed,
        "load_duration": 0,
        "prompt_eval_count": reply.input_tokens,
        "prompt_eval_duration": elapsed,
        "eval_count": reply.output_tokens,
        "eval_duration": 0,
    }


def _calls(reply: Reply) -> list[dict[str, Any]]:
    return [
        {"function": {"name": c.name, "arguments": dict(c.arguments)}} for c in reply.tool_calls
    ]


def _stream(model: str, reply: Reply, started: float) -> Iterator[str]:
    for k in range(0, len(reply.text), 64):
        yield (
            json.dumps(
                {
                    "model": model,
                    "created_at": _stamp(),
                    "done": False,
                    "message": {"role": "assistant", "content": reply.text[k : k + 64]},
                }
            )
            + "\n"
        )
    if reply.tool_calls:
        yield (
            json.dumps(
                {
                    "model": model,
                    "created_at": _stamp(),
                    "done": False,
                    "message": {"role": "assistant", "content": "", "tool_calls": _calls(reply)},
                }
            )
            + "\n"
        )
    yield json.dumps(_final(model, reply, started)) + "\n"


async def chat(request: Request, settings: Settings) -> Response:
    """``POST /api/chat``."""
    started = time.monotonic()
    body = await read_json(request, lambda msg: _reject(f"invalid character in JSON: {msg}"))
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _reject("model is required")
    conv = _conversation(body)
    options = body.get("options")
    cap = options.get("num_predict") if isinstance(options, dict) else None
    reply = await answer(
        conv, wire="ollama", model=model, settings=settings, too_long=_too_long, cap=cap
    )
    if body.get("stream", True):
        return StreamingResponse(_stream(model, reply, started), media_type="application/x-ndjson")
    done = _final(model, reply, started)
    done["message"] = {"role": "assistant", "content": reply.text}
    if reply.tool_calls:
        done["message"]["tool_calls"] = _calls(reply)
    return JSONResponse(done)
