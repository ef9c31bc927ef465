"""OpenAI wires: Chat Completions (streaming and not) and Responses.

As strict as the real service where it matters to visus: images only in user
messages (the exact 400 OpenAI gives for an image in a tool message), tool
messages directly after the assistant message holding their calls, data-URL
images that decode, at most 20 MB each and 500 per request, and the
``context_length_exceeded`` error past the context window.

Example:
    >>> _error(400, "bad", param="messages")["error"]["type"]
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
from visus.reference.common import Reject, Settings, answer, b64decode, check_image, now, read_json
from visus.reference.model import NEUTRAL_ROLES, Conversation, InCall, InImage, InMessage, Reply

__all__ = ["chat_completions", "responses"]

_DATA_URL = re.compile(
    r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?:;[\w=.+-]+)*?;base64,(?P<data>.*)$", re.S
)
_FORMATS = frozenset({"png", "jpeg", "gif", "webp"})
_ROLES = ("system", "developer", "user", "assistant", "tool", "function")


def _error(
    status: int,
    message: str,
    *,
    param: str | None = None,
    code: str | None = None,
    kind: str = "invalid_request_error",
) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _reject(message: str, *, param: str | None = None, code: str | None = None) -> Reject:
    return Reject(400, _error(400, message, param=param, code=code))


def _bad_json(message: str) -> Reject:
    return _reject(
        "We could not parse the JSON body of your request. (HINT: This likely means you "
        "aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, "
        f"but what was sent was not valid JSON.) {message}"
    )


def _too_long(tokens: int, window: int) -> Reject:
    return _reject(
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
                401,
                "You didn't provide an API key. You need to provide your API key in an "
                "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
            ),
        )


def _image(url: object, detail: object, where: str, param: str) -> InImage:
    """Decode one image URL (data URLs only: the reference server never fetches)."""
    if not isinstance(url, str) or not url:
        raise _reject(
            "Invalid image URL: expected a non-empty string.", param=param, code="invalid_value"
        )
    match = _DATA_URL.match(url)
    if match is None:
        if url.startswith(("http://", "https://")):
            raise _reject(
                f"Timeout while downloading {url}.", param=param, code="invalid_image_url"
            )
        raise _reject(
            "Invalid image URL: expected a data URL or an http(s) URL.",
            param=param,
            code="invalid_image_url",
        )
    try:
        data = b64decode(match.group("data"))
    except InvalidInputError as e:
        raise _reject("Invalid base64 image_url.", param=param, code="invalid_image_url") from e
    if len(data) > limits.REFERENCE_OPENAI_MAX_IMAGE_BYTES:
        raise _reject(
            f"Image too large: {len(data)} bytes exceeds the limit of "
            f"{limits.REFERENCE_OPENAI_MAX_IMAGE_BYTES} bytes.",
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
        raise _reject(
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


def _tools(body: dict[str, Any], *, nested: bool) -> tuple[tuple[str, ...], str]:
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise _reject(
            "Invalid type for 'tools': expected an array.", param="tools", code="invalid_type"
        )
    names: list[str] = []
    for i, tool in enumerate(tools):
        fn = tool.get("function") if nested and isinstance(tool, dict) else tool
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise _reject(
                f"Missing required parameter: 'tools[{i}].function.name'.",
                param=f"tools[{i}]",
                code="missing_required_parameter",
            )
        names.append(fn["name"])
    return tuple(names), json.dumps(tools) if tools else ""


def _model(body: dict[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _reject("you must provide a model parameter")
    return model


# --- Chat Completions ---------------------------------------------------------------


def _chat_message(i: int, m: object, images_seen: int) -> InMessage:
    if not isinstance(m, dict):
        raise _reject(
            f"Invalid type for 'messages[{i}]': expected an object.",
            param=f"messages[{i}]",
            code="invalid_type",
        )
    role = m.get("role")
    if role not in _ROLES:
        raise _reject(
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
                    raise _reject(
                        "Image URLs are only allowed for messages with role 'user', but this "
                        f"message with role '{role}' contains an image URL.",
                        param=f"messages.[{i}].content.[{j}].image_url",
                    )
                spec = part.get("image_url")
                url = spec.get("url") if isinstance(spec, dict) else spec
                detail = spec.get("detail", "auto") if isinstance(spec, dict) else "auto"
                where = f"messages[{i}] (user) part {j}"
                images.append(_image(url, detail, where, f"messages.[{i}].content.[{j}]"))
            elif kind in {"input_audio", "file", "refusal"}:
                continue  # accepted by the service; the reference model does not read them
            else:
                raise _reject(
                    f"Invalid value: '{kind}'. Supported values are: 'text', 'image_url', "
                    "'input_audio', 'refusal', and 'file'.",
                    param=f"messages[{i}].content[{j}].type",
                    code="invalid_value",
                )
    elif content is not None:
        raise _reject(
            f"Invalid type for 'messages[{i}].content'.",
            param=f"messages[{i}].content",
            code="invalid_type",
        )
    elif role != "assistant":
        raise _reject(
            f"Missing required parameter: 'messages[{i}].content'.",
            param=f"messages[{i}].content",
            code="missing_required_parameter",
        )
    if images_seen + len(images) > limits.REFERENCE_OPENAI_MAX_IMAGES:
        raise _reject(
            f"Too many images in request. Max is {limits.REFERENCE_OPENAI_MAX_IMAGES}.",
            param="messages",
            code="too_many_images",
        )
    calls: list[InCall] = []
    for k, call in enumerate(m.get("tool_calls") or []):
        fn = call.get("function") if isinstance(call, dict) else None
        if role != "assistant" or not isinstance(fn, dict) or not call.get("id"):
            raise _reject(
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
            raise _reject(
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
                raise _reject(
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    "preceeding message with 'tool_calls'.",
                    param=f"messages.[{i}].role",
                )
            if m.tool_call_id not in pending:
                raise _reject(
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
        raise _reject(
            "An assistant message with 'tool_calls' must be followed by tool messages "
            "responding to each 'tool_call_id'. The following tool_call_ids did not have "
            f"response messages: {', '.join(pending)}",
            param=f"messages.[{owner}].role",
        )


def _chat_conversation(body: dict[str, Any]) -> Conversation:
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise _reject("[] is too short - 'messages'", param="messages", code="empty_array")
    parsed: list[InMessage] = []
    images = 0
    for i, m in enumerate(raw):
        parsed.append(_chat_message(i, m, images))
        images += len(parsed[-1].images)
    _check_tool_order(raw, parsed)
    names, tool_text = _tools(body, nested=True)
    return Conversation(messages=tuple(parsed), tools=names, tool_text=tool_text)


def _rid(prefix: str, body: dict[str, Any]) -> str:
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


def _chat_usage(reply: Reply) -> dict[str, Any]:
    return {
        "prompt_tokens": reply.input_tokens,
        "completion_tokens": reply.output_tokens,
        "total_tokens": reply.input_tokens + reply.output_tokens,
    }


def _chat_stream(reply: Reply, rid: str, model: str, usage: bool) -> Iterator[str]:
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
    yield chunk({}, "tool_calls" if reply.tool_calls else "stop")
    if usage:
        yield "data: " + json.dumps({**base, "choices": [], "usage": _chat_usage(reply)}) + "\n\n"
    yield "data: [DONE]\n\n"


async def chat_completions(request: Request, settings: Settings) -> Response:
    """``POST /v1/chat/completions``."""
    check_auth(request)
    body = await read_json(request, _bad_json)
    model = _model(body)
    conv = _chat_conversation(body)
    reply = await answer(conv, wire="openai", model=model, settings=settings, too_long=_too_long)
    rid = _rid("chatcmpl-", body)
    if body.get("stream"):
        opts = body.get("stream_options") or {}
        usage = bool(isinstance(opts, dict) and opts.get("include_usage"))
        return StreamingResponse(
            _chat_stream(reply, rid, model, usage), media_type="text/event-stream"
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
                    "finish_reason": "tool_calls" if reply.tool_calls else "stop",
                }
            ],
            "usage": _chat_usage(reply),
        }
    )


# --- Responses -------------------------------------------------------------------------


def _responses_content(
    i: int,
    role: str,
    content: object,
    images_seen: int,
) -> tuple[list[str], list[InImage]]:
    texts: list[str] = []
    images: list[InImage] = []
    if isinstance(content, str):
        return [content], []
    if not isinstance(content, list):
        raise _reject(
            f"Invalid type for 'input[{i}].content'.",
            param=f"input[{i}].content",
            code="invalid_type",
        )
    allowed = (
        {"output_text", "refusal"}
        if role == "assistant"
        else {"input_text", "input_image", "input_file"}
    )
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in allowed or (kind == "input_image" and role not in {"user", "tool"}):
            raise _reject(
                f"Invalid value: '{kind}'. Supported values are: "
                + " and ".join(
                    f"'{a}'"
                    for a in sorted(
                        allowed - {"input_image"} if role not in {"user", "tool"} else allowed
                    )
                )
                + ".",
                param=f"input[{i}].content[{j}]",
                code="invalid_value",
            )
        if kind in {"input_text", "output_text"} and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "input_image":
            if images_seen + len(images) >= limits.REFERENCE_OPENAI_MAX_IMAGES:
                raise _reject(
                    f"Too many images in request. Max is {limits.REFERENCE_OPENAI_MAX_IMAGES}.",
                    param="input",
                    code="too_many_images",
                )
            where = f"input[{i}] ({role}) part {j}"
            images.append(
                _image(
                    part.get("image_url"),
                    part.get("detail", "auto"),
                    where,
                    f"input[{i}].content[{j}].image_url",
                )
            )
    return texts, images


def _responses_conversation(body: dict[str, Any]) -> Conversation:
    items = body.get("input")
    messages: list[InMessage] = []
    if isinstance(body.get("instructions"), str):
        messages.append(InMessage(role="system", texts=(body["instructions"],)))
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise _reject(
            "Missing required parameter: 'input'.", param="input", code="missing_required_parameter"
        )
    calls_seen: set[str] = set()
    outputs: set[str] = set()
    images = 0
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise _reject(
                f"Invalid type for 'input[{i}]'.", param=f"input[{i}]", code="invalid_type"
            )
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in {"user", "assistant", "system", "developer"}:
                raise _reject(
                    f"Invalid value: '{role}'. Supported values are: 'assistant', "
                    "'system', 'developer', and 'user'.",
                    param=f"input[{i}].role",
                    code="invalid_value",
                )
            texts, imgs = _responses_content(i, role, item.get("content"), images)
            images += len(imgs)
            messages.append(
                InMessage(role=NEUTRAL_ROLES[role], texts=tuple(texts), images=tuple(imgs))
            )
        elif kind == "function_call":
            call = InCall(
                id=str(item.get("call_id", "")),
                name=str(item.get("name", "")),
                arguments=str(item.get("arguments", "{}")),
            )
            calls_seen.add(call.id)
            last = messages[-1] if messages else None
            if last is not None and last.role == "assistant":
                messages[-1] = InMessage(
                    role="assistant", texts=last.texts, tool_calls=(*last.tool_calls, call)
                )
            else:
                messages.append(InMessage(role="assistant", tool_calls=(call,)))
        elif kind == "function_call_output":
            call_id = str(item.get("call_id", ""))
            if call_id not in calls_seen:
                raise _reject(
                    f"No tool call found for function call output with call_id {call_id}.",
                    param="input",
                )
            outputs.add(call_id)
            output = item.get("output")
            texts, imgs = _responses_content(i, "tool", output, images)
            images += len(imgs)
            messages.append(
                InMessage(role="tool", texts=tuple(texts), images=tuple(imgs), tool_call_id=call_id)
            )
        elif kind in {"reasoning", "item_reference"}:
            continue
        else:
            raise _reject(
                f"Invalid value: '{kind}'.", param=f"input[{i}].type", code="invalid_value"
            )
    missing = sorted(calls_seen - outputs)
    if missing:
        raise _reject(f"No tool output found for function call {missing[0]}.", param="input")
    names, tool_text = _tools(body, nested=False)
    return Conversation(messages=tuple(messages), tools=names, tool_text=tool_text)


def _responses_body(reply: Reply, rid: str, model: str) -> dict[str, Any]:
    output: list[dict[str, Any]] = []
    if reply.text:
        output.append(
            {
                "type": "message",
                "id": "msg_" + rid[5:],
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
            }
        )
    for c in reply.tool_calls:
        output.append(
            {
                "type": "function_call",
                "id": "fc_" + c.id[5:],
                "call_id": c.id,
                "name": c.name,
                "arguments": json.dumps(dict(c.arguments)),
                "status": "completed",
            }
        )
    return {
        "id": rid,
        "object": "response",
        "created_at": now(),
        "status": "completed",
        "model": model,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "error": None,
        "incomplete_details": None,
        "usage": {
            "input_tokens": reply.input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": reply.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": reply.input_tokens + reply.output_tokens,
        },
    }


def _responses_stream(done: dict[str, Any]) -> Iterator[str]:
    seq = 0

    def event(kind: str, **data: Any) -> str:
        nonlocal seq
        seq += 1
        payload = {"type": kind, "sequence_number": seq, **data}
        return f"event: {kind}\ndata: {json.dumps(payload)}\n\n"

    yield event(
        "response.created", response={**done, "status": "in_progress", "output": [], "usage": None}
    )
    for n, item in enumerate(done["output"]):
        if item["type"] == "message":
            text = item["content"][0]["text"]
            yield event(
                "response.output_item.added",
                output_index=n,
                item={**item, "status": "in_progress", "content": []},
            )
            yield event(
                "response.content_part.added",
                item_id=item["id"],
                output_index=n,
                content_index=0,
                part={"type": "output_text", "text": "", "annotations": []},
            )
            for k in range(0, len(text), 64):
                yield event(
                    "response.output_text.delta",
                    item_id=item["id"],
                    output_index=n,
                    content_index=0,
                    delta=text[k : k + 64],
                    logprobs=[],
                )
            yield event(
                "response.output_text.done",
                item_id=item["id"],
                output_index=n,
                content_index=0,
                text=text,
                logprobs=[],
            )
            yield event(
                "response.content_part.done",
                item_id=item["id"],
                output_index=n,
                content_index=0,
                part=item["content"][0],
            )
        else:
            yield event(
                "response.output_item.added",
                output_index=n,
                item={**item, "status": "in_progress", "arguments": ""},
            )
            yield event(
                "response.function_call_arguments.delta",
                item_id=item["id"],
                output_index=n,
                delta=item["arguments"],
            )
            yield event(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=n,
                arguments=item["arguments"],
                name=item["name"],
            )
        yield event("response.output_item.done", output_index=n, item=item)
    yield event("response.completed", response=done)


async def responses(request: Request, settings: Settings) -> Response:
    """``POST /v1/responses``."""
    check_auth(request)
    body = await read_json(request, _bad_json)
    model = _model(body)
    conv = _responses_conversation(body)
    reply = await answer(conv, wire="openai", model=model, settings=settings, too_long=_too_long)
    done = _responses_body(reply, _rid("resp_", body), model)
    if body.get("stream"):
        return StreamingResponse(_responses_stream(done), media_type="text/event-stream")
    return JSONResponse(done)
