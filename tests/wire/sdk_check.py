"""Validate lowered bodies against the official SDKs' own request types.

OpenAI and Anthropic describe requests as TypedDicts; pydantic validates fields
typed ``Iterable[...]`` lazily (an image inside a tool message passes until the
iterator is consumed), so :func:`materialise` walks the validated result and turns
every iterator into a list, which runs the deferred validation. Extra keys are
forbidden so a misspelt field fails too, and the materialised result must equal the
body (nothing coerced away).
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any

from pydantic import ConfigDict, TypeAdapter


def materialise(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: materialise(v) for k, v in value.items()}
    if isinstance(value, str | bytes):
        return value
    if isinstance(value, Iterable):
        return [materialise(v) for v in value]
    return value


_FORBID = ConfigDict(extra="forbid")


@cache
def _adapter(kind: str) -> TypeAdapter[Any]:
    if kind == "openai-chat":
        from openai.types.chat.completion_create_params import (
            CompletionCreateParamsNonStreaming,
        )

        return TypeAdapter(list[CompletionCreateParamsNonStreaming], config=_FORBID)
    if kind == "openai-chat-messages":
        from openai.types.chat import ChatCompletionMessageParam

        return TypeAdapter(list[list[ChatCompletionMessageParam]], config=_FORBID)
    if kind == "openai-responses":
        from openai.types.responses.response_create_params import (
            ResponseCreateParamsNonStreaming,
        )

        return TypeAdapter(list[ResponseCreateParamsNonStreaming], config=_FORBID)
    if kind == "openai-responses-input":
        from openai.types.responses import ResponseInputParam

        return TypeAdapter(list[ResponseInputParam], config=_FORBID)
    if kind == "anthropic":
        from anthropic.types.message_create_params import MessageCreateParamsNonStreaming

        return TypeAdapter(list[MessageCreateParamsNonStreaming], config=_FORBID)
    if kind == "anthropic-messages":
        from anthropic.types import MessageParam

        return TypeAdapter(list[list[MessageParam]], config=_FORBID)
    raise KeyError(kind)


def validate_typed(kind: str, value: Any, *, lazy: bool = False) -> Any:
    """Validate ``value`` as the SDK type named by ``kind``; raises ValidationError."""
    validated = _adapter(kind).validate_python([value])[0]
    if lazy:
        return validated
    out = materialise(validated)
    assert out == materialise(value), "the SDK type changed the payload"
    return out


def check_openai_chat(body: dict[str, Any]) -> None:
    validate_typed("openai-chat", body)
    validate_typed("openai-chat-messages", body["messages"])


def check_openai_responses(body: dict[str, Any]) -> None:
    validate_typed("openai-responses", body)
    validate_typed("openai-responses-input", body["input"])


def check_anthropic(body: dict[str, Any]) -> None:
    validate_typed("anthropic", body)
    validate_typed("anthropic-messages", body["messages"])


def check_gemini(body: dict[str, Any]) -> None:
    from google.genai import types

    allowed = {"contents", "systemInstruction", "tools"}
    assert set(body) <= allowed, set(body) - allowed
    for content in body["contents"]:
        # JSON mode: the SDK decodes base64 ``data`` into bytes (val_json_bytes).
        parsed = types.Content.model_validate_json(json.dumps(content))
        assert parsed.role in {"user", "model"}
        assert parsed.parts, "empty parts"
        for raw, part in zip(content["parts"], parsed.parts, strict=True):
            if "inlineData" in raw:
                assert part.inline_data is not None
                assert part.inline_data.data == base64.b64decode(raw["inlineData"]["data"])
            if "functionResponse" in raw:
                fr = part.function_response
                assert fr is not None
                for raw_p, p in zip(
                    raw["functionResponse"].get("parts", []), fr.parts or [], strict=True
                ):
                    assert p.inline_data is not None
                    assert p.inline_data.data == base64.b64decode(raw_p["inlineData"]["data"])
    if "systemInstruction" in body:
        types.Content.model_validate_json(json.dumps(body["systemInstruction"]))
    for tool in body.get("tools", []):
        types.Tool.model_validate_json(json.dumps(tool))


def check_ollama(body: dict[str, Any]) -> None:
    from ollama import Image, Message, Tool

    allowed = {"model", "messages", "tools", "stream"}
    assert set(body) <= allowed, set(body) - allowed
    assert body["stream"] is False
    for raw in body["messages"]:
        # Mirror the SDK's own conversion (ollama._client._copy_messages).
        m = dict(raw)
        if "images" in m:
            m["images"] = [Image(value=x) for x in m["images"]]
        message = Message.model_validate(m)
        dumped = message.model_dump(exclude_none=True)  # runs the base64 check
        assert dumped.get("images", []) == raw.get("images", [])
    for tool in body.get("tools", []):
        Tool.model_validate(tool)


@cache
def _converse_shape() -> Any:
    import boto3

    client = boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",  # dummy: creating the client makes no call
    )
    return client.meta.service_model.operation_model("Converse").input_shape


def _decode_bytes(value: Any) -> Any:
    if isinstance(value, dict):
        out = {k: _decode_bytes(v) for k, v in value.items()}
        if "bytes" in out and isinstance(out["bytes"], str):
            out["bytes"] = base64.b64decode(out["bytes"], validate=True)
        if isinstance(out.get("redactedContent"), str):  # Claude's redacted thinking
            out["redactedContent"] = base64.b64decode(out["redactedContent"], validate=True)
        return out
    if isinstance(value, list):
        return [_decode_bytes(v) for v in value]
    return value


def check_bedrock(body: dict[str, Any], model_id: str = "anthropic.claude-test") -> None:
    from botocore.validate import ParamValidator

    params = _decode_bytes(copy.deepcopy(body))
    params["modelId"] = model_id
    report = ParamValidator().validate(params, _converse_shape())
    if report.has_errors():
        raise AssertionError(report.generate_report())


CHECKS = {
    "anthropic": check_anthropic,
    "openai-chat": check_openai_chat,
    "openai-responses": check_openai_responses,
    "gemini": check_gemini,
    "ollama": check_ollama,
    "bedrock": check_bedrock,
}
