"""Bytes before pixels: a request over its byte budget re-encodes its images smaller
before any leaves (issue 35: twelve 1200x900 noise PNGs over Anthropic's 32 MB went out
as 8 images and 4 descriptors), the same bytes every time it is lowered."""

from __future__ import annotations

import base64
import io
import json
import random
from typing import Any

from PIL import Image

from visus import limits
from visus.models import get_model
from visus.record.blobs import MemoryBlobStore
from visus.record.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    ModelRequest,
    PerceptionOrigin,
    TextPart,
    ToolResult,
    UserMessage,
)
from visus.wire import RefitCache, WireRules, lower
from visus.wire._prepare import prepare
from visus.wire._prepared import WireImage, WireTool

from .corpus import VIEW_TOOL, call
from .test_lowering import _image_payloads

SONNET = get_model("claude-sonnet-4-6")


def _noise(seed: int, w: int = 1200, h: int = 900) -> bytes:
    """A screen of random pixels: what no lossless encoding makes smaller."""
    im = Image.frombytes("RGB", (w, h), random.Random(seed).randbytes(w * h * 3))
    buf = io.BytesIO()
    im.save(buf, "PNG", compress_level=1)  # zlib cannot shrink noise: spare it the work
    return buf.getvalue()


def _request(blobs: MemoryBlobStore, count: int, w: int = 1200, h: int = 900) -> ModelRequest:
    messages: list[Message] = [UserMessage((TextPart("look"),), turn=1)]
    for i in range(count):
        data = _noise(i, w, h)
        part = ImagePart(
            blobs.put(data, "image/png"),
            "image/png",
            len(data),
            w,
            h,
            PerceptionOrigin(f"noise{i}.png"),
        )
        messages.append(AssistantMessage(tool_calls=(call(f"c{i}", "view", f"n{i}"),), turn=1))
        messages.append(ToolResult(f"c{i}", "view", (TextPart(f"noise{i}.png"), part), turn=1))
    return ModelRequest(tuple(messages), tools=(VIEW_TOOL,))


def _sent(body: dict[str, Any]) -> list[Image.Image]:
    return [Image.open(io.BytesIO(base64.b64decode(p))) for p in _image_payloads(body)]


def test_twelve_noise_screens_over_32_mb_all_go_re_encoded_the_same_bytes_each_time() -> None:
    blobs = MemoryBlobStore()
    request = _request(blobs, 12)
    raw = sum(
        len(blobs.get(p.digest))
        for m in request.messages
        if isinstance(m, ToolResult)
        for p in m.parts
        if isinstance(p, ImagePart)
    )
    assert raw * 4 / 3 > limits.ANTHROPIC_MAX_REQUEST_IMAGE_B64  # as PNGs they do not fit
    cache = RefitCache()
    body = lower(request, wire="anthropic", model=SONNET, blobs=blobs, refit_cache=cache)
    text = json.dumps(body)
    sent = _sent(body)
    assert len(sent) == 12  # every screen keeps its pixels: none elided
    assert "image budget" not in text
    assert all(im.size == (1200, 900) and im.format in ("WEBP", "JPEG") for im in sent)
    assert sum(len(p) for p in _image_payloads(body)) <= limits.ANTHROPIC_MAX_REQUEST_IMAGE_B64
    # Re-sent at the next step, the history lowers to the same bytes (the prompt cache
    # keeps hitting), re-encoded once: the second lowering reads what the first stored.
    puts = len(list(blobs.digests()))
    assert (
        json.dumps(lower(request, wire="anthropic", model=SONNET, blobs=blobs, refit_cache=cache))
        == text
    )
    assert len(list(blobs.digests())) == puts
    # And without a cache (a new process), the same bytes again.
    fresh = lower(request, wire="anthropic", model=SONNET, blobs=blobs)
    assert json.dumps(fresh) == text


def test_under_the_budget_nothing_is_re_encoded() -> None:
    blobs = MemoryBlobStore()
    request = _request(blobs, 2, 600, 400)
    sent = _sent(lower(request, wire="anthropic", model=SONNET, blobs=blobs))
    assert [im.format for im in sent] == ["PNG"] * 2


def test_what_still_does_not_fit_leaves_oldest_first_and_the_newest_stays() -> None:
    blobs = MemoryBlobStore()
    request = _request(blobs, 30, 300, 200)  # ~240 KB of base64 each as PNG
    rules = WireRules(
        media_types=frozenset({"image/png", "image/jpeg", "image/webp"}),
        base64_byte_limit=True,
        max_request_image_bytes=1_000_000,  # 4 such PNGs; re-encoded, more, never all 30
    )
    prepared = prepare(request, spec=SONNET, rules=rules, blobs=blobs)
    parts = [p for m in prepared.messages if isinstance(m, WireTool) for p in m.parts]
    images = [p for p in parts if isinstance(p, WireImage)]
    notes = [p.text for p in parts if isinstance(p, TextPart) and "image budget" in p.text]
    assert len(images) + len(notes) == 30
    assert 4 < len(images) < 30
    assert sum(len(i.data) for i in images) <= 1_000_000
    assert all(i.media_type == "image/webp" for i in images)
    assert "noise0.png in turn 1; over the 1,000,000 bytes" in notes[0]  # oldest first
    assert images[-1].origin == PerceptionOrigin("noise29.png")  # the newest stays
