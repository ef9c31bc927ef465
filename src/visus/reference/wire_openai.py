"""OpenAI Chat Completions (streaming and not), and what both OpenAI wires share.

As strict as the real service where it matters to visus: images only in user
messages (the exact 400 OpenAI gives for an image in a tool message), tool
messages directly after the assistant message holding their calls, data-URL
images that decode, at most 20 MB each and 500 per request, and the
``context_length_exceeded`` error past the context window. PDF ``file`` parts
(``file_data`` as a data URL, with a ``filename``) are read in user messages (32 MB,
100 pages; each page perceived like an image) and refused in any other role.

Example:
    >>> _error("bad", param="messages")["error"]["type"]
    'invalid_request_error'
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from visus import limits
from visus.errors import InvalidInputError, UndecodableError
from visus.reference.cache import OPENAI_MIN_TOKENS, OPENAI_STEP
from visus.reference.common import (
    Reject,
    Settings,
    answer,
    b64decode,
    check_image,
    now,
    prefix_blocks,
    read_json,
    spec_for,
)
from visus.reference.model import (
    NEUTRAL_ROLES,
    Conversation,
    InCall,
    InImage,
    InMessage,
    Reply,
    document_pages,
)

__all__ = [
    "bad_json",
    "chat_completions",
    "check_auth",
    "parse_file_data",
    "parse_image_url",
    "reject",
    "require_model",
    "response_id",
    "too_long",
    "tool_names",
]

_DATA_URL = re.compile(
    r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?:;[\w=.+-]+)*?;base64,(?P<data>.*)$", re.S
)
_FORMATS = frozenset({"png", "jpeg", "gif", "webp"})
_ROLES = ("system", "developer", "user", "assistant", "tool", "function")


def _error(message: str, *, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """OpenAI's error envelope."""
    kind = "invalid_request_error"
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def reject(message: str, *, param: str | None = None, code: str | None = None) -> Reject:
    """A 400 in OpenAI's envelope."""
    return Reject(400, _error(message, param=param, code=code))


def bad_json(message: str) -> Reject:
    """OpenAI's answer to a body that is not JSON."""
    return reject(
        "We could not parse the JSON body of your request. (HINT: This likely means you "
        "aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, "
        f"but what was sent was not valid JSON.) {message}"
    )


def too_long(tokens: int, window: int) -> Reject:
    """OpenAI's ``context_length_exceeded``."""
    return reject(
        f"This model's maximum context length is {window} tokens. However, your messages "
        f"resulted in {tokens} tokens. Please reduce the length of the messages.",
        param="messages",
        code="context_length_exceeded",
    )


def check_auth(request: Request) -> None:
    """OpenAI wants ``Authorization: Bearer <key>``; any non-empty key passes."""
    header = request.headers.get("authorization", "")
    if not header.startswith("Bearer ") or not header[7:].strip():
        raise Reject(
            401,
            _error(
                "You didn't provide an API key. You need to provide your API key in an "
                "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
            ),
        )


def parse_image_url(url: object, detail: object, where: str, param: str) -> InImage:
    """Decode one image URL (data URLs only: the reference server never fetches)."""
    if not isinstance(url, str) or not url:
        raise reject(
            "Invalid image URL: expected a non-empty string.", param=param, code="invalid_value"
        )
    match = _DATA_URL.match(url)
    if match is None:
        if url.startswith(("http://", "https://")):
            raise reject(f"Timeout while downloading {url}.", param=param, code="invalid_image_url")
        raise reject(
            "Invalid image URL: expected a data URL or an http(s) URL.",
            param=param,
            code="invalid_image_url",
        )
    try:
        data = b64decode(match.group("data"))
    except InvalidInputError as e:
        raise reject("Invalid base64 image_url.", param=param, code="invalid_image_url") from e
    if len(data) > limits.OPENAI_MAX_IMAGE_BYTES:
        raise reject(
            f"Image too large: {len(data)} bytes exceeds the limit of "
            f"{limits.OPENAI_MAX_IMAGE_BYTES} bytes.",
            param=param,
            code="image_too_large",
        )
    try:
        checked = check_image(data)
    except UndecodableError as e:
        checked = None
        cause: Exception | None = e
    else:
        cause = None
    if checked is None or checked.format not in _FORMATS:
        raise reject(
            "You uploaded an unsupported image. Please make sure your image has of one the "
            "following formats: ['png', 'jpeg', 'gif', 'webp'].",
            param=param,
            code="invalid_image_format",
        ) from cause
    return InImage(
        data=data,
        width=checked.width,
        height=checked.height,
        where=where,
        detail=detail if isinstance(detail, str) else "auto",
    )


