"""Anthropic Messages wire: ``POST /v1/messages``, streaming and not.

Strict like the service: images only in user turns and inside ``tool_result``
content, base64 media types checked against the bytes, 5 MB of base64 and 8000 px
per image (2000 px once a request holds more than 20 images), 100 images per
request, every ``tool_use`` answered by a ``tool_result`` in the very next user
message (and no ``tool_result`` without its ``tool_use``), and "prompt is too
long" past the context window. ``document`` blocks with a base64 ``application/pdf``
source are read in user turns and tool results (30 MB of base64, 100 pages; 600 on
models whose context is over 200k tokens), each page perceived like an image.

Example:
    >>> _error("invalid_request_error", "x")["type"]
    'error'
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from visus import limits
from visus.errors import InvalidInputError, UndecodableError, VisusError
from visus.models import get_model
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

__all__ = ["messages"]

_MEDIA_TYPES = {"image/jpeg": "jpeg", "image/png": "png", "image/gif": "gif", "image/webp": "webp"}
_USER_BLOCKS = frozenset(
    {"text", "image", "document", "tool_result", "search_result", "container_upload"}
)
_ASSISTANT_BLOCKS = frozenset(
    {"text", "tool_use", "thinking", "redacted_thinking", "server_tool_use"}
)


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


def _reject(message: str, status: int = 400, kind: str = "invalid_request_error") -> Reject:
    return Reject(status, _error(kind, message))


def _too_long(tokens: int, window: int) -> Reject:
    return _reject(f"prompt is too long: {tokens} tokens > {window} maximum")


def _check_auth(request: Request) -> None:
    key = request.headers.get("x-api-key", "")
    bearer = request.headers.get("authorization", "")
    if not key.strip() and not (bearer.startswith("Bearer ") and bearer[7:].strip()):
        raise _reject("x-api-key header is required", 401, "authentication_error")


def _image(block: dict[str, Any], path: str, many: bool) -> InImage:
    source = block.get("source")
    if not isinstance(source, dict):
        raise _reject(f"{path}.source: Field required")
    kind = source.get("type")
    if kind == "url":
        raise _reject(
            f"{path}.source.url: Unable to download the file. Please verify the URL and try again."
        )
    if kind != "base64":
        raise _reject(
            f"{path}.source: Input tag '{kind}' found using 'type' does not match "
            "any of the expected tags: 'base64', 'url', 'file'"
        )
    media_type = source.get("media_type")
    if media_type not in _MEDIA_TYPES:
        raise _reject(
            f"{path}.source.base64.media_type: Input should be 'image/jpeg', "
            "'image/png', 'image/gif' or 'image/webp'"
        )
    raw = source.get("data")
    if isinstance(raw, str) and len(raw) > limits.ANTHROPIC_MAX_IMAGE_B64:
        raise _reject(
            f"{path}.source.base64: image exceeds 5 MB maximum: {len(raw)} bytes > "
            f"{limits.ANTHROPIC_MAX_IMAGE_B64} bytes"
        )
    try:
        checked = check_image(b64decode(raw))
    except (InvalidInputError, UndecodableError) as e:
        raise _reject(f"{path}.source.base64.data: Could not process image") from e
    actual = f"image/{checked.format}"
    if _MEDIA_TYPES[media_type] != checked.format:
        raise _reject(
            f"{path}.source.base64.data: The image was specified using the "
            f"{media_type} media type, but the image appears to be a {actual} image"
        )
    edge = max(checked.width, checked.height)
    if edge > limits.ANTHROPIC_MAX_EDGE:
        raise _reject(
            f"{path}.source.base64.data: At least one of the image dimensions exceed "
            f"max allowed size: {limits.ANTHROPIC_MAX_EDGE} pixels"
        )
    if many and edge > limits.ANTHROPIC_MANY_IMAGES_MAX_EDGE:
        raise _reject(
            f"{path}.source.base64.data: At least one of the image dimensions exceed "
            "max allowed size for many-image requests: "
            f"{limits.ANTHROPIC_MANY_IMAGES_MAX_EDGE} pixels"
        )
    return InImage(data=checked.data, width=checked.width, height=checked.height, where=path)


def _document(block: dict[str, Any], path: str, max_pages: int) -> tuple[InImage, ...]:
    source = block.get("source")
    if not isinstance(source, dict):
        raise _reject(f"{path}.source: Field required")
    kind = source.get("type")
    if kind != "base64":
        raise _reject(
            f"{path}.source: the reference server reads base64 PDF sources only, not {kind!r}"
        )
    if source.get("media_type") != "application/pdf":
        raise _reject(f"{path}.source.base64.media_type: Input should be 'application/pdf'")
    raw = source.get("data")
    if isinstance(raw, str) and len(raw) > limits.ANTHROPIC_MAX_PDF_B64:
        raise _reject(f"{path}.source.base64: document exceeds the maximum request size")
    try:
        data = b64decode(raw)
    except InvalidInputError as e:
        raise _reject(f"{path}.source.base64.data: Could not process document") from e
    try:
        return document_pages(data, path, max_pages=max_pages)
    except InvalidInputError as e:
        if "pages" in str(e):
            raise _reject(f"{path}: A maximum of {max_pages} PDF pages may be provided.") from e
        raise _reject(f"{path}.source.base64.data: The PDF specified was not valid.") from e


def _texts(value: object, path: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        out: list[str] = []
        for j, block in enumerate(value):
            if not isinstance(block, dict) or not isinstance(block.get("text"), str):
                raise _reject(f"{path}.{j}.text: Field required")
            out.append(block["text"])
        return out
    raise _reject(f"{path}: Input should be a valid string or list")


def _count_images(raw: list[Any]) -> int:
    count = 0
    for m in raw:
        content = m.get("content") if isinstance(m, dict) else None
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "image":
                count += 1
            inner = block.get("content") if block.get("type") == "tool_result" else None
            if isinstance(inner, list):
                count += sum(isinstance(b, dict) and b.get("type") == "image" for b in inner)
    return count


def _user(
    i: int, content: list[Any], many: bool, calls: set[str], max_pages: int
) -> list[InMessage]:
    out: list[InMessage] = []
    texts: list[str] = []
    images: list[InImage] = []
    answered: set[str] = set()
    for j, block in enumerate(content):
        path = f"messages.{i}.content.{j}"
        kind = block.get("type")
        if kind == "text":
            texts.extend(_texts([block], path))
        elif kind == "image":
            images.append(_image(block, path, many))
        elif kind == "document":
            images.extend(_document(block, path, max_pages))
        elif kind == "tool_result":
            call_id = block.get("tool_use_id")
            if call_id not in calls:
                raise _reject(
                    f"{path}: unexpected `tool_use_id` found in `tool_result` blocks: "
                    f"{call_id}. Each `tool_result` block must have a corresponding "
                    "`tool_use` block in the previous message."
                )
            answered.add(str(call_id))
            inner = block.get("content", [])
            r_texts: list[str] = []
            r_images: list[InImage] = []
            for k, part in enumerate([inner] if isinstance(inner, str) else inner or []):
                ppath = f"{path}.content.{k}"
                if isinstance(part, str):
                    r_texts.append(part)
                elif isinstance(part, dict) and part.get("type") == "image":
                    r_images.append(_image(part, ppath, many))
                elif isinstance(part, dict) and part.get("type") == "text":
                    r_texts.extend(_texts([part], ppath))
                elif isinstance(part, dict) and part.get("type") == "document":
                    r_images.extend(_document(part, ppath, max_pages))
                elif not (isinstance(part, dict) and part.get("type") == "search_result"):
                    raise _reject(
                        f"{ppath}: Input tag found using 'type' does not match any "
                        "of the expected tags: 'text', 'image', 'search_result', "
                        "'document'"
                    )
            out.append(
                InMessage(
                    role="tool",
                    texts=tuple(r_texts),
                    images=tuple(r_images),
                    tool_call_id=str(call_id),
                )
            )
        elif kind not in _USER_BLOCKS:
            raise _reject(
                f"{path}: Input tag '{kind}' found using 'type' does not match any of "
                "the expected tags: " + ", ".join(f"'{t}'" for t in sorted(_USER_BLOCKS))
            )
    if calls - answered:
        raise _reject(
            f"messages.{i}: `tool_use` ids were found without `tool_result` blocks "
            f"immediately after: {', '.join(sorted(calls - answered))}. Each "
            "`tool_use` block must have a corresponding `tool_result` block in the "
            "next message."
        )
    if texts or images or not out:
        out.append(InMessage(role="user", texts=tuple(texts), images=tuple(images)))
    return out


def _assistant(i: int, content: list[Any]) -> InMessage:
    texts: list[str] = []
    calls: list[InCall] = []
    for j, block in enumerate(content):
        kind = block.get("type")
        if kind not in _ASSISTANT_BLOCKS:
            raise _reject(
                f"messages.{i}.content.{j}: Input tag '{kind}' found using 'type' does "
                "not match any of the expected tags: "
                + ", ".join(f"'{t}'" for t in sorted(_ASSISTANT_BLOCKS))
            )
        if kind == "text":
            texts.extend(_texts([block], f"messages.{i}.content.{j}"))
        elif kind == "tool_use":
            calls.append(
                InCall(
                    id=str(block.get("id", "")),
                    name=str(block.get("name", "")),
                    arguments=json.dumps(block.get("input", {})),
                )
            )
    return InMessage(role="assistant", texts=tuple(texts), tool_calls=tuple(calls))


def _conversation(body: dict[str, Any]) -> Conversation:
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise _reject(
            "messages: Field required"
            if raw is None
            else "messages: at least one message is required"
        )
    if not isinstance(body.get("max_tokens"), int):
        raise _reject("max_tokens: Field required")
    n_images = _count_images(raw)
    try:
        large = get_model(str(body.get("model"))).context_tokens
    except VisusError:
        large = 0
    # 100 images a request on 200k-context models, 600 on the others (vision guide).
    most = (
        limits.ANTHROPIC_MAX_IMAGES_LARGE_CONTEXT
        if large > limits.ANTHROPIC_PDF_LARGE_CONTEXT_TOKENS
        else limits.ANTHROPIC_MAX_IMAGES
    )
    if n_images > most:
        raise _reject(f"Too many images in request: {n_images} > {most} maximum")
    many = n_images > limits.ANTHROPIC_MANY_IMAGES
    max_pages = (
        limits.ANTHROPIC_MAX_PDF_PAGES_LARGE_CONTEXT
        if large > limits.ANTHROPIC_PDF_LARGE_CONTEXT_TOKENS
        else limits.ANTHROPIC_MAX_PDF_PAGES
    )
    out: list[InMessage] = []
    system = body.get("system")
    if system is not None:
        out.append(InMessage(role="system", texts=tuple(_texts(system, "system"))))
    pending: set[str] = set()
    for i, m in enumerate(raw):
        role = m.get("role") if isinstance(m, dict) else None
        if role not in {"user", "assistant"}:
            raise _reject(f"messages.{i}.role: Input should be 'user' or 'assistant'")
        content = m.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list) or not all(isinstance(b, dict) for b in blocks):
            raise _reject(f"messages.{i}.content: Input should be a valid list")
        if role == "user":
            out.extend(_user(i, blocks, many, pending, max_pages))
            pending = set()
        else:
            if pending:
                raise _reject(
                    f"messages.{i}: `tool_use` ids were found without `tool_result` "
                    f"blocks immediately after: {', '.join(sorted(pending))}. Each "
                    "`tool_use` block must have a corresponding `tool_result` block "
                    "in the next message."
                )
            out.append(_assistant(i, blocks))
            pending = {c.id for c in out[-1].tool_calls}
    if pending:  # the conversation ends on calls nobody answered
        raise _reject(
            f"messages.{len(raw) - 1}: `tool_use` ids were found without `tool_result` blocks "
            f"immediately after: {', '.join(sorted(pending))}. Each `tool_use` block must have "
            "a corresponding `tool_result` block in the next message."
        )
    tools = body.get("tools") or []
    names = tuple(str(t.get("name")) for t in tools if isinstance(t, dict))
    return Conversation(
        messages=tuple(out), tools=names, tool_text=json.dumps(tools) if tools else ""
    )


def _content(reply: Reply, reasoning: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The reply's blocks: its thinking, its text (unless the model put it in a second
    thinking block, as newer models do with their notes between tool calls), its calls."""
    blocks: list[dict[str, Any]] = list(reasoning)
    if reply.text and len(reasoning) < 2:
        blocks.append({"type": "text", "text": reply.text})
    for c in reply.tool_calls:
        blocks.append(
            {
                "type": "tool_use",
                "id": "toolu_" + c.id[5:],
                "name": c.name,
                "input": dict(c.arguments),
            }
        )
    return blocks


