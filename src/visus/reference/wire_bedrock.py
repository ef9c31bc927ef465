"""Bedrock Converse wire: ``POST /model/{modelId}/converse`` (what boto3 sends).

botocore serialises Converse as REST-JSON with blobs in base64, signs it with
SigV4 (only the ``Authorization`` header's presence is checked here) and reads
errors from the ``x-amzn-ErrorType`` header plus a ``{"message"}`` body. Strict
like the service: the conversation starts with a user message and alternates,
images only in user content and ``toolResult`` content, formats png/jpeg/gif/webp
matching the bytes, 3.75 MB and 8000 px per image, 20 images per request, and
every ``toolUse`` answered by a ``toolResult`` in the next message. ``document``
blocks (format ``pdf`` only here; 4.5 MB each, 5 per request, a name of letters,
digits, single spaces, hyphens, parentheses and brackets, unique in the request)
go wherever images may, each page perceived like an image.

Example:
    >>> _reject("x").headers["x-amzn-ErrorType"]
    'ValidationException'
"""

from __future__ import annotations

import dataclasses
import json
import re
import struct
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from visus import limits
from visus.errors import InvalidInputError, UndecodableError
from visus.models.spec import ModelSpec
from visus.reference import wire_claude_thinking as thinking
from visus.reference.cache import MAX_BREAKPOINTS, Block, CacheUse, estimate
from visus.reference.common import (
    Reject,
    Settings,
    answer,
    b64decode,
    check_image,
    pixel_cost,
    read_json,
    spec_for,
)
from visus.reference.model import (
    Conversation,
    InCall,
    InImage,
    InMessage,
    Reply,
    document_pages,
)

__all__ = ["converse", "converse_stream"]

_FORMATS = frozenset({"png", "jpeg", "gif", "webp"})


def _reject(message: str, status: int = 400, kind: str = "ValidationException") -> Reject:
    return Reject(status, {"message": message}, {"x-amzn-ErrorType": kind})


def _too_long(tokens: int, window: int) -> Reject:
    return _reject(f"Input is too long for requested model. ({tokens} tokens > {window})")


class _Count:
    images = 0

    def __init__(self) -> None:
        self.documents: set[str] = set()


_DOC_NAME = re.compile(r"[A-Za-z0-9\s\-()\[\]]+")
_DOUBLE_SPACE = re.compile(r"\s\s")


def _document(block: object, path: str, count: _Count) -> tuple[InImage, ...]:
    if not isinstance(block, dict):
        raise _reject(
            f"1 validation error detected: Value at '{path}' failed to satisfy "
            "constraint: Member must not be null"
        )
    fmt = block.get("format")
    if fmt != "pdf":
        raise _reject(
            f"The document at {path} has format {fmt!r}; the reference server reads pdf only."
        )
    name = block.get("name")
    if not isinstance(name, str) or not _DOC_NAME.fullmatch(name) or _DOUBLE_SPACE.search(name):
        raise _reject(
            f"The document file name at {path}.name can only contain alphanumeric characters, "
            "whitespace characters, hyphens, parentheses, and square brackets. The name can't "
            "contain more than one consecutive whitespace character."
        )
    if name in count.documents:
        raise _reject(f"Duplicate document name {name!r} at {path}.name.")
    count.documents.add(name)
    if len(count.documents) > limits.BEDROCK_MAX_DOCUMENTS:
        raise _reject(
            f"Too many documents in the request: at most {limits.BEDROCK_MAX_DOCUMENTS} "
            "are allowed."
        )
    source = block.get("source")
    raw = source.get("bytes") if isinstance(source, dict) else None
    try:
        data = b64decode(raw)
    except InvalidInputError as e:
        raise _reject(f"Could not parse the base64 bytes at {path}.source.bytes") from e
    if len(data) > limits.BEDROCK_MAX_DOCUMENT_BYTES:
        raise _reject(
            f"The document at {path} is {len(data)} bytes, over the maximum of "
            f"{limits.BEDROCK_MAX_DOCUMENT_BYTES} bytes (4.5 MB)."
        )
    try:
        return document_pages(data, path)
    except InvalidInputError as e:
        raise _reject(f"The provided document at {path} could not be processed: {e}") from e


