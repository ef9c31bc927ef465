"""Only what changed, measured (``python -m benchmarks nearsame``, second half).

:func:`changed_region_report`: each nearsame change lowered by visus (base whole, the
changed screen as note and crop) and read by the reference model over HTTP.
:func:`session_report`: two 100-step sessions (typing, page loads) with and without
the crops, through retention, lowering and the reference server's cache accounting.
"""

from __future__ import annotations

import base64
import io
import json
import os
import random
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
from PIL import Image, ImageDraw, ImageFont

from tests.nearsame import PAIRS, Screen, draw
from visus.agent.changed import with_changes
from visus.media import font_path
from visus.models import get_model, image_tokens
from visus.models.spec import ModelSpec
from visus.perception import Reach, Refusal, view
from visus.record.blobs import MemoryBlobStore
from visus.record.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    ModelRequest,
    PerceptionOrigin,
    TextPart,
    ToolCall,
    ToolResult,
    ToolSpec,
    Usage,
    UserMessage,
)
from visus.reference.server import serve_in_background
from visus.reference.vision import perceive
from visus.retention import RetentionPolicy, model_view
from visus.wire import WIRES, RefitCache, ReplyContext, Wire, lower

SONNET = get_model("claude-sonnet-4-6")
W, H = 1568, 980
TOOLS = (
    ToolSpec(
        "view",
        "See a file, URL or sha256:<digest> as pixels.",
        {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    ),
)
#: A screen agent's instructions (as in ``economics``): every strategy's head is cached.
SYSTEM = "You operate a computer through screenshots.\n" + "\n".join(
    f"Rule {i}: check that the screen shows element {i} enabled, act once, look again."
    for i in range(1, 121)
)
_HEADERS = {"authorization": "Bearer k", "x-api-key": "k", "anthropic-version": "2023-06-01"}


# --- the twelve changes, read from their crops -----------------------------------------


def _fitted(png: bytes, model: ModelSpec = SONNET) -> bytes:
    """The screen as the agent's ``view`` stores it for ``model`` (fitted to it)."""
    seen = view(png, reach=Reach([tempfile.mkdtemp()]), model=model, name="screen.png")
    assert not isinstance(seen, Refusal), seen
    return seen.data


def _view_step(
    record: list[Message], n: int, data: bytes, blobs: MemoryBlobStore, *, cut: bool = True
) -> None:
    """The agent's record of one ``view`` of screen.png, its image cut as the agent does
    (``cut``; else always whole, as before only-what-changed)."""
    im = Image.open(io.BytesIO(data))
    part = ImagePart(
        blobs.put(data, "image/png"),
        "image/png",
        len(data),
        im.width,
        im.height,
        PerceptionOrigin("screen.png"),
    )
    if cut:
        part = with_changes(part, data, record, blobs)
    call = ToolCall(f"call_{n}", "view", {"path": "screen.png"})
    record.append(AssistantMessage(tool_calls=(call,), turn=1))
    record.append(ToolResult(f"call_{n}", "view", (TextPart("Viewed screen.png"), part), turn=1))


def _payloads(body: Any) -> Iterator[bytes]:
    """Every image sent in an Anthropic or OpenAI Responses body, in order."""
    if isinstance(body, dict):
        if body.get("type") == "image" and isinstance(body.get("source"), dict):
            yield base64.b64decode(body["source"]["data"])
            return
        if body.get("type") == "input_image":
            yield base64.b64decode(body["image_url"].split(",", 1)[1])
            return
        for value in body.values():
            yield from _payloads(value)
    elif isinstance(body, list):
        for value in body:
            yield from _payloads(value)


def _words(data: bytes) -> str:
    return " ".join(w.text for w in perceive(data).words) or "(no words)"


def changed_region_report() -> None:
    base = _fitted(draw(Screen()))
    whole = image_tokens(SONNET, *Image.open(io.BytesIO(base)).size)
    print(f"\nonly what changed: each change lowered for {SONNET.name} (anthropic wire) and read")
    print(f"by the reference model from the crop it received (the base screen: {whole:,} tokens)\n")
    print(
        "| change | crop | tokens | every changed pixel | read in the crop | "
        "read there in the base |"
    )
    print("| --- | --- | ---: | :---: | --- | --- |")
    exact = read = 0
    with (
        serve_in_background(json_block=True) as url,
        httpx.Client(base_url=url, timeout=300, headers=_HEADERS) as client,
    ):
        for name, _kind, variant in PAIRS:
            blobs = MemoryBlobStore()
            new = _fitted(draw(variant))
            record: list[Message] = [UserMessage((TextPart("what changed?"),), turn=1)]
            _view_step(record, 1, base, blobs)
            _view_step(record, 2, new, blobs)
            body = lower(
                ModelRequest(model_view(record), tools=TOOLS),
                wire="anthropic",
                model=SONNET,
                blobs=blobs,
            )
            sent = list(_payloads(body))
            part = record[-1].parts[1]
            assert isinstance(part, ImagePart), name
            assert part.changed_from is not None, name
            (crop,) = part.changed_from.crops
            reply = client.post("/v1/messages", json=body)
            reply.raise_for_status()
            text = reply.json()["content"][0]["text"]
            block = json.loads(text.rsplit("```json\n", 1)[1].split("\n```", 1)[0])
            seen = " ".join(w["text"] for w in block["images"][-1]["words"]) or "(no words)"
            pasted = Image.open(io.BytesIO(base)).convert("RGB")
            pasted.paste(Image.open(io.BytesIO(sent[-1])).convert("RGB"), crop.region[:2])
            same = pasted.tobytes() == Image.open(io.BytesIO(new)).convert("RGB").tobytes()
            before = Image.open(io.BytesIO(base)).crop(crop.region)
            buf = io.BytesIO()
            before.save(buf, "PNG")
            was = _words(buf.getvalue())
            exact += same
            changed_text = seen != was
            read += changed_text
            tokens = image_tokens(SONNET, crop.width, crop.height)
            size = f"{crop.width}x{crop.height} at {crop.region[0]},{crop.region[1]}"
            print(f"| {name} | {size} | {tokens} | {'yes' if same else 'NO'} | {seen} | {was} |")
    print(
        f"\nevery changed pixel in the crop: {exact}/12; the reading of the crop differs "
        f"from the base's there: {read}/12 (a change without text reads the same)"
    )


# --- sessions: typing and page loads -----------------------------------------------------

_FONT = {}


def _font(name: str, size: int) -> ImageFont.FreeTypeFont:
    key = f"{name}:{size}"
    if key not in _FONT:
        _FONT[key] = ImageFont.truetype(str(font_path(name)), size)
    return _FONT[key]


def _png(im: Image.Image) -> bytes:
    buf = io.BytesIO()
    im.save(buf, "PNG", compress_level=1)
    return buf.getvalue()


_TYPED = (
    "    totals = {region: sum(o.amount for o in orders if o.region == region) "
    "for region in regions}  # cents per region, refunds excluded"
)


def typing_screen(step: int) -> bytes:
    """An editor at 1568x980 after ``step`` keystrokes: one character a step on line 12,
    the caret after it, the status bar's column following; another file every 25 steps."""
    rng = random.Random(step // 25)
    im = Image.new("RGB", (W, H), (250, 250, 251))
    d = ImageDraw.Draw(im)
    ui, mono = _font("DejaVuSans.ttf", 14), _font("DejaVuSansMono.ttf", 14)
    name = f"module_{step // 25}.py"
    d.rectangle((0, 0, W, 32), fill=(38, 41, 48))
    d.text((16, 8), f"{name} - editor", font=ui, fill=(220, 220, 220))
    d.rectangle((0, 32, 260, H - 26), fill=(236, 238, 242))
    for i in range(14):
        d.text((20, 50 + 26 * i), f"module_{i}.py", font=ui, fill=(40, 40, 40))
    words = ["orders", "region", "amount", "total", "paid", "refund", "cents", "report"]
    for i in range(34):
        if i == 11:
            line = _TYPED[: step % 25 * 4 + 4]
        else:
            line = "    " + " ".join(rng.choice(words) for _ in range(rng.randint(2, 9)))
        d.text((290, 50 + 26 * i), f"{i + 1:>3}  {line}", font=mono, fill=(30, 30, 30))
    col = len(_TYPED[: step % 25 * 4 + 4])
    x = 290 + mono.getbbox("0" * (col + 5))[2]
    d.rectangle((x, 50 + 26 * 11, x + 1, 50 + 26 * 11 + 17), fill=(20, 20, 20))
    d.rectangle((0, H - 26, W, H), fill=(230, 232, 236))
    d.text(
        (16, H - 21),
        f"Ln 12, Col {col + 1}   Spaces: 4   UTF-8   Python",
        font=ui,
        fill=(40, 40, 40),
    )
    return _png(im)


def page_screen(step: int) -> bytes:
    """A different web page at 1568x980 every step (a page load)."""
    rng = random.Random(1000 + step)
    im = Image.new("RGB", (W, H), (255, 255, 255))
    d = ImageDraw.Draw(im)
    ui, head = _font("DejaVuSans.ttf", 15), _font("DejaVuSans.ttf", 30)
    d.rectangle((0, 0, W, 60), fill=(rng.randrange(40, 200), rng.randrange(40, 200), 120))
    words = [
        rng.choice(["news", "market", "city", "report", "update", "sport", "art", "food"])
        for _ in range(400)
    ]
    d.text((40, 90), " ".join(words[:6]).title(), font=head, fill=(20, 20, 20))
    for col in range(3):
        x = 40 + col * 500
        d.rectangle((x, 150, x + 460, 400), fill=tuple(rng.randrange(256) for _ in range(3)))
        for row in range(20):
            line = " ".join(rng.choice(words) for _ in range(8))
            d.text((x, 420 + 26 * row), line, font=ui, fill=(40, 40, 40))
    return _png(im)


@dataclass(frozen=True)
class _Run:
    wire: Wire
    model: ModelSpec
    path: str


RUNS = (
    _Run("anthropic", SONNET, "/v1/messages"),
    _Run("openai-responses", get_model("gpt-5"), "/v1/responses"),
)


@dataclass(frozen=True)
class _Result:
    usage: Usage
    image_tokens: int  # what the sent images cost, summed over the steps


def _session(run: _Run, screen: Callable[[int], bytes], crops: bool, steps: int) -> _Result:
    blobs, refits = MemoryBlobStore(), RefitCache()
    args = json.dumps([{"path": "screen.png"}] * (steps + 1))
    record: list[Message] = [UserMessage((TextPart(f"each view {args}"),), turn=1)]
    total, tokens = Usage(), 0
    with (
        serve_in_background(context_tokens=run.model.context_tokens) as url,
        httpx.Client(base_url=url, timeout=120, headers=_HEADERS) as client,
    ):
        for n in range(1, steps + 1):
            data = _fitted(screen(n), run.model)
            _view_step(record, n, data, blobs, cut=crops)
            request = ModelRequest(
                model_view(record, RetentionPolicy(), model=run.model),
                system=SYSTEM,
                tools=TOOLS,
                cache_key="visus-bench",
            )
            body = WIRES[run.wire].cap(
                lower(request, wire=run.wire, model=run.model, blobs=blobs, refit_cache=refits),
                1024,
            )
            for payload in _payloads(body):
                tokens += image_tokens(run.model, *Image.open(io.BytesIO(payload)).size)
            reply = client.post(run.path, json=body)
            reply.raise_for_status()
            parsed = WIRES[run.wire].parse(reply.json(), ReplyContext(run.model))
            assert parsed.usage is not None
            total = total + parsed.usage
    return _Result(total, tokens)


def session_report() -> None:
    steps = int(os.environ.get("VISUS_NEARSAME_STEPS", "100"))
    print(
        f"\nsessions of {steps} steps, visus's defaults (4 live, batches of 4), with and "
        "without only-what-changed:\n"
    )
    print(
        "| session | wire | image tokens sent, whole | with crops | input tokens, whole | "
        "with crops | dollars, whole | with crops | saved |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for label, screen in (("typing", typing_screen), ("page loads", page_screen)):
        for run in RUNS:
            whole = _session(run, screen, False, steps)
            cut = _session(run, screen, True, steps)
            saved = 1 - cut.usage.cost_usd / whole.usage.cost_usd
            print(
                f"| {label} | {run.wire} ({run.model.name}) | {whole.image_tokens:,} | "
                f"{cut.image_tokens:,} | {whole.usage.input_tokens:,} | "
                f"{cut.usage.input_tokens:,} | ${whole.usage.cost_usd:.3f} | "
                f"${cut.usage.cost_usd:.3f} | {saved:.1%} |"
            )