def parse_file_data(
    file_data: object, filename: object, where: str, param: str
) -> tuple[InImage, ...]:
    """Decode an inline PDF file input (``file_data`` data URL) into its rendered pages."""
    if not isinstance(filename, str) or not filename:
        raise reject(
            f"Missing required parameter: '{param}.filename'.",
            param=f"{param}.filename",
            code="missing_required_parameter",
        )
    match = _DATA_URL.match(file_data) if isinstance(file_data, str) else None
    if match is None:
        raise reject(
            "Invalid file data: expected a base64-encoded data URL.",
            param=f"{param}.file_data",
            code="invalid_value",
        )
    if match.group("mime") != "application/pdf":
        raise reject(
            f"Invalid file data: unsupported MIME type '{match.group('mime')}'. "
            "Supported: 'application/pdf'.",
            param=f"{param}.file_data",
            code="invalid_value",
        )
    try:
        data = b64decode(match.group("data"))
    except InvalidInputError as e:
        raise reject("Invalid base64 file_data.", param=param, code="invalid_value") from e
    if len(data) > limits.OPENAI_MAX_PDF_BYTES:
        raise reject(
            f"File too large: {len(data)} bytes exceeds the limit of "
            f"{limits.OPENAI_MAX_PDF_BYTES} bytes.",
            param=param,
            code="file_too_large",
        )
    try:
        return document_pages(data, where, max_pages=limits.OPENAI_MAX_PDF_PAGES)
    except InvalidInputError as e:
        raise reject(
            f"Invalid file '{filename}': {e}", param=f"{param}.file_data", code="invalid_value"
        ) from e


def tool_names(body: dict[str, Any], *, nested: bool) -> tuple[tuple[str, ...], str]:
    """Names of the offered function tools (Chat nests them under ``function``).

    Built-in tools (web search and the like) have no name and are not callable here.
    """
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise reject(
            "Invalid type for 'tools': expected an array.", param="tools", code="invalid_type"
        )
    names: list[str] = []
    for i, tool in enumerate(tools):
        if isinstance(tool, dict) and tool.get("type", "function") != "function":
            continue
        fn = tool.get("function") if nested and isinstance(tool, dict) else tool
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise reject(
                f"Missing required parameter: 'tools[{i}].function.name'.",
                param=f"tools[{i}]",
                code="missing_required_parameter",
            )
        names.append(fn["name"])
    return tuple(names), json.dumps(tools) if tools else ""


