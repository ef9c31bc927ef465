"""Lowering an image stored with its changed areas: the crops while the base is sent
before it as its own bytes, else the whole image (wire/_crops.py)."""

from __future__ import annotations

import base64
import io
import json
from dataclasses import replace
from typing import Any

import pytest
from PIL import Image, ImageDraw

from visus.agent.changed import with_changes
from visus.models.spec import AnthropicPatches, FlatTokens, ModelSpec
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
from visus.retention import RetentionPolicy, model_view
from visus.wire import lower

from .corpus import CLAUDE as FLAT_CLAUDE
from .corpus import GEMINI_3, GPT, VARIANTS, VIEW_TOOL, call
from .test_lowering import _image_payloads

W, H = 640, 400


def _priced(spec: ModelSpec) -> ModelSpec:
    """The corpus's specs bill every image alike (576 tokens), as no crop pays for: give
    them a size-priced formula (Gemini 3 keeps its own: it does bill each image alike)."""
    if isinstance(spec.tokens, FlatTokens):
        return replace(spec, tokens=AnthropicPatches())
    return spec


CLAUDE = _priced(FLAT_CLAUDE)


def _screen(status: str) -> bytes:
    """A screen of text; ``status`` is drawn at the bottom, and at the top too when it
    holds a ``|``: ``"top|bottom"`` (two changes far apart)."""
    top, _, status = status.rpartition("|")
    im = Image.new("RGB", (W, H), (250, 250, 250))
    d = ImageDraw.Draw(im)
    d.text((W - 120, 4), top, fill=(30, 30, 30))
    for i in range(12):
        d.text((20, 20 + 24 * i), f"line {i}: the quick brown fox", fill=(30, 30, 30))
    d.text((20, H - 20), status, fill=(30, 30, 30))
    buf = io.BytesIO()
    im.save(buf, "PNG")
    return buf.getvalue()


def _record(blobs: MemoryBlobStore, statuses: list[str]) -> list[Message]:
    """One turn: a view of the screen per status, each stored as the agent stores it."""
    record: list[Message] = [UserMessage((TextPart("watch"),), turn=1)]
    for i, status in enumerate(statuses):
        data = _screen(status)
        part = ImagePart(
            blobs.put(data, "image/png"),
            "image/png",
            len(data),
            W,
            H,
            PerceptionOrigin("screen.png"),
        )
        part = with_changes(part, data, record, blobs)
        record.append(AssistantMessage(tool_calls=(call(f"c{i}", "view", "screen.png"),), turn=1))
        record.append(ToolResult(f"c{i}", "view", (TextPart("screen.png"), part), turn=1))
    return record


def _lower(
    record: list[Message],
    wire: Any,
    spec: Any,
    blobs: MemoryBlobStore,
    policy: RetentionPolicy | None = None,
) -> dict[str, Any]:
    view = model_view(record, policy or RetentionPolicy())
    return lower(ModelRequest(tuple(view), tools=(VIEW_TOOL,)), wire=wire, model=spec, blobs=blobs)


def _sizes(body: dict[str, Any]) -> list[tuple[int, int]]:
    return [Image.open(io.BytesIO(base64.b64decode(p))).size for p in _image_payloads(body)]


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.name)
def test_a_changed_screen_goes_as_its_crop_after_its_base(variant: Any) -> None:
    blobs = MemoryBlobStore()
    record = _record(blobs, ["Saved", "Saving"])
    after = record[-1].parts[1]
    assert isinstance(after, ImagePart)
    assert after.changed_from is not None
    (crop,) = after.changed_from.crops
    spec = _priced(variant.spec)
    body = _lower(record, variant.wire, spec, blobs)
    text = json.dumps(body)
    if variant.wire == "ollama" or variant.spec is GEMINI_3:
        # Ollama cannot put a note beside a crop; Gemini 3 bills every image alike.
        assert _sizes(body) == [(W, H), (W, H)]
        assert "the same as view(" not in text
        return
    assert _sizes(body) == [(W, H), (crop.width, crop.height)]
    assert base64.b64encode(blobs.get(crop.digest)).decode() in text
    region = ",".join(str(v) for v in crop.region)
    base = after.changed_from.base[:16]
    assert f'the same as view(\\"sha256:{base}\\") except region [{region}]' in text
    # The same request lowers to the same bytes (a prompt cache keeps hitting).
    assert json.dumps(_lower(record, variant.wire, spec, blobs)) == text
    # A model that bills each image alike gains nothing from crops: the whole image goes.
    assert _sizes(_lower(record, variant.wire, replace(spec, tokens=FlatTokens()), blobs)) == [
        (W, H),
        (W, H),
    ]