def _sse(kind: str, data: dict[str, Any]) -> str:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"


def _stream(message: dict[str, Any]) -> Iterator[str]:
    usage = message["usage"]
    start = {
        **message,
        "content": [],
        "stop_reason": None,
        "usage": {**usage, "output_tokens": 1},
    }
    yield _sse("message_start", {"message": start})
    yield _sse("ping", {})
    for n, block in enumerate(message["content"]):
        if block["type"] == "thinking":
            yield from _thinking_events(n, block)
            continue
        if block["type"] == "text":
            yield _sse(
                "content_block_start", {"index": n, "content_block": {"type": "text", "text": ""}}
            )
            text = block["text"]
            for k in range(0, len(text), 64):
                yield _sse(
                    "content_block_delta",
                    {"index": n, "delta": {"type": "text_delta", "text": text[k : k + 64]}},
                )
        else:
            yield _sse("content_block_start", {"index": n, "content_block": {**block, "input": {}}})
            args = json.dumps(block["input"])
            for k in range(0, len(args), 32):
                yield _sse(
                    "content_block_delta",
                    {
                        "index": n,
                        "delta": {"type": "input_json_delta", "partial_json": args[k : k + 32]},
                    },
                )
        yield _sse("content_block_stop", {"index": n})
    yield _sse(
        "message_delta",
        {
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": usage["output_tokens"]},
        },
    )
    yield _sse("message_stop", {})


