"""Lowering costs and the prompt-token trajectory.

1. Lowering a 2000-message session (500 turns) with 400 viewed images under the
   default retention window (``live_turns=1``) against a session of the same length
   with 40 images, on the Anthropic wire (claude-sonnet-4-6) and the Responses wire
   (gpt-4.1): blob reads are counted through the store and must equal the live images
   (1); time must follow live images, not total ones. A run with every turn live shows
   what grows when live images do (Anthropic's 100-image cap keeps 100 of them).
2. Token trajectory of a 50-turn session that views one fresh 1568 px screenshot per
   turn (1568x980, text-heavy UI, fitted for claude-sonnet-4-6 as view does): prompt
   image tokens of each request with retention, with none (every image kept), and with the
   stringified-base64 failure (base64 length / 4 as text tokens), side by side, with
   the turn-50 ratios. Counts come from the lowered Anthropic request bodies.

Run: ``.venv/bin/python -m benchmarks wire``
"""

from __future__ import annotations

import base64
import gc
import io
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw, ImageFont

from visus.media import fit
from visus.models import ModelSpec, get_model, image_tokens
from visus.record.blobs import FileBlobStore
from visus.record.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    ModelRequest,
    PerceptionOrigin,
    TextPart,
    ToolCall,
    ToolResult,
    UserMessage,
)
from visus.retention import RetentionPolicy, model_view
from visus.wire import Wire, lower

MODEL = "claude-sonnet-4-6"
TURNS = 500  # x 4 messages = 2000
REPEATS = 21


class CountingReader:
    """Wraps a blob store and counts ``get`` calls (what lowering reads)."""

    def __init__(self, store: FileBlobStore) -> None:
        self.store = store
        self.reads = 0

    def get(self, digest: str) -> bytes:
        self.reads += 1
        return self.store.get(digest)


def _screenshot_png(i: int, w: int = 1568, h: int = 980) -> bytes:
    """A text-heavy UI screenshot: a title bar, a sidebar and rows of coloured code."""
    rnd = random.Random(i)
    im = Image.new("RGB", (w, h), (30, 31, 36))
    draw = ImageDraw.Draw(im)
    font = ImageFont.load_default(size=15)
    draw.rectangle((0, 0, w, 28), fill=(60, 62, 70))
    draw.text((12, 6), f"editor - screen {i}.py", fill=(230, 230, 230), font=font)
    draw.rectangle((0, 28, 220, h), fill=(40, 42, 48))
    for row, y in enumerate(range(40, h - 20, 22)):
        draw.text((14, y), f"module_{rnd.randrange(999)}.py", fill=(170, 170, 180), font=font)
        x = 240
        draw.text((x, y), f"{row + 1:>4}", fill=(110, 110, 120), font=font)
        x += 48
        for _ in range(rnd.randrange(3, 11)):
            word = rnd.choice(_WORDS) + rnd.choice(("(", ".", " = ", ", ", "[0]", ""))
            colour = rnd.choice(_COLOURS)
            draw.text((x, y), word, fill=colour, font=font)
            x += int(draw.textlength(word, font=font)) + 8
            if x > w - 80:
                break
    buf = io.BytesIO()
    im.save(buf, "PNG")
    return buf.getvalue()


_WORDS = ("value", "result", "index", "buffer", "frame", "layout", "render", "cache", "def")
_COLOURS = ((220, 120, 100), (120, 200, 140), (110, 160, 230), (230, 200, 110), (200, 200, 210))


def _session(blobs: FileBlobStore, image_turns: set[int], size: tuple[int, int]) -> list[Message]:
    messages: list[Message] = []
    for t in range(1, TURNS + 1):
        cid = f"call_{t}"
        messages.append(UserMessage((TextPart(f"step {t}: look at shot{t}.png"),), turn=t))
        messages.append(
            AssistantMessage(tool_calls=(ToolCall(cid, "view", {"path": f"shot{t}.png"}),), turn=t)
        )
        if t in image_turns:
            data = _screenshot_png(t, *size)
            digest = blobs.put(data, "image/png")
            part = ImagePart(
                digest, "image/png", len(data), size[0], size[1], PerceptionOrigin(f"shot{t}.png")
            )
            messages.append(ToolResult(cid, "view", (TextPart(f"shot{t}.png"), part), turn=t))
        else:
            messages.append(ToolResult(cid, "view", (TextPart("no such file"),), True, turn=t))
        messages.append(AssistantMessage((TextPart(f"noted step {t}"),), turn=t))
    return messages


def _lower_once(
    messages: list[Message],
    blobs: FileBlobStore,
    policy: RetentionPolicy,
    spec: ModelSpec,
    wire: Wire,
) -> tuple[float, int, int]:
    reader = CountingReader(blobs)
    gc.collect()
    start = time.perf_counter()
    view = model_view(messages, policy, model=spec)
    body = lower(ModelRequest(messages=view), wire=wire, model=spec, blobs=reader)
    elapsed = time.perf_counter() - start
    return elapsed, reader.reads, len(json.dumps(body))


