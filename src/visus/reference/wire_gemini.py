"""Gemini wire: ``POST /v1beta/models/{model}:generateContent`` and ``:streamGenerateContent``.

Strict like the service: images (``inlineData``) only in user turns, image MIME types
Gemini takes, base64 that decodes to an image, 20 MB of inline data per request,
function responses right after the turn that made the calls (one for each), image
parts inside ``functionResponse.parts`` only for models that take them (Gemini 3,
and the reference model itself, per the catalog), and
INVALID_ARGUMENT past the context window. ``application/pdf`` inline data is a
document (1000 pages at most; its bytes count against the inline budget) that goes
wherever images may, each page perceived like an image. Thought signatures, as
Gemini 3 has them: the first ``functionCall`` part of each reply to a Gemini 3 (or
later: 3.5, 4) model carries a ``thoughtSignature``, and a later request must send it back on that
call while it is in the current turn (else the 400 Gemini gives); a signature that
does not match its call is refused as corrupted. REST field names are camelCase; the
snake_case spellings the API also accepts are read too.

Example:
    >>> _error(400, "x")["error"]["status"]
    'INVALID_ARGUMENT'
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Iterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from visus import limits
from visus.errors import InvalidInputError, UndecodableError, VisusError
from visus.models import get_model
from visus.reference.common import (
    Reject,
    Settings,
    answer,
    b64decode,
    check_image,
    prefix_blocks,
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

__all__ = ["generate"]

_STATUS = {400: "INVALID_ARGUMENT", 403: "PERMISSION_DENIED", 404: "NOT_FOUND"}
_IMAGE_TYPES = {
    "image/png": "png",
    "image/jpeg": "jpeg",
    "image/webp": "webp",
    "image/heic": "heif",
    "image/heif": "heif",
}


def _error(code: int, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": _STATUS.get(code, "UNKNOWN")}}


def _reject(message: str, code: int = 400) -> Reject:
    return Reject(code, _error(code, message))


def _too_long(tokens: int, window: int) -> Reject:
    return _reject(
        f"The input token count ({tokens}) exceeds the maximum number of tokens allowed ({window})."
    )


def _get(d: dict[str, Any], camel: str, snake: str) -> Any:
    return d[camel] if camel in d else d.get(snake)


def _check_auth(request: Request) -> None:
    if (
        not request.headers.get("x-goog-api-key", "").strip()
        and not request.query_params.get("key", "").strip()
    ):
        raise _reject(
            "Method doesn't allow unregistered callers (callers without established "
            "identity). Please use API Key or other form of API consumer identity "
            "to call this API.",
            403,
        )


class _Budget:
    """Inline bytes and images so far in this request."""

    def __init__(self) -> None:
        self.bytes = 0
        self.images = 0


def _inline(blob: object, path: str, budget: _Budget) -> tuple[InImage, ...]:
    """An inline image (one), or an inline PDF's rendered pages."""
    if not isinstance(blob, dict):
        raise _reject(f"Invalid value at '{path}': expected an object")
    mime = _get(blob, "mimeType", "mime_type")
    if mime not in _IMAGE_TYPES and mime != "application/pdf":
        raise _reject(f"Unsupported MIME type: {mime}")
    raw = blob.get("data")
    try:
        data = b64decode(raw, proto=True)
    except InvalidInputError as e:
        shown = str(raw)[:20]
        raise _reject(
            f"Invalid value at '{path}.data' (TYPE_BYTES), Base64 decoding failed for \"{shown}\""
        ) from e
    budget.bytes += len(data)
    if budget.bytes > limits.GEMINI_MAX_INLINE_BYTES:
        raise _reject(
            f"Request payload size exceeds the limit: {limits.GEMINI_MAX_INLINE_BYTES} bytes."
        )
    if mime == "application/pdf":
        try:
            return document_pages(data, path, max_pages=limits.GEMINI_MAX_PDF_PAGES)
        except InvalidInputError as e:
            raise _reject(f"Unable to process input PDF: {e}") from e
    budget.images += 1
    if budget.images > limits.GEMINI_MAX_IMAGES:
        raise _reject(f"Too many images: at most {limits.GEMINI_MAX_IMAGES} per request.")
    try:
        checked = check_image(data)
    except UndecodableError as e:
        raise _reject(
            "Unable to process input image. Please retry or report in "
            "https://developers.generativeai.google/guide/troubleshooting"
        ) from e
    return (InImage(data=data, width=checked.width, height=checked.height, where=path),)


# Call ids the reference model makes (visus.reference.model._tool_calls): only these
# calls were signed by this server, so only these must come back signed.
_OWN_CALL_ID = re.compile(r"call_[0-9a-f]{20}")


_GENERATION = re.compile(r"gemini-(\d+)")


def _signs(model: str) -> bool:
    """Gemini 3 and later (3.5, 4) sign their calls and take images in tool results."""
    found = _GENERATION.match(model)
    return found is not None and int(found.group(1)) >= 3


def _signature(call_id: str) -> str:
    """The opaque signature this server puts on (and expects back with) a call."""
    digest = hashlib.sha256(f"visus-reference-thought:{call_id}".encode()).digest()
    return base64.b64encode(digest[:24]).decode()