def _image(block: object, path: str, count: _Count) -> InImage:
    if not isinstance(block, dict):
        raise _reject(
            f"1 validation error detected: Value at '{path}' failed to satisfy "
            "constraint: Member must not be null"
        )
    fmt = block.get("format")
    if fmt not in _FORMATS:
        raise _reject(
            f"1 validation error detected: Value '{fmt}' at '{path}.format' failed to "
            "satisfy constraint: Member must satisfy enum value set: "
            "[png, jpeg, gif, webp]"
        )
    source = block.get("source")
    raw = source.get("bytes") if isinstance(source, dict) else None
    try:
        data = b64decode(raw)
    except InvalidInputError as e:
        raise _reject(f"Could not parse the base64 bytes at {path}.source.bytes") from e
    if len(data) > limits.BEDROCK_MAX_IMAGE_BYTES:
        raise _reject(
            f"The image at {path} is {len(data)} bytes, over the maximum of "
            f"{limits.BEDROCK_MAX_IMAGE_BYTES} bytes (3.75 MB)."
        )
    count.images += 1
    if count.images > limits.BEDROCK_MAX_IMAGES:
        raise _reject(
            f"Too many images in the request: at most {limits.BEDROCK_MAX_IMAGES} are allowed."
        )
    try:
        checked = check_image(data)
    except UndecodableError as e:
        raise _reject(f"The provided image at {path} could not be processed.") from e
    if checked.format != fmt:
        raise _reject(
            f"The format of the image at {path} ({checked.format}) does not match "
            f"the declared format {fmt}."
        )
    if max(checked.width, checked.height) > limits.BEDROCK_MAX_EDGE:
        raise _reject(
            f"The image at {path} is {checked.width}x{checked.height}; each side may "
            f"be at most {limits.BEDROCK_MAX_EDGE} pixels."
        )
    return InImage(data=data, width=checked.width, height=checked.height, where=path)


def _user(i: int, content: list[Any], pending: list[str], count: _Count) -> list[InMessage]:
    out: list[InMessage] = []
    texts: list[str] = []
    images: list[InImage] = []
    results = [b["toolResult"] for b in content if "toolResult" in b]
    if len(results) > len(pending):
        raise _reject(
            f"The number of toolResult blocks at messages.{i}.content exceeds the "
            "number of toolUse blocks of previous turn."
        )
    answered = {str(r.get("toolUseId")) for r in results if isinstance(r, dict)}
    if set(pending) - answered:
        raise _reject(
            f"Expected toolResult blocks at messages.{i}.content for the following "
            f"Ids: {', '.join(sorted(set(pending) - answered))}"
        )
    for j, block in enumerate(content):
        path = f"messages.{i}.content.{j}"
        if isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif "image" in block:
            images.append(_image(block["image"], f"{path}.image", count))
        elif "document" in block:
            images.extend(_document(block["document"], f"{path}.document", count))
        elif isinstance(block.get("toolResult"), dict):
            result = block["toolResult"]
            r_texts: list[str] = []
            r_images: list[InImage] = []
            for k, part in enumerate(result.get("content") or []):
                if not isinstance(part, dict):
                    continue
                if isinstance(part.get("text"), str):
                    r_texts.append(part["text"])
                elif "json" in part:
                    r_texts.append(json.dumps(part["json"]))
                elif "image" in part:
                    r_images.append(
                        _image(part["image"], f"{path}.toolResult.content.{k}.image", count)
                    )
                elif "document" in part:
                    r_images.extend(
                        _document(
                            part["document"], f"{path}.toolResult.content.{k}.document", count
                        )
                    )
            out.append(
                InMessage(
                    role="tool",
                    texts=tuple(r_texts),
                    images=tuple(r_images),
                    tool_call_id=str(result.get("toolUseId")),
                )
            )
    if texts or images or not out:
        out.append(InMessage(role="user", texts=tuple(texts), images=tuple(images)))
    return out


