"""Re-fitting images that break a model's limits, and the refit cache."""

from __future__ import annotations

import base64
import io
import json
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

from PIL import Image

from visus.models.spec import ModelSpec
from visus.record.messages import (
    AssistantMessage,
    ImagePart,
    ModelRequest,
    PerceptionOrigin,
    TextPart,
    ToolResult,
    UserMessage,
)
from visus.wire import RefitCache, lower

from .corpus import CLAUDE, GEMINI_2, GPT, VIEW_TOOL, CountingStore, ReadOnlyStore, call
from .test_lowering import _image_payloads


def _png(w: int, h: int, seed: int = 0, noisy: bool = False) -> bytes:
    if noisy:
        im = Image.frombytes("RGB", (w, h), random.Random(seed).randbytes(w * h * 3))
    else:
        im = Image.new("RGB", (w, h), (seed * 37 % 256, 120, 200))
    buf = io.BytesIO()
    im.save(buf, "PNG")
    return buf.getvalue()


def _encode(im: Image.Image, fmt: str) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt)
    return buf.getvalue()


def _request(blobs: CountingStore, images: list[tuple[bytes, str, int, int]]) -> ModelRequest:
    messages: list[Any] = [UserMessage((TextPart("look"),), turn=1)]
    for i, (data, media_type, w, h) in enumerate(images):
        digest = blobs.put(data, media_type)
        part = ImagePart(digest, media_type, len(data), w, h, PerceptionOrigin(f"img{i}"))
        messages.append(AssistantMessage(tool_calls=(call(f"c{i}", "view", f"img{i}"),), turn=1))
        messages.append(ToolResult(f"c{i}", "view", (part,), turn=1))
    blobs.puts = 0
    return ModelRequest(messages=tuple(messages), tools=(VIEW_TOOL,))


def _sent(body: dict[str, Any]) -> list[Image.Image]:
    return [Image.open(io.BytesIO(base64.b64decode(p))) for p in _image_payloads(body)]


def test_oversized_image_is_refitted_stored_and_cached() -> None:
    blobs = CountingStore()
    big = _png(3000, 2000)
    request = _request(blobs, [(big, "image/png", 3000, 2000)])
    cache = RefitCache()
    body = lower(request, wire="anthropic", model=CLAUDE, blobs=blobs, refit_cache=cache)
    (sent,) = _sent(body)
    assert max(sent.size) <= CLAUDE.max_edge
    assert abs(sent.size[0] / sent.size[1] - 1.5) < 0.01  # aspect kept
    assert blobs.puts == 1
    assert len(cache) == 1
    derived = next(iter(set(blobs.data) - {request.messages[2].parts[0].digest}))
    assert base64.b64decode(_image_payloads(body)[0]) == blobs.data[derived]

    blobs.reads.clear()
    again = lower(request, wire="anthropic", model=CLAUDE, blobs=blobs, refit_cache=cache)
    assert json.dumps(again) == json.dumps(body)
    assert blobs.reads == [derived]  # the original is not even read, nothing refitted
    assert blobs.puts == 1


def test_refit_is_deterministic_without_a_cache() -> None:
    blobs = CountingStore()
    request = _request(blobs, [(_png(2500, 900), "image/png", 2500, 900)])
    first = lower(request, wire="openai-chat", model=GPT, blobs=blobs)
    second = lower(request, wire="openai-chat", model=GPT, blobs=blobs)
    assert json.dumps(first) == json.dumps(second)
    assert max(_sent(first)[0].size) <= GPT.max_edge


def test_media_type_the_wire_does_not_take_is_converted() -> None:
    blobs = CountingStore()
    gif = _encode(Image.new("RGB", (40, 30), (10, 200, 10)), "GIF")
    bmp = _encode(Image.new("RGB", (20, 10), (200, 10, 10)), "BMP")
    request = _request(blobs, [(gif, "image/gif", 40, 30), (bmp, "image/bmp", 20, 10)])
    body = lower(request, wire="gemini", model=GEMINI_2, blobs=blobs)
    types = [
        p["inlineData"]["mimeType"]
        for c in body["contents"]
        for p in c["parts"]
        if "inlineData" in p
    ]
    assert len(types) == 2
    assert set(types) <= {"image/png", "image/jpeg", "image/webp"}
    assert [im.size for im in _sent(body)] == [(40, 30), (20, 10)]