def _same_signature(sent: object, call_id: str) -> bool:
    # bytes in protobuf JSON: standard or URL-safe base64, padded or not
    try:
        return b64decode(sent, proto=True) == base64.b64decode(_signature(call_id))
    except InvalidInputError:
        return False


def _check_signatures(contents: list[Any]) -> None:
    """Gemini 3: the current turn's signed calls must come back with their signatures."""
    # The current turn starts after the last user content that is not function responses.
    start = 0
    for i, content in enumerate(contents):
        if not isinstance(content, dict) or (content.get("role") or "user") == "model":
            continue
        parts = content.get("parts") or []
        if any(
            isinstance(p, dict) and _get(p, "functionResponse", "function_response") is None
            for p in parts
        ):
            start = i
    for i, content in enumerate(contents):
        if not isinstance(content, dict) or content.get("role") != "model":
            continue
        first = True
        for j, part in enumerate(content.get("parts") or []):
            call = _get(part, "functionCall", "function_call") if isinstance(part, dict) else None
            if not isinstance(call, dict):
                continue
            call_id = str(call.get("id") or "")
            sent = _get(part, "thoughtSignature", "thought_signature")
            own = _OWN_CALL_ID.fullmatch(call_id) is not None
            if sent is not None and own and not _same_signature(sent, call_id):
                raise _reject(f"Corrupted thought signature at contents[{i}].parts[{j}].")
            if first and own and i > start and sent is None:
                raise _reject(
                    "Function call is missing a thought_signature in functionCall parts. "
                    "This is required for tools to work correctly, and missing "
                    "thought_signature may lead to degraded model performance. Additional "
                    f"data, function call `default_api:{call.get('name')}` , position "
                    f"{j + 1}. Please refer to "
                    "https://ai.google.dev/gemini-api/docs/thought-signatures for more details."
                )
            first = False


def _conversation(body: dict[str, Any], model: str) -> Conversation:
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        raise _reject("* GenerateContentRequest.contents: contents is not specified")
    out: list[InMessage] = []
    system = _get(body, "systemInstruction", "system_instruction")
    if isinstance(system, dict):
        lines = [
            p["text"]
            for p in system.get("parts") or []
            if isinstance(p, dict) and isinstance(p.get("text"), str)
        ]
        out.append(InMessage(role="system", texts=tuple(lines)))
    budget = _Budget()
    # Images inside functionResponse.parts are a Gemini 3 feature; the catalog says
    # which other models take images in tool results (the reference model does).
    try:
        nested_ok = _signs(model) or get_model(model).images_in_tool_results
    except VisusError:
        nested_ok = False
    last_calls: list[InCall] = []
    for i, content in enumerate(contents):
        if not isinstance(content, dict):
            raise _reject(f"Invalid value at 'contents[{i}]'")
        role = content.get("role") or "user"
        if role not in {"user", "model", "function"}:
            raise _reject("Please use a valid role: user, model.")
        parts = content.get("parts")
        if not isinstance(parts, list) or not parts:
            raise _reject(
                f"* GenerateContentRequest.contents[{i}].parts: contents.parts must not be empty."
            )
        texts: list[str] = []
        images: list[InImage] = []
        calls: list[InCall] = []
        results: list[InMessage] = []
        for j, part in enumerate(parts):
            path = f"contents[{i}].parts[{j}]"
            if not isinstance(part, dict):
                raise _reject(f"Invalid value at '{path}'")
            blob = _get(part, "inlineData", "inline_data")
            call = _get(part, "functionCall", "function_call")
            response = _get(part, "functionResponse", "function_response")
            if isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif blob is not None:
                if role == "model":
                    raise _reject(f"{path}: inline image data is only supported in user turns.")
                images.extend(_inline(blob, f"{path}.inline_data", budget))
            elif isinstance(call, dict):
                if role != "model":
                    raise _reject(
                        "Please ensure that function call turn comes immediately "
                        "after a user turn or after a function response turn."
                    )
                calls.append(
                    InCall(
                        id=str(call.get("id") or call.get("name")),
                        name=str(call.get("name", "")),
                        arguments=json.dumps(call.get("args") or {}),
                    )
                )
            elif isinstance(response, dict):
                if not last_calls:
                    raise _reject(
                        "Please ensure that function response turn comes immediately "
                        "after a function call turn."
                    )
                nested = response.get("parts") or []
                if nested and not nested_ok:
                    raise _reject(
                        f"{path}.function_response.parts: multimodal function "
                        f"responses are not supported by model {model}."
                    )
                r_images = [
                    image
                    for k, p in enumerate(nested)
                    if isinstance(p, dict) and _get(p, "inlineData", "inline_data") is not None
                    for image in _inline(
                        _get(p, "inlineData", "inline_data"),
                        f"{path}.function_response.parts[{k}].inline_data",
                        budget,
                    )
                ]
                name = str(response.get("name", ""))
                call_id = response.get("id") or name
                results.append(
                    InMessage(
                        role="tool",
                        images=tuple(r_images),
                        texts=(json.dumps(response.get("response") or {}),),
                        tool_call_id=str(call_id),
                    )
                )
            elif _get(part, "fileData", "file_data") is not None:
                raise _reject(
                    f"{path}.file_data: File not found (the reference server holds "
                    "no uploaded files).",
                    404,
                )
        if last_calls and len(results) != len(last_calls):
            raise _reject(
                "Please ensure that the number of function response parts is equal "
                "to the number of function call parts of the function call turn."
            )
        last_calls = calls
        if role == "model":
            out.append(InMessage(role="assistant", texts=tuple(texts), tool_calls=tuple(calls)))
            continue
        out.extend(results)
        if texts or images or not results:
            out.append(InMessage(role="user", texts=tuple(texts), images=tuple(images)))
    names: list[str] = []
    tools = body.get("tools") or []
    for tool in tools:
        decls = (
            _get(tool, "functionDeclarations", "function_declarations")
            if isinstance(tool, dict)
            else None
        )
        names.extend(str(d.get("name")) for d in decls or [] if isinstance(d, dict))
    return Conversation(
        messages=tuple(out), tools=tuple(names), tool_text=json.dumps(tools) if tools else ""
    )