def test_a_crop_stands_for_its_image_so_a_chain_of_changes_stays_crops() -> None:
    blobs = MemoryBlobStore()
    record = _record(blobs, ["Saved", "Saving", "Saving.", "Saving.."])
    sizes = _sizes(_lower(record, "anthropic", CLAUDE, blobs))
    assert sizes[0] == (W, H)
    assert all(s[0] * s[1] * 20 < W * H for s in sizes[1:]), sizes


def test_once_the_base_has_left_the_live_window_the_image_goes_whole() -> None:
    blobs = MemoryBlobStore()
    record = _record(blobs, ["a", "b", "c", "d", "e", "f"])
    # 4 live, batches of 4: the fifth evicted the first four; the sixth's base is live.
    sizes = _sizes(_lower(record, "anthropic", CLAUDE, blobs))
    assert sizes[0] == (W, H)  # the fifth: its base (the fourth) was evicted
    assert sizes[1][0] * sizes[1][1] * 20 < W * H
    # A base elided in this request (here by a one-image window) is never cut against.
    one = RetentionPolicy(live_images=1)
    assert _sizes(_lower(record, "anthropic", CLAUDE, blobs, one)) == [(W, H)]


def test_a_missing_crop_or_a_refitted_base_sends_the_whole_image() -> None:
    blobs = MemoryBlobStore()
    record = _record(blobs, ["Saved", "Saving"])
    after = record[-1].parts[1]
    assert isinstance(after, ImagePart)
    assert after.changed_from is not None
    gone = replace(after.changed_from.crops[0], digest="0" * 64)
    broken = replace(after, changed_from=replace(after.changed_from, crops=(gone,)))
    record[-1] = replace(record[-1], parts=(record[-1].parts[0], broken))  # type: ignore[arg-type]
    assert _sizes(_lower(record, "anthropic", CLAUDE, blobs)) == [(W, H), (W, H)]
    # A model whose limits re-fit the screens: the crops were cut from other pixels.
    small = replace(CLAUDE, max_edge=320, max_pixels=320 * 200)
    intact = _record(blobs, ["Saved", "Saving"])
    assert _sizes(_lower(intact, "anthropic", small, blobs)) == [(320, 200), (320, 200)]


def test_the_image_count_cap_holds_with_crops() -> None:
    blobs = MemoryBlobStore()
    record = _record(blobs, ["12:00|Saved", "12:01|Saving"])  # two changes far apart
    after = record[-1].parts[1]
    assert isinstance(after, ImagePart)
    assert after.changed_from is not None
    assert len(after.changed_from.crops) == 2
    three = _sizes(_lower(record, "openai-chat", replace(_priced(GPT), max_images=3), blobs))
    assert three[0] == (W, H)
    assert [c.region[2] - c.region[0] for c in after.changed_from.crops] == [
        w for w, _ in three[1:]
    ]
    # Two images at most: the base and two crops would be three, so the whole goes.
    two = _sizes(_lower(record, "openai-chat", replace(_priced(GPT), max_images=2), blobs))
    assert two == [(W, H), (W, H)]