def _thinking_events(n: int, block: dict[str, Any]) -> Iterator[str]:
    """A thinking block as the API streams it: opened empty, its text (if shown) in
    ``thinking_delta``s, its signature in a ``signature_delta``, closed."""
    empty = {"type": "thinking", "thinking": "", "signature": ""}
    yield _sse("content_block_start", {"index": n, "content_block": empty})
    text = block["thinking"]
    for k in range(0, len(text), 64):
        delta = {"type": "thinking_delta", "thinking": text[k : k + 64]}
        yield _sse("content_block_delta", {"index": n, "delta": delta})
    delta = {"type": "signature_delta", "signature": block["signature"]}
    yield _sse("content_block_delta", {"index": n, "delta": delta})
    yield _sse("content_block_stop", {"index": n})


def _usage(reply: Reply, use: CacheUse) -> dict[str, int]:
    """The API's usage: ``input_tokens`` is what follows the last cached or written prefix."""
    return {
        "input_tokens": reply.input_tokens - use.read - use.write,
        "output_tokens": reply.output_tokens,
        "cache_creation_input_tokens": use.write,
        "cache_read_input_tokens": use.read,
    }


def cache_blocks(
    body: dict[str, Any],
    pixels: Callable[[int, int], int],
    reasoning: Mapping[str, int] | None = None,
) -> list[Block]:
    """The request's prompt as cache blocks, in the API's order: tools, system, messages;
    a block with ``cache_control`` (or the last one, for a top-level ``cache_control``:
    automatic caching) is a breakpoint. A thinking block weighs the reasoning tokens it
    stands for (``reasoning``, by path; none when it was dropped)."""
    found: list[tuple[object, object]] = []  # (block, its cache_control)
    for tool in body.get("tools") or []:
        found.append((tool, tool.get("cache_control") if isinstance(tool, dict) else None))
    system = body.get("system")
    for block in [system] if isinstance(system, str) else system or []:
        found.append((block, block.get("cache_control") if isinstance(block, dict) else None))
    weights: dict[int, int] = {}
    for i, m in enumerate(body.get("messages") or []):
        content = m.get("content") if isinstance(m, dict) else None
        role = m.get("role") if isinstance(m, dict) else None
        for j, block in enumerate([content] if isinstance(content, str) else content or []):
            if isinstance(block, dict) and block.get("type") in ("thinking", "redacted_thinking"):
                weights[len(found)] = (reasoning or {}).get(f"messages.{i}.content.{j}", 0)
            mark = block.get("cache_control") if isinstance(block, dict) else None
            inner = block.get("content") if isinstance(block, dict) else None
            if mark is None and isinstance(inner, list):  # a marked block inside a result
                mark = next(
                    (
                        c.get("cache_control")
                        for c in inner
                        if isinstance(c, dict) and c.get("cache_control")
                    ),
                    None,
                )
            found.append(({"role": role, "block": block}, mark))
    if isinstance(body.get("cache_control"), dict) and found:
        found[-1] = (found[-1][0], body["cache_control"])
    out: list[Block] = []
    for n, (block, mark) in enumerate(found):
        key, tokens = estimate(block, pixels)
        tokens = weights.get(n, tokens)
        ttl = mark.get("ttl") if isinstance(mark, dict) else None
        out.append(Block(key, tokens, isinstance(mark, dict), 3600.0 if ttl == "1h" else 300.0))
    return out


