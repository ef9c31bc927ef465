"""Each image goes out at the detail the model reads it at, and that is what visus counts
(issue 26): OpenAI's ``detail: "original"`` where only it keeps an image whole, Gemini 3's
per-image media resolution."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from PIL import Image

from visus.models import get_model, image_tokens, pick_detail
from visus.record.messages import ModelRequest, TextPart, ToolResult, UserMessage
from visus.wire import lower

from .corpus import VIEW_TOOL, CountingStore, call, view_image
from .sdk_check import check_gemini, check_openai_chat, check_openai_responses


def _png(w: int, h: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (w, h), (250, 250, 250)).save(buf, "PNG")
    return buf.getvalue()


def _request(w: int, h: int) -> tuple[ModelRequest, CountingStore]:
    from visus.record.messages import AssistantMessage

    data = _png(w, h)
    blobs = CountingStore((data, "image/png"))
    messages = (
        UserMessage((TextPart("read the screen"),), turn=1),
        AssistantMessage(tool_calls=(call("c1", "view", "screen.png"),), turn=1),
        ToolResult("c1", "view", (view_image(data, "screen.png", w, h),), turn=1),
    )
    return ModelRequest(messages=messages, tools=(VIEW_TOOL,)), blobs


def _details(body: dict[str, Any]) -> list[str]:
    text = json.dumps(body)
    found = []
    for item in json.loads(text).get("input", []):
        for part in item.get("output", []) if isinstance(item.get("output"), list) else []:
            if part.get("type") == "input_image":
                found.append(part["detail"])
        for part in item.get("content", []) if isinstance(item.get("content"), list) else []:
            if part.get("type") == "input_image":
                found.append(part["detail"])
    return found


@pytest.mark.parametrize(("size", "detail"), [((3840, 2160), "original"), ((1600, 1000), "high")])
def test_gpt54_gets_original_only_where_high_would_shrink_the_image(
    size: tuple[int, int], detail: str
) -> None:
    spec = get_model("gpt-5.4")
    request, blobs = _request(*size)
    body = lower(request, wire="openai-responses", model=spec, blobs=blobs)
    check_openai_responses(body)
    assert _details(body) == [detail]
    assert blobs.puts == 0  # sent whole: the 4K screen fits original's 10,000 patches
    chat = lower(request, wire="openai-chat", model=spec, blobs=blobs)
    check_openai_chat(chat)
    urls = [
        part["image_url"]
        for m in chat["messages"]
        if isinstance(m.get("content"), list)
        for part in m["content"]
        if part.get("type") == "image_url"
    ]
    assert [u["detail"] for u in urls] == [detail]
    # What visus counts is what that detail bills.
    assert pick_detail(spec, *size) == detail
    assert image_tokens(spec, *size, detail=detail) == (120 * 68 if detail == "original" else 1600)


def test_models_without_detail_levels_keep_auto() -> None:
    request, blobs = _request(1600, 1000)
    body = lower(request, wire="openai-responses", model=get_model("gpt-4.1"), blobs=blobs)
    assert _details(body) == ["auto"]
    chat = lower(request, wire="openai-chat", model=get_model("gpt-4.1"), blobs=blobs)
    assert '"detail"' not in json.dumps(chat)


def test_gemini3_images_carry_their_media_resolution_inside_the_function_response() -> None:
    from google.genai import types

    request, blobs = _request(1600, 1000)
    body = lower(request, wire="gemini", model=get_model("gemini-3-pro"), blobs=blobs)
    check_gemini(body)
    parts = [p for c in body["contents"] for p in c["parts"]]
    (response,) = [p["functionResponse"] for p in parts if "functionResponse" in p]
    (part,) = response["parts"]
    assert part["mediaResolution"] == {"level": "MEDIA_RESOLUTION_HIGH"}
    parsed = types.FunctionResponsePart.model_validate_json(json.dumps(part))
    assert parsed.media_resolution is not None
    assert parsed.media_resolution.level == types.PartMediaResolutionLevel.MEDIA_RESOLUTION_HIGH
    # Gemini 2.x has no per-part resolution: nothing is added.
    older = lower(request, wire="gemini", model=get_model("gemini-2.5-flash"), blobs=blobs)
    assert "mediaResolution" not in json.dumps(older)