def test_anthropic_byte_cap_counts_base64() -> None:
    blobs = CountingStore()
    data = _png(60, 60, noisy=True)  # incompressible: ~10.8 KB raw
    tight = replace(CLAUDE, max_image_bytes=len(data) + 100)  # raw fits, base64 does not
    request = _request(blobs, [(data, "image/png", 60, 60)])
    body = lower(request, wire="anthropic", model=tight, blobs=blobs)
    (payload,) = _image_payloads(body)
    assert len(payload) <= tight.max_image_bytes
    # the same image on a wire that counts raw bytes is sent as it is
    raw = lower(
        request,
        wire="openai-chat",
        model=replace(GPT, max_image_bytes=len(data) + 100),
        blobs=blobs,
    )
    assert base64.b64decode(_image_payloads(raw)[0]) == data


def test_anthropic_many_image_rule() -> None:
    roomy = replace(CLAUDE, max_edge=8000, max_pixels=8000 * 8000)
    images = [(_png(2400, 40, seed=i), "image/png", 2400, 40) for i in range(21)]
    blobs = CountingStore()
    request = _request(blobs, images[:20])
    body = lower(request, wire="anthropic", model=roomy, blobs=blobs)
    assert [im.size for im in _sent(body)] == [(2400, 40)] * 20  # 20 images: untouched
    blobs = CountingStore()
    request = _request(blobs, images)
    body = lower(request, wire="anthropic", model=roomy, blobs=blobs)
    sizes = [im.size for im in _sent(body)]
    assert len(sizes) == 21
    assert all(max(s) <= 2000 for s in sizes), sizes
    # the rule is Anthropic's: another wire with the same limits keeps them as they are
    body = lower(
        request, wire="openai-responses", model=replace(roomy, provider="openai"), blobs=blobs
    )
    assert [im.size for im in _sent(body)] == [(2400, 40)] * 21


def test_read_only_store_still_refits() -> None:
    blobs = CountingStore()
    request = _request(blobs, [(_png(3000, 100), "image/png", 3000, 100)])
    cache = RefitCache()
    body = lower(
        request, wire="anthropic", model=CLAUDE, blobs=ReadOnlyStore(blobs), refit_cache=cache
    )
    assert max(_sent(body)[0].size) <= CLAUDE.max_edge
    assert blobs.puts == 0
    assert len(cache) == 0


def test_undecodable_blob_that_needs_refit_becomes_a_note() -> None:
    blobs = CountingStore()
    junk = b"\x89PNG\r\n\x1a\n" + b"\x00" * 50
    request = _request(blobs, [(junk, "image/png", 5000, 5000)])
    body = lower(request, wire="anthropic", model=CLAUDE, blobs=blobs)
    assert _image_payloads(body) == []
    assert "cannot be fitted for claude-test" in json.dumps(body)


def test_persisted_cache_survives_a_restart(tmp_path: Path) -> None:
    index = tmp_path / "refit-index.json"
    blobs = CountingStore()
    request = _request(blobs, [(_png(3000, 300), "image/png", 3000, 300)])
    body = lower(
        request, wire="anthropic", model=CLAUDE, blobs=blobs, refit_cache=RefitCache(index)
    )
    assert index.is_file()
    reloaded = RefitCache(index)
    assert len(reloaded) == 1
    blobs.reads.clear()
    again = lower(request, wire="anthropic", model=CLAUDE, blobs=blobs, refit_cache=reloaded)
    assert json.dumps(again) == json.dumps(body)
    assert len(blobs.reads) == 1
    assert blobs.reads[0] != request.messages[2].parts[0].digest