def _conversation(body: dict[str, Any]) -> Conversation:
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise _reject(
            "A conversation must start with a user message. Try again with a "
            "conversation that starts with a user message."
        )
    out: list[InMessage] = []
    system = body.get("system") or []
    texts = [s["text"] for s in system if isinstance(s, dict) and isinstance(s.get("text"), str)]
    if texts:
        out.append(InMessage(role="system", texts=tuple(texts)))
    count = _Count()
    pending: list[str] = []
    previous = ""
    for i, m in enumerate(raw):
        role = m.get("role") if isinstance(m, dict) else None
        content = m.get("content") if isinstance(m, dict) else None
        if role not in {"user", "assistant"} or not isinstance(content, list):
            raise _reject(
                f"1 validation error detected: Value at 'messages.{i + 1}.member' "
                "failed to satisfy constraint: role and content are required"
            )
        if i == 0 and role != "user":
            raise _reject(
                "A conversation must start with a user message. Try again with a "
                "conversation that starts with a user message."
            )
        if role == previous:
            raise _reject(
                "A conversation must alternate between user and assistant roles. "
                "Make sure the conversation alternates between user and assistant "
                "roles and try again."
            )
        previous = role
        blocks = [b for b in content if isinstance(b, dict)]
        if role == "user":
            out.extend(_user(i, blocks, pending, count))
            pending = []
            continue
        a_texts: list[str] = []
        calls: list[InCall] = []
        for j, block in enumerate(blocks):
            if "image" in block or "document" in block:
                kind = "image" if "image" in block else "document"
                raise _reject(
                    f"messages.{i}.content.{j}: {kind} blocks are not allowed in assistant "
                    "messages."
                )
            if isinstance(block.get("text"), str):
                a_texts.append(block["text"])
            elif isinstance(block.get("toolUse"), dict):
                use = block["toolUse"]
                calls.append(
                    InCall(
                        id=str(use.get("toolUseId")),
                        name=str(use.get("name")),
                        arguments=json.dumps(use.get("input") or {}),
                    )
                )
        pending = [c.id for c in calls]
        out.append(InMessage(role="assistant", texts=tuple(a_texts), tool_calls=tuple(calls)))
    if pending:
        raise _reject(
            f"Expected toolResult blocks at messages.{len(raw)}.content for the following "
            f"Ids: {', '.join(sorted(pending))}"
        )
    tools = (body.get("toolConfig") or {}).get("tools") or []
    names = tuple(str((t.get("toolSpec") or {}).get("name")) for t in tools if isinstance(t, dict))
    return Conversation(
        messages=tuple(out), tools=names, tool_text=json.dumps(tools) if tools else ""
    )