def require_model(body: dict[str, Any]) -> str:
    """The request's ``model``, which OpenAI requires."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise reject("you must provide a model parameter")
    return model


# --- Chat Completions ---------------------------------------------------------------


def _chat_message(i: int, m: object, images_seen: int) -> InMessage:
    if not isinstance(m, dict):
        raise reject(
            f"Invalid type for 'messages[{i}]': expected an object.",
            param=f"messages[{i}]",
            code="invalid_type",
        )
    role = m.get("role")
    if role not in _ROLES:
        raise reject(
            f"Invalid value: '{role}'. Supported values are: 'system', 'assistant', 'user', "
            "'function', 'tool', and 'developer'.",
            param=f"messages[{i}].role",
            code="invalid_value",
        )
    content = m.get("content")
    texts: list[str] = []
    images: list[InImage] = []
    if isinstance(content, str):
        texts.append(content)
    elif isinstance(content, list):
        for j, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif kind == "image_url":
                if role != "user":
                    raise reject(
                        "Image URLs are only allowed for messages with role 'user', but this "
                        f"message with role '{role}' contains an image URL.",
                        param=f"messages.[{i}].content.[{j}].image_url",
                    )
                spec = part.get("image_url")
                url = spec.get("url") if isinstance(spec, dict) else spec
                detail = spec.get("detail", "auto") if isinstance(spec, dict) else "auto"
                where = f"messages[{i}] (user) part {j}"
                images.append(parse_image_url(url, detail, where, f"messages.[{i}].content.[{j}]"))
            elif kind == "file" and role == "user":
                spec = part.get("file")
                if not isinstance(spec, dict) or "file_data" not in spec:
                    raise reject(
                        f"Missing required parameter: 'messages[{i}].content[{j}].file.file_data'"
                        " (the reference server has no file storage for file_id).",
                        param=f"messages[{i}].content[{j}].file",
                        code="missing_required_parameter",
                    )
                where = f"messages[{i}] (user) part {j}"
                images.extend(
                    parse_file_data(
                        spec.get("file_data"),
                        spec.get("filename"),
                        where,
                        f"messages[{i}].content[{j}].file",
                    )
                )
            elif kind in {"file", "input_audio"} and role != "user":
                raise reject(
                    f"Invalid value: '{kind}'. Supported values are: 'text'"
                    + (" and 'refusal'." if role == "assistant" else "."),
                    param=f"messages[{i}].content[{j}].type",
                    code="invalid_value",
                )
            elif kind in {"input_audio", "refusal"}:
                continue  # accepted by the service; the reference model does not read them
            else:
                raise reject(
                    f"Invalid value: '{kind}'. Supported values are: 'text', 'image_url', "
                    "'input_audio', 'refusal', and 'file'.",
                    param=f"messages[{i}].content[{j}].type",
                    code="invalid_value",
                )
    elif content is not None:
        raise reject(
            f"Invalid type for 'messages[{i}].content'.",
            param=f"messages[{i}].content",
            code="invalid_type",
        )
    elif role != "assistant":
        raise reject(
            f"Missing required parameter: 'messages[{i}].content'.",
            param=f"messages[{i}].content",
            code="missing_required_parameter",
        )
    if images_seen + len(images) > limits.OPENAI_MAX_IMAGES:
        raise reject(
            f"Too many images in request. Max is {limits.OPENAI_MAX_IMAGES}.",
            param="messages",
            code="too_many_images",
        )
    calls: list[InCall] = []
    for k, call in enumerate(m.get("tool_calls") or []):
        fn = call.get("function") if isinstance(call, dict) else None
        if role != "assistant" or not isinstance(fn, dict) or not call.get("id"):
            raise reject(
                f"Invalid 'messages[{i}].tool_calls[{k}]'.",
                param=f"messages[{i}].tool_calls[{k}]",
                code="invalid_value",
            )
        calls.append(
            InCall(
                id=str(call["id"]),
                name=str(fn.get("name", "")),
                arguments=str(fn.get("arguments", "{}")),
            )
        )
    if role == "tool":
        call_id = m.get("tool_call_id")
        if not isinstance(call_id, str):
            raise reject(
                f"Missing required parameter: 'messages[{i}].tool_call_id'.",
                param=f"messages[{i}].tool_call_id",
                code="missing_required_parameter",
            )
        return InMessage(role="tool", texts=tuple(texts), tool_call_id=call_id)
    return InMessage(
        role=NEUTRAL_ROLES[role], texts=tuple(texts), images=tuple(images), tool_calls=tuple(calls)
    )


def _check_tool_order(raw: list[Any], parsed: list[InMessage]) -> None:
    """Tool messages must directly follow the assistant message holding their calls."""
    pending: dict[str, None] = {}
    owner = -1
    for i, m in enumerate(parsed):
        if m.role == "tool" and raw[i].get("role") == "tool":
            prev = parsed[i - 1] if i else None
            in_run = prev is not None and (prev.tool_calls or prev.role == "tool") and owner >= 0
            if not in_run:
                raise reject(
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    "preceeding message with 'tool_calls'.",
                    param=f"messages.[{i}].role",
                )
            if m.tool_call_id not in pending:
                raise reject(
                    f"Invalid parameter: 'tool_call_id' of '{m.tool_call_id}' not found in "
                    "'tool_calls' of previous message.",
                    param=f"messages.[{i}].tool_call_id",
                )
            pending.pop(m.tool_call_id)
            continue
        if pending:
            break
        owner = i if m.tool_calls else -1
        pending = dict.fromkeys(c.id for c in m.tool_calls)
    if pending:
        raise reject(
            "An assistant message with 'tool_calls' must be followed by tool messages "
            "responding to each 'tool_call_id'. The following tool_call_ids did not have "
            f"response messages: {', '.join(pending)}",
            param=f"messages.[{owner}].role",
        )


def _chat_conversation(body: dict[str, Any]) -> Conversation:
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise reject("[] is too short - 'messages'", param="messages", code="empty_array")
    parsed: list[InMessage] = []
    images = 0
    for i, m in enumerate(raw):
        parsed.append(_chat_message(i, m, images))
        images += len(parsed[-1].images)
    _check_tool_order(raw, parsed)
    names, tool_text = tool_names(body, nested=True)
    return Conversation(messages=tuple(parsed), tools=names, tool_text=tool_text)


def response_id(prefix: str, body: dict[str, Any]) -> str:
    """A deterministic id: the same request always gets the same one."""
    return prefix + hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:24]


def _chat_calls(reply: Reply) -> list[dict[str, Any]]:
    return [
        {
            "id": c.id,
            "type": "function",
            "function": {"name": c.name, "arguments": json.dumps(dict(c.arguments))},
        }
        for c in reply.tool_calls
    ]


def _chat_usage(reply: Reply, cached: int = 0) -> dict[str, Any]:
    return {
        "prompt_tokens": reply.input_tokens,
        "completion_tokens": reply.output_tokens,
        "total_tokens": reply.input_tokens + reply.output_tokens,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def cached_tokens(
    settings: Settings, body: dict[str, Any], head: dict[str, object], items: object, total: int
) -> int:
    """OpenAI's automatic prompt caching: prompts of 1024 tokens and more, hits in steps
    of 128 tokens, per model and ``prompt_cache_key``."""
    model = str(body.get("model"))
    scope = f"openai:{model}:{body.get('prompt_cache_key') or ''}"
    blocks = prefix_blocks(head, items, spec_for("openai", model))
    use = settings.cache.automatic(
        scope, blocks, total=total, min_tokens=OPENAI_MIN_TOKENS, step=OPENAI_STEP
    )
    return use.read


def _finish(reply: Reply) -> str:
    if reply.truncated:
        return "length"
    return "tool_calls" if reply.tool_calls else "stop"


def _chat_stream(reply: Reply, rid: str, model: str, usage: bool, cached: int = 0) -> Iterator[str]:
    base = {"id": rid, "object": "chat.completion.chunk", "created": now(), "model": model}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        return "data: " + json.dumps({**base, "choices": [choice]}) + "\n\n"

    yield chunk({"role": "assistant", "content": ""})
    for k in range(0, len(reply.text), 64):
        yield chunk({"content": reply.text[k : k + 64]})
    for n, call in enumerate(_chat_calls(reply)):
        args = call["function"]["arguments"]
        yield chunk(
            {
                "tool_calls": [
                    {
                        "index": n,
                        "id": call["id"],
                        "type": "function",
                        "function": {"name": call["function"]["name"], "arguments": ""},
                    }
                ]
            }
        )
        for k in range(0, len(args), 32):
            yield chunk({"tool_calls": [{"index": n, "function": {"arguments": args[k : k + 32]}}]})
    yield chunk({}, _finish(reply))
    if usage:
        usage_chunk = {**base, "choices": [], "usage": _chat_usage(reply, cached)}
        yield "data: " + json.dumps(usage_chunk) + "\n\n"
    yield "data: [DONE]\n\n"


async def chat_completions(request: Request, settings: Settings) -> Response:
    """``POST /v1/chat/completions``."""
    check_auth(request)
    body = await read_json(request, bad_json)
    model = require_model(body)
    conv = _chat_conversation(body)
    cap = body.get("max_completion_tokens", body.get("max_tokens"))
    reply = await answer(
        conv, wire="openai", model=model, settings=settings, too_long=too_long, cap=cap
    )
    rid = response_id("chatcmpl-", body)
    head = {"tools": body.get("tools")}
    cached = cached_tokens(settings, body, head, body.get("messages"), reply.input_tokens)
    if body.get("stream"):
        opts = body.get("stream_options") or {}
        usage = bool(isinstance(opts, dict) and opts.get("include_usage"))
        return StreamingResponse(
            _chat_stream(reply, rid, model, usage, cached), media_type="text/event-stream"
        )
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None, "refusal": None}
    if reply.tool_calls:
        message["tool_calls"] = _chat_calls(reply)
    return JSONResponse(
        {
            "id": rid,
            "object": "chat.completion",
            "created": now(),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": _finish(reply),
                }
            ],
            "usage": _chat_usage(reply, cached),
        }
    )