def _parts(reply: Reply, model: str) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    if reply.text:
        parts.append({"text": reply.text})
    for n, c in enumerate(reply.tool_calls):
        part: dict[str, Any] = {
            "functionCall": {"id": c.id, "name": c.name, "args": dict(c.arguments)}
        }
        if n == 0 and _signs(model):  # parallel calls: only the first is signed
            part["thoughtSignature"] = _signature(c.id)
        parts.append(part)
    return parts


def _usage(reply: Reply, cached: int = 0) -> dict[str, int]:
    usage = {
        "promptTokenCount": reply.input_tokens,
        "candidatesTokenCount": reply.output_tokens,
        "totalTokenCount": reply.input_tokens + reply.output_tokens,
    }
    if cached:  # the API leaves the field out when nothing was cached
        usage["cachedContentTokenCount"] = cached
    return usage


def _cached(settings: Settings, body: dict[str, Any], model: str, total: int) -> int:
    """Implicit caching (Gemini 2.5 and later): the longest prefix seen before, at least
    the model's minimum."""
    spec = spec_for("gemini", model)
    head = {"systemInstruction": body.get("systemInstruction"), "tools": body.get("tools")}
    blocks = prefix_blocks(head, body.get("contents"), spec)
    use = settings.cache.automatic(
        f"gemini:{model}", blocks, total=total, min_tokens=spec.cache_min_tokens
    )
    return use.read


def _chunks(reply: Reply, model: str, rid: str, cached: int = 0) -> Iterator[dict[str, Any]]:
    chunks: list[dict[str, Any]] = [
        {"text": reply.text[k : k + 64]} for k in range(0, len(reply.text), 64)
    ]
    chunks += [p for p in _parts(reply, model) if "functionCall" in p]
    for n, part in enumerate(chunks):
        last = n == len(chunks) - 1
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": [part]}, "index": 0}
        payload: dict[str, Any] = {
            "candidates": [candidate],
            "modelVersion": model,
            "responseId": rid,
        }
        if last:
            candidate["finishReason"] = "MAX_TOKENS" if reply.truncated else "STOP"
            payload["usageMetadata"] = _usage(reply, cached)
        yield payload


async def generate(request: Request, settings: Settings) -> Response:
    """``POST /v1beta/models/{model}:generateContent`` (or ``:streamGenerateContent``)."""
    target = str(request.path_params.get("target", ""))
    model, _, method = target.rpartition(":")
    if method not in {"generateContent", "streamGenerateContent"} or not model:
        raise _reject(f"Method not found: {target}", 404)
    _check_auth(request)
    body = await read_json(request, lambda msg: _reject(f"Invalid JSON payload received. {msg}"))
    if _signs(model) and isinstance(body.get("contents"), list):
        _check_signatures(body["contents"])
    conv = _conversation(body, model)
    generation = body.get("generationConfig")
    cap = generation.get("maxOutputTokens") if isinstance(generation, dict) else None
    reply = await answer(
        conv, wire="gemini", model=model, settings=settings, too_long=_too_long, cap=cap
    )
    rid = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:24]
    cached = _cached(settings, body, model, reply.input_tokens)
    if method == "streamGenerateContent":
        chunks = _chunks(reply, model, rid, cached)
        if request.query_params.get("alt") != "sse":
            return JSONResponse(list(chunks))  # without alt=sse the stream is one JSON array
        sse = ("data: " + json.dumps(c) + "\r\n\r\n" for c in chunks)
        return StreamingResponse(sse, media_type="text/event-stream")
    return JSONResponse(
        {
            "candidates": [
                {
                    "content": {"role": "model", "parts": _parts(reply, model)},
                    "finishReason": "MAX_TOKENS" if reply.truncated else "STOP",
                    "index": 0,
                }
            ],
            "usageMetadata": _usage(reply, cached),
            "modelVersion": model,
            "responseId": rid,
        }
    )