def _content(reply: Reply, reasoning: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The reply's blocks: its reasoning, its text (unless a second reasoning block holds
    it, as the newest Claude models do with their notes between tool calls), its calls."""
    blocks: list[dict[str, Any]] = list(reasoning)
    if reply.text and len(reasoning) < 2:
        blocks.append({"text": reply.text})
    for c in reply.tool_calls:
        blocks.append(
            {
                "toolUse": {
                    "toolUseId": "tooluse_" + c.id[5:],
                    "name": c.name,
                    "input": dict(c.arguments),
                }
            }
        )
    return blocks


def _event(kind: str, payload: dict[str, Any]) -> bytes:
    """One message of AWS's binary event stream (what botocore's EventStream parses)."""
    headers = b""
    for name, value in (
        (":event-type", kind),
        (":content-type", "application/json"),
        (":message-type", "event"),
    ):
        raw = value.encode()
        headers += bytes([len(name)]) + name.encode() + b"\x07" + struct.pack(">H", len(raw))
        headers += raw
    body = json.dumps(payload).encode()
    prelude = struct.pack(">II", 12 + len(headers) + len(body) + 4, len(headers))
    message = prelude + struct.pack(">I", zlib.crc32(prelude)) + headers + body
    return message + struct.pack(">I", zlib.crc32(message))


def _events(answer: _Answer) -> Iterator[bytes]:
    reply, cache = answer.reply, answer.use
    yield _event("messageStart", {"role": "assistant"})
    for n, block in enumerate(_content(reply, answer.reasoning)):
        if "reasoningContent" in block:
            shown = block["reasoningContent"]["reasoningText"]
            for piece in ({"text": shown["text"]}, {"signature": shown["signature"]}):
                if next(iter(piece.values())):
                    delta = {"contentBlockIndex": n, "delta": {"reasoningContent": piece}}
                    yield _event("contentBlockDelta", delta)
        elif "text" in block:
            text = block["text"]
            for k in range(0, len(text), 64):
                yield _event(
                    "contentBlockDelta",
                    {"contentBlockIndex": n, "delta": {"text": text[k : k + 64]}},
                )
        else:
            use = block["toolUse"]
            yield _event(
                "contentBlockStart",
                {
                    "contentBlockIndex": n,
                    "start": {"toolUse": {"toolUseId": use["toolUseId"], "name": use["name"]}},
                },
            )
            yield _event(
                "contentBlockDelta",
                {"contentBlockIndex": n, "delta": {"toolUse": {"input": json.dumps(use["input"])}}},
            )
        yield _event("contentBlockStop", {"contentBlockIndex": n})
    stop: dict[str, Any] = {"stopReason": _stop_reason(reply)}
    if answer.extra:
        stop["additionalModelResponseFields"] = answer.extra
    yield _event("messageStop", stop)
    yield _event("metadata", {"usage": _usage(reply, cache), "metrics": {"latencyMs": 1}})


def _usage(reply: Reply, use: CacheUse) -> dict[str, int]:
    """Converse usage: ``inputTokens`` is what was neither read from nor written to the
    cache; reads and writes are counted beside it."""
    usage = {
        "inputTokens": reply.input_tokens - use.read - use.write,
        "outputTokens": reply.output_tokens,
        "totalTokens": reply.input_tokens + reply.output_tokens,
    }
    if use.read or use.write:
        usage["cacheReadInputTokens"] = use.read
        usage["cacheWriteInputTokens"] = use.write
    return usage


def cache_blocks(
    body: dict[str, Any],
    pixels: Callable[[int, int], int],
    reasoning: Mapping[str, int] | None = None,
) -> list[Block]:
    """The request as cache blocks (tools, system, messages); a ``cachePoint`` block marks
    the block before it as a breakpoint. A ``reasoningContent`` block weighs the reasoning
    tokens it stands for (``reasoning``, by path; none when it was dropped)."""
    found: list[tuple[object, bool]] = []
    weights: dict[int, int] = {}
    for i, m in enumerate(body.get("messages") or []):
        content = m.get("content") if isinstance(m, dict) else None
        for j, item in enumerate(content if isinstance(content, list) else []):
            if isinstance(item, dict) and "reasoningContent" in item:
                weights[id(item)] = (reasoning or {}).get(f"messages.{i}.content.{j}", 0)
    tool_config = body.get("toolConfig")
    groups: list[tuple[str | None, object]] = [
        (None, tool_config.get("tools") if isinstance(tool_config, dict) else None),
        (None, body.get("system")),
        *(
            (m.get("role"), m.get("content"))
            for m in body.get("messages") or []
            if isinstance(m, dict)
        ),
    ]
    for role, items in groups:
        for item in items if isinstance(items, list) else []:
            if isinstance(item, dict) and "cachePoint" in item:
                if found:
                    found[-1] = (found[-1][0], True)
                continue
            found.append(({"role": role, "block": item} if role else item, False))
    out = []
    for block, mark in found:
        key, tokens = estimate(block, pixels)
        inner = block.get("block") if isinstance(block, dict) else None
        out.append(Block(key, weights.get(id(inner), tokens), mark))
    return out


@dataclass(frozen=True, slots=True)
class _Answer:
    """The reply, its cache use, its reasoning blocks, and ``additionalModelResponseFields``."""

    reply: Reply
    use: CacheUse
    reasoning: list[dict[str, Any]]
    extra: dict[str, Any]


def _thinking(body: dict[str, Any], spec: ModelSpec) -> thinking.Thinking:
    """Claude's thinking settings, from ``additionalModelRequestFields`` (where Converse
    passes the Messages API's ``thinking``, ``output_config`` and ``anthropic_beta``)."""
    extra = body.get("additionalModelRequestFields")
    fields = extra if isinstance(extra, dict) else {}
    betas = fields.get("anthropic_beta")
    output_config = fields.get("output_config")
    return thinking.config(
        fields.get("thinking"),
        thinking.converse_tool_choice(body.get("toolConfig")),
        output_config.get("effort") if isinstance(output_config, dict) else None,
        {str(b) for b in betas} if isinstance(betas, list) else set(),
        spec,
        _reject,
    )