def test_cache_entry_whose_blob_vanished_is_refitted(tmp_path: Path) -> None:
    blobs = CountingStore()
    request = _request(blobs, [(_png(3000, 300), "image/png", 3000, 300)])
    cache = RefitCache(tmp_path / "idx.json")
    body = lower(request, wire="anthropic", model=CLAUDE, blobs=blobs, refit_cache=cache)
    original = request.messages[2].parts[0].digest
    for key in [k for k in blobs.data if k != original]:
        del blobs.data[key]  # a gc removed the derived blob
    again = lower(request, wire="anthropic", model=CLAUDE, blobs=blobs, refit_cache=cache)
    assert json.dumps(again) == json.dumps(body)
    assert len(blobs.data) == 2


def test_corrupt_index_starts_empty(tmp_path: Path) -> None:
    index = tmp_path / "idx.json"
    index.write_text("{not json", encoding="utf-8")
    assert len(RefitCache(index)) == 0


def test_fitting_images_are_sent_byte_for_byte() -> None:
    blobs = CountingStore()
    data = _png(800, 600)
    request = _request(blobs, [(data, "image/png", 800, 600)])
    for wire, spec in (("anthropic", CLAUDE), ("openai-chat", GPT), ("gemini", GEMINI_2)):
        body = lower(request, wire=wire, model=spec, blobs=blobs)  # type: ignore[arg-type]
        assert base64.b64decode(_image_payloads(body)[0]) == data
    assert blobs.puts == 0


def test_spec_limits_from_catalog_models_hold() -> None:
    # a 4000 px screenshot for a real catalog model is fitted to that model's edge
    blobs = CountingStore()
    request = _request(blobs, [(_png(4000, 2500), "image/png", 4000, 2500)])
    from visus.models import get_model

    spec: ModelSpec = get_model("gpt-4.1")
    body = lower(request, wire="openai-chat", model=spec, blobs=blobs)
    (sent,) = _sent(body)
    assert max(sent.size) <= spec.max_edge
    assert sent.size[0] * sent.size[1] <= spec.max_pixels


def test_wire_edge_cap_refits_for_a_model_that_claims_more() -> None:
    blobs = CountingStore()
    request = _request(blobs, [(_png(9000, 20), "image/png", 9000, 20)])
    claims = ModelSpec(
        name="custom", provider="bedrock", vision=True, max_edge=12_000, max_pixels=10**9
    )
    body = lower(request, wire="bedrock", model=claims, blobs=blobs)
    (sent,) = _sent(body)
    assert max(sent.size) <= 8000


def _screenshot(w: int, h: int) -> bytes:
    """A screenshot-like PNG: text lines on white (compresses far better than a resample)."""
    from PIL import ImageDraw

    im = Image.new("RGB", (w, h), "white")
    draw = ImageDraw.Draw(im)
    for y in range(0, h, 18):
        draw.text((8, y), f"line {y}: the quick brown fox jumps over the lazy dog", fill="black")
    return _encode(im, "PNG")


def test_an_image_the_provider_takes_and_bills_the_same_goes_unchanged() -> None:
    from visus.models import get_model, image_tokens

    gpt41 = get_model("gpt-4.1")
    # 1600 x 1000 is over the 1.57 MP gpt-4.1 is fitted to, but inside the 2048 square the
    # API takes as it is; 1105 tokens either way (the short side goes to 768).
    assert image_tokens(gpt41, 1600, 1000) == image_tokens(gpt41, 1586, 991) == 1105
    blobs = CountingStore()
    shot = _screenshot(1600, 1000)
    request = _request(blobs, [(shot, "image/png", 1600, 1000)])
    body = lower(request, wire="openai-responses", model=gpt41, blobs=blobs)
    assert base64.b64decode(_image_payloads(body)[0]) == shot  # the original bytes
    assert blobs.puts == 0  # nothing re-encoded
    # Claude would shrink it server-side (latency, no detail): visus fits it first.
    body = lower(request, wire="anthropic", model=get_model("claude-sonnet-4-6"), blobs=blobs)
    (sent,) = _sent(body)
    assert max(sent.size) <= 1568
    assert blobs.puts == 1