def _stop_reason(reply: Reply) -> str:
    if reply.truncated:
        return "max_tokens"
    return "tool_use" if reply.tool_calls else "end_turn"


async def messages(request: Request, settings: Settings) -> Response:
    """``POST /v1/messages``."""
    _check_auth(request)
    raw = await request.body()
    if len(raw) > limits.ANTHROPIC_MAX_REQUEST_BYTES:  # as the API answers
        raise _reject(
            "Request exceeds the maximum allowed number of bytes.", 413, "request_too_large"
        )
    body = await read_json(request, lambda msg: _reject(f"Invalid JSON body: {msg}"))
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _reject("model: Field required")
    conv = _conversation(body)
    spec = spec_for("anthropic", model)
    betas = {b.strip() for b in request.headers.get("anthropic-beta", "").split(",")}
    output_config = body.get("output_config")
    effort = output_config.get("effort") if isinstance(output_config, dict) else None
    cfg = thinking.config(
        body.get("thinking"), body.get("tool_choice"), effort, betas, spec, _reject
    )
    head, items = thinking.items(body.get("system"), body.get("tools"), body["messages"])
    verdict = thinking.check(head, items, spec, cfg, _reject)
    blocks = cache_blocks(body, pixel_cost(spec), dict(verdict.kept))
    marked = sum(b.breakpoint for b in blocks)
    if marked > MAX_BREAKPOINTS:
        raise _reject(
            f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {marked}."
        )
    reply = await answer(
        conv,
        wire="anthropic",
        model=model,
        settings=settings,
        too_long=_too_long,
        cap=body.get("max_tokens"),
    )
    reasoning, spent = thinking.blocks(reply, spec, cfg, verdict, head, items)
    # Kept reasoning is billed as input; this reply's reasoning as output.
    reply = dataclasses.replace(
        reply,
        input_tokens=reply.input_tokens + verdict.kept_tokens,
        output_tokens=reply.output_tokens + spent,
    )
    use = settings.cache.breakpoints(
        f"anthropic:{model}", blocks, total=reply.input_tokens, min_tokens=spec.cache_min_tokens
    )
    # The id names the request's bytes (not re-serialised: a long loop's are tens of MB).
    digest = hashlib.sha256(raw).hexdigest()[:24]
    message = {
        "id": f"msg_{digest}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": _content(reply, reasoning),
        "stop_reason": _stop_reason(reply),
        "stop_sequence": None,
        "usage": _usage(reply, use),
    }
    transformations = thinking.transformations(verdict, cfg)
    if transformations is not None:  # with the beta, on every reply ("[]" when none)
        message["input_transformations"] = transformations
    if body.get("stream"):
        return StreamingResponse(_stream(message), media_type="text/event-stream")
    return JSONResponse(message)