async def _reply(request: Request, settings: Settings) -> _Answer:
    if not request.headers.get("authorization", "").strip():
        raise _reject("Missing Authentication Token", 403, "AccessDeniedException")
    model = str(request.path_params.get("model_id", ""))
    body = await read_json(request, lambda msg: _reject(f"Malformed input request: {msg}"))
    conv = _conversation(body)
    spec = spec_for("bedrock", model)
    cfg = _thinking(body, spec)
    head, items = thinking.converse_items(body)
    verdict = thinking.check(head, items, spec, cfg, _reject)
    blocks = cache_blocks(body, pixel_cost(spec), dict(verdict.kept))
    if sum(b.breakpoint for b in blocks) > MAX_BREAKPOINTS:
        raise _reject(f"A maximum of {MAX_BREAKPOINTS} cache points is allowed per request.")
    inference = body.get("inferenceConfig")
    cap = inference.get("maxTokens") if isinstance(inference, dict) else None
    reply = await answer(
        conv, wire="bedrock", model=model, settings=settings, too_long=_too_long, cap=cap
    )
    reasoning, spent = thinking.blocks(reply, spec, cfg, verdict, head, items)
    reply = dataclasses.replace(
        reply,
        input_tokens=reply.input_tokens + verdict.kept_tokens,
        output_tokens=reply.output_tokens + spent,
    )
    use = settings.cache.breakpoints(
        f"bedrock:{model}", blocks, total=reply.input_tokens, min_tokens=spec.cache_min_tokens
    )
    transformations = thinking.transformations(verdict, cfg)
    extra = {} if transformations is None else {"input_transformations": transformations}
    return _Answer(reply, use, thinking.converse_blocks(reasoning), extra)


def _stop_reason(reply: Reply) -> str:
    if reply.truncated:
        return "max_tokens"
    return "tool_use" if reply.tool_calls else "end_turn"


async def converse(request: Request, settings: Settings) -> Response:
    """``POST /model/{modelId}/converse``."""
    a = await _reply(request, settings)
    content = _content(a.reply, a.reasoning)
    out: dict[str, Any] = {
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": _stop_reason(a.reply),
        "usage": _usage(a.reply, a.use),
        "metrics": {"latencyMs": 1},
    }
    if a.extra:
        out["additionalModelResponseFields"] = a.extra
    return JSONResponse(out)


async def converse_stream(request: Request, settings: Settings) -> Response:
    """``POST /model/{modelId}/converse-stream``: the same answer as binary stream events."""
    a = await _reply(request, settings)
    return StreamingResponse(_events(a), media_type="application/vnd.amazon.eventstream")
