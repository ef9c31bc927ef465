"""Anthropic's per-request image rules, per model (issue 26; Claude vision guide): 100
images on 200k-context models, 600 on the others, and every image at most 2000 px a side
once a request carries more than 20 (Opus 4.7's 2576 px images included)."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import httpx
from PIL import Image

from visus.models import get_model
from visus.record.messages import ImagePart, ModelRequest, PerceptionOrigin, TextPart, UserMessage
from visus.reference.server import serve_in_background
from visus.wire import lower

from .corpus import CountingStore


def _png(w: int, h: int, shade: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (w, h), (shade % 256, 90, 160)).save(buf, "PNG")
    return buf.getvalue()


def _request(n: int, w: int, h: int) -> tuple[ModelRequest, CountingStore]:
    blobs = CountingStore()
    parts: list[Any] = [TextPart("look")]
    for i in range(n):
        data = _png(w, h, i)
        digest = blobs.put(data, "image/png")
        parts.append(ImagePart(digest, "image/png", len(data), w, h, PerceptionOrigin(f"s{i}.png")))
    return ModelRequest(messages=(UserMessage(tuple(parts), turn=1),)), blobs


def _images(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [b for m in body["messages"] for b in m["content"] if b.get("type") == "image"]


def test_600_images_on_a_1m_context_model_100_on_a_200k_one() -> None:
    request, blobs = _request(150, 8, 8)
    wide = lower(request, wire="anthropic", model=get_model("claude-sonnet-4-6"), blobs=blobs)
    assert len(_images(wide)) == 150
    narrow = lower(request, wire="anthropic", model=get_model("claude-haiku-4-5"), blobs=blobs)
    assert len(_images(narrow)) == 100
    assert "over the 100-image limit" in json.dumps(narrow)
    # The reference server, strict like the service, takes both as lowered.
    with serve_in_background() as url:
        for body in (wide, narrow):
            reply = httpx.post(
                f"{url}/v1/messages",
                json={**body, "max_tokens": 10},
                headers={"x-api-key": "k", "anthropic-version": "2023-06-01"},
                timeout=60,
            )
            assert reply.status_code == 200, reply.text
        too_many = {**narrow, "model": "claude-haiku-4-5", "max_tokens": 10}
        too_many["messages"] = wide["messages"]
        reply = httpx.post(
            f"{url}/v1/messages",
            json=too_many,
            headers={"x-api-key": "k", "anthropic-version": "2023-06-01"},
            timeout=60,
        )
        assert reply.status_code == 400
        assert "150 > 100" in reply.text


def test_more_than_20_images_are_each_fitted_to_2000_px_even_for_opus_47() -> None:
    opus = get_model("claude-opus-4-7")
    request, blobs = _request(3, 2576, 1449)
    few = lower(request, wire="anthropic", model=opus, blobs=blobs)
    assert [_size(b) for b in _images(few)] == [(2576, 1449)] * 3  # its native size
    request, blobs = _request(21, 2576, 1449)
    many = lower(request, wire="anthropic", model=opus, blobs=blobs)
    assert len(_images(many)) == 21
    assert all(max(_size(b)) <= 2000 for b in _images(many))


def _size(block: dict[str, Any]) -> tuple[int, int]:
    with Image.open(io.BytesIO(base64.b64decode(block["source"]["data"]))) as im:
        return im.size