def bench_reads_and_time() -> None:
    print("1. lowering a 2000-message session (model_view + lower)")
    claude = get_model(MODEL)
    gpt = get_model("gpt-4.1")  # 500-image cap: all 400 can stay live
    window = RetentionPolicy()
    everything = RetentionPolicy(live_turns=TURNS)
    with tempfile.TemporaryDirectory() as tmp:
        blobs = FileBlobStore(Path(tmp) / "blobs")
        size = (480, 300)
        many = _session(blobs, set(range(TURNS - 399, TURNS + 1)), size)
        few = _session(blobs, set(range(TURNS - 39, TURNS + 1)), size)
        runs: dict[str, tuple[list[Message], RetentionPolicy, ModelSpec, Wire]] = {
            "anthropic, 40 images, window": (few, window, claude, "anthropic"),
            "anthropic, 400 images, window": (many, window, claude, "anthropic"),
            "anthropic, 400 images, all live": (many, everything, claude, "anthropic"),
            "responses, 40 images, window": (few, window, gpt, "openai-responses"),
            "responses, 400 images, window": (many, window, gpt, "openai-responses"),
            "responses, 400 images, all live": (many, everything, gpt, "openai-responses"),
        }
        samples: dict[str, list[tuple[float, int, int]]] = {k: [] for k in runs}
        for _ in range(REPEATS):  # interleaved, so machine noise hits every row alike
            for name, (messages, policy, model, wire) in runs.items():
                samples[name].append(_lower_once(messages, blobs, policy, model, wire))
    print(f"   {'request':<34}{'median ms':>11}{'blob reads':>12}{'request bytes':>15}")
    medians: dict[str, float] = {}
    for name, rows in samples.items():
        medians[name] = statistics.median(r[0] for r in rows)
        reads, size_ = rows[-1][1], rows[-1][2]
        print(f"   {name:<34}{medians[name] * 1000:>11.2f}{reads:>12}{size_:>15,}")
    for wire in ("anthropic", "responses"):
        few_t, many_t, all_t = (medians[k] for k in medians if k.startswith(wire))
        print(
            f"   {wire}: 400 vs 40 images, default window: {many_t / few_t:.2f}x time; "
            f"all live vs window: {all_t / many_t:.1f}x"
        )
    reads = [rows[-1][1] for rows in samples.values()]
    # Anthropic's 100-image cap leaves the oldest 300 as descriptors, never read
    assert reads == [1, 1, 100, 1, 1, 400], reads


def _image_tokens_in(body: dict[str, Any], spec: Any) -> int:
    total = 0
    for message in body["messages"]:
        for block in message["content"]:
            inner = block.get("content", []) if block["type"] == "tool_result" else [block]
            for b in inner:
                if b["type"] == "image":
                    with Image.open(io.BytesIO(base64.b64decode(b["source"]["data"]))) as im:
                        total += image_tokens(spec, im.width, im.height)
    return total


def bench_token_trajectory() -> None:
    spec = get_model(MODEL)
    print(f"\n2. prompt image tokens per request, 50 turns, one screenshot per turn ({MODEL})")
    with tempfile.TemporaryDirectory() as tmp:
        blobs = FileBlobStore(Path(tmp) / "blobs")
        messages: list[Message] = []
        b64_chars: list[int] = []
        rows: list[tuple[int, int, int, int]] = []
        for t in range(1, 51):
            fitted = fit(_screenshot_png(t), spec.profile())
            digest = blobs.put(fitted.data, fitted.media_type)
            part = ImagePart(
                digest,
                fitted.media_type,
                fitted.size,
                fitted.width,
                fitted.height,
                PerceptionOrigin(f"screen{t}.png"),
            )
            b64_chars.append(len(base64.b64encode(fitted.data)))
            cid = f"call_{t}"
            messages += [
                UserMessage((TextPart(f"turn {t}: what is on screen{t}.png?"),), turn=t),
                AssistantMessage(
                    tool_calls=(ToolCall(cid, "view", {"path": f"screen{t}.png"}),), turn=t
                ),
                ToolResult(cid, "view", (part,), turn=t),
            ]
            request = ModelRequest(messages=model_view(messages, RetentionPolicy(), model=spec))
            kept = ModelRequest(messages=tuple(messages))
            with_retention = _image_tokens_in(
                lower(request, wire="anthropic", model=spec, blobs=blobs), spec
            )
            without = _image_tokens_in(lower(kept, wire="anthropic", model=spec, blobs=blobs), spec)
            stringified = sum(b64_chars) // 4
            rows.append((t, with_retention, without, stringified))
            messages.append(AssistantMessage((TextPart(f"Screen {t} shows code."),), turn=t))
    print(f"   image: {fitted.width}x{fitted.height} {fitted.media_type}, {fitted.size:,} bytes")
    print(f"   {'turn':>5}{'retention':>12}{'no retention':>15}{'base64 as text':>17}")
    for t, r, n, s in rows:
        if t in (1, 2, 5, 10, 20, 30, 40, 50):
            print(f"   {t:>5}{r:>12,}{n:>15,}{s:>17,}")
    _, r50, n50, s50 = rows[-1]
    print(f"   turn 50: no retention / retention = {n50 / r50:.1f}x")
    print(f"   turn 50: base64-as-text / retention = {s50 / r50:.0f}x")
    print(f"   turn 50: base64-as-text / no retention = {s50 / n50:.0f}x")


def main() -> None:
    bench_reads_and_time()
    bench_token_trajectory()


if __name__ == "__main__":
    main()
