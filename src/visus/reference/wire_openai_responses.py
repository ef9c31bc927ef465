"""OpenAI Responses wire: ``POST /v1/responses``, streaming (SSE events) and not.

Images (``input_image``) and PDFs (``input_file`` with ``file_data`` and a
``filename``; 32 MB, 100 pages, each page perceived like an image) are taken in
user messages and inside ``function_call_output.output``; every ``function_call_output`` needs its
``function_call`` and every call its output, as the service requires.

Example:
    >>> from visus.reference.model import Reply
    >>> _responses_body(Reply(text="hi"), "resp_1", "gpt-4.1")["output"][0]["type"]
    'message'
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from visus import limits
from visus.reference import wire_openai_reasoning as reasoning
from visus.reference.common import Reject, Settings, answer, now, read_json, spec_for
from visus.reference.model import NEUTRAL_ROLES, Conversation, InCall, InImage, InMessage, Reply
from visus.reference.wire_openai import (
    bad_json,
    cached_tokens,
    check_auth,
    parse_file_data,
    parse_image_url,
    reject,
    require_model,
    response_id,
    too_long,
    tool_names,
)

__all__ = ["responses"]


def _refuse(message: str, param: str) -> Reject:
    return reject(message, param=param)


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
        raise reject(
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
        media = {"input_image", "input_file"}
        if kind not in allowed or (kind in media and role not in {"user", "tool"}):
            raise reject(
                f"Invalid value: '{kind}'. Supported values are: "
                + " and ".join(
                    f"'{a}'"
                    for a in sorted(allowed - media if role not in {"user", "tool"} else allowed)
                )
                + ".",
                param=f"input[{i}].content[{j}]",
                code="invalid_value",
            )
        if kind in {"input_text", "output_text"} and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "input_image":
            if images_seen + len(images) >= limits.OPENAI_MAX_IMAGES:
                raise reject(
                    f"Too many images in request. Max is {limits.OPENAI_MAX_IMAGES}.",
                    param="input",
                    code="too_many_images",
                )
            where = f"input[{i}] ({role}) part {j}"
            images.append(
                parse_image_url(
                    part.get("image_url"),
                    part.get("detail", "auto"),
                    where,
                    f"input[{i}].content[{j}].image_url",
                )
            )
        elif kind == "input_file":
            if "file_data" not in part:
                raise reject(
                    f"Missing required parameter: 'input[{i}].content[{j}].file_data' "
                    "(the reference server has no file storage for file_id or file_url).",
                    param=f"input[{i}].content[{j}]",
                    code="missing_required_parameter",
                )
            where = f"input[{i}] ({role}) part {j}"
            images.extend(
                parse_file_data(
                    part.get("file_data"),
                    part.get("filename"),
                    where,
                    f"input[{i}].content[{j}]",
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
        raise reject(
            "Missing required parameter: 'input'.", param="input", code="missing_required_parameter"
        )
    calls_seen: set[str] = set()
    outputs: set[str] = set()
    images = 0
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise reject(
                f"Invalid type for 'input[{i}]'.", param=f"input[{i}]", code="invalid_type"
            )
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in {"user", "assistant", "system", "developer"}:
                raise reject(
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
                raise reject(
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
            raise reject(
                f"Invalid value: '{kind}'.", param=f"input[{i}].type", code="invalid_value"
            )
    missing = sorted(calls_seen - outputs)
    if missing:
        raise reject(f"No tool output found for function call {missing[0]}.", param="input")
    names, tool_text = tool_names(body, nested=False)
    return Conversation(messages=tuple(messages), tools=names, tool_text=tool_text)


def _responses_body(
    reply: Reply,
    rid: str,
    model: str,
    cached: int = 0,
    reasoning: tuple[dict[str, Any] | None, int] = (None, 0),
) -> dict[str, Any]:
    item, spent = reasoning
    output: list[dict[str, Any]] = [item] if item is not None else []
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
    for k, c in enumerate(reply.tool_calls):
        # An item id of this reply's own when it reasoned (the API's are unique; the
        # call_id, derived from the request, may repeat across conversations).
        own = "fc_" + c.id[5:] if item is None else f"fc_{item['id'][3:]}{k}"
        output.append(
            {
                "type": "function_call",
                "id": own,
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
        # Cut off at the cap: status incomplete, the reason in incomplete_details.
        "status": "incomplete" if reply.truncated else "completed",
        "model": model,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if reply.truncated else None,
        "usage": {
            "input_tokens": reply.input_tokens,
            "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": reply.output_tokens,
            "output_tokens_details": {"reasoning_tokens": spent},
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
        if item["type"] == "reasoning":
            yield event("response.output_item.added", output_index=n, item=item)
        elif item["type"] == "message":
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
    final = "response.incomplete" if done["status"] == "incomplete" else "response.completed"
    yield event(final, response=done)


async def responses(request: Request, settings: Settings) -> Response:
    """``POST /v1/responses``."""
    check_auth(request)
    body = await read_json(request, bad_json)
    model = require_model(body)
    conv = _responses_conversation(body)
    spec = spec_for("openai", model)
    bound, items = reasoning.reasoning_items(body, _refuse)
    reasoning.require_pairs(body, _refuse)
    verdict = reasoning.check(bound, items, spec, _refuse)
    cap = body.get("max_output_tokens")
    reply = await answer(
        conv, wire="openai", model=model, settings=settings, too_long=too_long, cap=cap
    )
    item, spent = reasoning.output_item(body, spec, verdict, bound, items)
    # Kept reasoning is billed as input; this reply's reasoning is output.
    reply = dataclasses.replace(
        reply,
        input_tokens=reply.input_tokens + verdict.kept_tokens,
        output_tokens=reply.output_tokens + spent,
    )
    head = {"instructions": body.get("instructions"), "tools": body.get("tools")}
    cached = cached_tokens(settings, body, head, body.get("input"), reply.input_tokens)
    done = _responses_body(reply, response_id("resp_", body), model, cached, (item, spent))
    reasoning.pair_calls(done["output"])
    if body.get("stream"):
        return StreamingResponse(_responses_stream(done), media_type="text/event-stream")
    return JSONResponse(done)
