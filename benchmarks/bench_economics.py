"""What a long screen-agent run costs in dollars under each retention strategy.

A 100-step session: one user message, then at each step one 1568x980 screenshot comes
back from a ``view`` call; about a third of the screens are unchanged from the step
before (the same bytes). Each step's record goes through visus's own retention
(``model_view``) and lowering (``visus.wire.lower``: Anthropic ``cache_control``
breakpoints, OpenAI ``prompt_cache_key``) and is POSTed to the reference server, whose
prompt-cache accounting follows each provider's documentation
(:mod:`visus.reference.cache`); the usage it answers is priced at list prices by
``visus.models.prices`` (genai-prices: cache writes 1.25x and reads 0.1x the input price
on Claude, cached input at a tenth on GPT-5). Wires: Anthropic (claude-sonnet-4-6) and
OpenAI Responses (gpt-5). Each strategy gets a fresh server (an empty cache).

Strategies, side by side:

* ``keep-all``: every screenshot stays, with caching (Claude Code, Anthropic's
  computer-use demo);
* ``keep-last``: only the newest screenshot (Inspect's ``max_screenshots=1``);
* ``evict-at-limit``: everything until the provider's image limit (Anthropic 100 per
  request, OpenAI 500), then the oldest leave in batches of 20 (hermes-agent);
* ``visus``: visus's defaults (``RetentionPolicy()``: at most 4 live, the oldest
  leaving 4 at a time, an unchanged screen sent as a one-line note).

The other strategies send an unchanged screen again (their record holds a copy of the
bytes with one changed metadata byte: the same tokens, as a client resending it pays).

Per step: input tokens, cached share, dollars. Checked and printed: visus's total is
the lowest at step 100; its images' cost per step stays flat to step 300 (the mean over
the 10 steps ending at 300 within 1.2x of those ending at 30); at least 80% of its input
tokens from step 3 on are cache reads; no request of any strategy breaks a provider
limit (images per request, request bytes, context window). A sweep over
``live_images``/``image_chunk`` pairs shows why the defaults are what they are.

Run: ``.venv/bin/python -m benchmarks economics`` (``VISUS_ECONOMICS_STEPS`` shortens it;
``VISUS_ECONOMICS_HOLD=3`` holds each screen three steps).
"""

from __future__ import annotations

import functools
import io
import json
import os
import random
import statistics
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import httpx
from PIL import Image, ImageDraw

from visus import limits
from visus.models import get_model, image_tokens
from visus.models.spec import ModelSpec
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
from visus.retention import RetentionPolicy, model_view
from visus.wire import WIRES, RefitCache, ReplyContext, Wire, lower

WIDTH, HEIGHT = 1568, 980
#: A screen agent's instructions run to thousands of tokens (Anthropic's computer-use
#: prompt and tool schemas are ~2-3k): here ~2,500, so every strategy's head is cached.
SYSTEM = (
    "You operate a computer through screenshots. Call view to see the screen after each "
    "action; older screenshots may be elided, call view again to see them.\n"
    + "\n".join(
        f"Rule {i}: before acting on element {i}, check that the screen shows it enabled, "
        "then act once and look again."
        for i in range(1, 101)
    )
)
TOOLS = (
    ToolSpec(
        "view",
        "See a file, URL or sha256:<digest> as pixels.",
        {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    ),
)


@dataclass(frozen=True)
class Strategy:
    name: str
    policy: RetentionPolicy
    #: Whether an unchanged screen reaches the record as the same bytes (visus knows).
    dedup: bool


@dataclass(frozen=True)
class Step:
    usage: Usage
    image_tokens: int  # tokens of the live images in the request
    request_bytes: int
    images: int


@dataclass(frozen=True)
class WireRun:
    wire: Wire
    model: ModelSpec
    max_images: int
    max_bytes: int


RUNS = (
    WireRun("anthropic", get_model("claude-sonnet-4-6"), 100, limits.ANTHROPIC_MAX_REQUEST_BYTES),
    WireRun("openai-responses", get_model("gpt-5"), 500, 50 * limits.MB),
)


def _strategies(run: WireRun) -> list[Strategy]:
    return [
        Strategy("keep-all", RetentionPolicy(live_images=None), dedup=False),
        Strategy("keep-last", RetentionPolicy(live_images=1, image_chunk=1), dedup=False),
        Strategy(
            "evict-at-limit",
            RetentionPolicy(live_images=run.max_images, image_chunk=20),
            dedup=False,
        ),
        Strategy("visus", RetentionPolicy(), dedup=True),
    ]


# --- the session --------------------------------------------------------------------------


@functools.lru_cache(maxsize=512)
def _screen(seed: int, nonce: int = 0) -> bytes:
    """A UI-like screenshot (panels, buttons, text); ``nonce`` changes one metadata byte."""
    rnd = random.Random(seed)
    im = Image.new("RGB", (WIDTH, HEIGHT), (246, 246, 248))
    draw = ImageDraw.Draw(im)
    for i in range(60):
        x, y = rnd.randrange(0, WIDTH - 320), rnd.randrange(0, HEIGHT - 60)
        shade = rnd.randrange(120, 235)
        draw.rectangle(
            [x, y, x + rnd.randrange(60, 320), y + rnd.randrange(18, 60)], fill=(shade,) * 3
        )
        draw.text((x + 6, y + 4), f"Item {seed}.{i} ready", fill=(20, 20, 20))
    out = io.BytesIO()
    im.save(out, "PNG", compress_level=1)
    data = out.getvalue()
    if nonce:  # a tEXt chunk before IEND: the same pixels, other bytes
        body = b"tEXt" + b"n\x00" + str(nonce).encode()
        chunk = len(body[4:]).to_bytes(4, "big") + body + zlib.crc32(body).to_bytes(4, "big")
        data = data[:-12] + chunk + data[-12:]
    return data


#: Calls the instruction lists: more than the longest run takes (see ``main``).
_LIST = 3 * int(os.environ.get("VISUS_ECONOMICS_STEPS", "100"))


#: ``VISUS_ECONOMICS_HOLD=k`` (k > 1): each screen stays k steps (a page loading), so a
#: window of 4 distinct screens spans 4k steps; unset, every third screen is the one before.
_HOLD = int(os.environ.get("VISUS_ECONOMICS_HOLD", "0"))


def _unchanged(step: int) -> bool:
    return step % _HOLD != 0 if _HOLD > 1 else step % 3 == 0


class Session:
    """The record of one run, grown a step at a time, with its screenshots' blobs."""

    def __init__(self, steps: int, dedup: bool) -> None:
        steps = _LIST  # the same instruction (list) in every run: the same prompt bytes
        self.blobs = MemoryBlobStore()
        self.refits = RefitCache()  # a screenshot is fitted once, as the agent does
        # One call more than the run takes: the reference model calls view at every step
        # and never stops to describe (OCR) the screens.
        args = json.dumps([{"path": "screen.png"}] * (steps + 1))
        self.record: list[Message] = [UserMessage((TextPart(f"each view {args}"),), turn=1)]
        self.dedup = dedup
        self.seed = 0

    def step(self, n: int) -> None:
        if not _unchanged(n):
            self.seed = n
        data = _screen(self.seed, nonce=0 if self.dedup or self.seed == n else n)
        digest = self.blobs.put(data, "image/png")
        part = ImagePart(
            digest, "image/png", len(data), WIDTH, HEIGHT, PerceptionOrigin("screen.png")
        )
        call = ToolCall(f"call_{n}", "view", {"path": "screen.png"})
        self.record.append(AssistantMessage(tool_calls=(call,), turn=1))
        self.record.append(
            ToolResult(f"call_{n}", "view", (TextPart("Viewed screen.png"), part), turn=1)
        )


def _run(run: WireRun, strategy: Strategy, steps: int) -> list[Step]:
    session = Session(steps, strategy.dedup)
    spec = run.model
    out: list[Step] = []
    with (
        serve_in_background(context_tokens=spec.context_tokens) as url,
        httpx.Client(
            base_url=url, timeout=120, headers={"authorization": "Bearer k", "x-api-key": "k"}
        ) as client,
    ):
        for n in range(1, steps + 1):
            session.step(n)
            view = model_view(session.record, strategy.policy, model=spec)
            request = ModelRequest(view, system=SYSTEM, tools=TOOLS, cache_key="visus-bench")
            body = WIRES[run.wire].cap(
                lower(
                    request,
                    wire=run.wire,
                    model=spec,
                    blobs=session.blobs,
                    refit_cache=session.refits,
                ),
                1024,
            )
            raw = json.dumps(body).encode()
            path = "/v1/messages" if run.wire == "anthropic" else "/v1/responses"
            headers = {"content-type": "application/json", "anthropic-version": "2023-06-01"}
            reply = client.post(path, content=raw, headers=headers)
            reply.raise_for_status()
            parsed = WIRES[run.wire].parse(reply.json(), ReplyContext(spec))
            assert parsed.usage is not None
            live = [p for m in view for p in m.parts if isinstance(p, ImagePart)]
            tokens = sum(image_tokens(spec, p.width, p.height) for p in live)
            out.append(Step(parsed.usage, tokens, len(raw), len(live)))
    return out


# --- reporting ----------------------------------------------------------------------------


def _image_cost(step: Step) -> float:
    """The images' share of a step's input cost (their tokens at the step's mean price)."""
    u = step.usage
    return step.usage.cost_usd * step.image_tokens / u.input_tokens if u.input_tokens else 0.0


def _read_share(steps: Sequence[Step]) -> float:
    later = steps[2:]
    total = sum(s.usage.input_tokens for s in later)
    return sum(s.usage.cache_read_tokens for s in later) / total if total else 0.0


def _breaks(run: WireRun, steps: Sequence[Step]) -> int:
    return sum(
        s.images > run.max_images
        or s.request_bytes > run.max_bytes
        or s.usage.input_tokens > run.model.context_tokens
        for s in steps
    )


def _table(run: WireRun, results: dict[str, list[Step]], marks: Sequence[int]) -> None:
    print(f"\n{run.wire} ({run.model.name}): per step input tokens / cached share / dollars")
    head = f"{'step':>5}" + "".join(f" | {name:>27}" for name in results)
    print(head)
    for n in marks:
        cells = []
        for steps in results.values():
            if n > len(steps):
                cells.append(f" | {'':>27}")
                continue
            u = steps[n - 1].usage
            share = u.cache_read_tokens / u.input_tokens if u.input_tokens else 0
            cells.append(f" | {u.input_tokens:>9,} {share:>5.0%} ${u.cost_usd:>9.4f}")
        print(f"{n:>5}" + "".join(cells))
    print(
        f"{'total':>5}"
        + "".join(
            f" | {'':>16}${sum(s.usage.cost_usd for s in st[:100]):>9.3f}"
            for st in results.values()
        )
    )


def _sweep(run: WireRun, steps: int) -> None:
    print(f"\nsweep on {run.wire}: live_images/image_chunk -> dollars at step {steps}, mean live")
    for live, chunk in ((10, 5), (10, 10), (6, 6), (4, 4), (3, 3), (1, 1)):
        policy = RetentionPolicy(live_images=live, image_chunk=chunk)
        result = _run(run, Strategy("sweep", policy, dedup=True), steps)
        mean_live = statistics.mean(s.images for s in result)
        total = sum(s.usage.cost_usd for s in result)
        print(f"  {live:>2}/{chunk:<2} ${total:8.3f}  {mean_live:4.1f} live")


def main() -> None:
    steps = int(os.environ.get("VISUS_ECONOMICS_STEPS", "100"))
    long_steps = 3 * steps
    started = time.perf_counter()
    verdicts: list[tuple[str, bool]] = []
    for run in RUNS:
        results = {s.name: _run(run, s, steps) for s in _strategies(run)}
        results["visus"] = _run(run, _strategies(run)[-1], long_steps)
        marks = [n for n in (1, 2, 3, 10, 30, 50, 100, 200, 300) if n <= long_steps]
        _table(run, results, marks)
        totals = {name: sum(s.usage.cost_usd for s in st[:steps]) for name, st in results.items()}
        visus = results["visus"]
        early = statistics.mean(
            _image_cost(s) for s in visus[max(0, steps // 10 * 3 - 10) : steps // 10 * 3]
        )
        late = statistics.mean(_image_cost(s) for s in visus[long_steps - 10 : long_steps])
        cheapest = min(totals, key=lambda k: totals[k])
        read = _read_share(visus)
        breaks = {name: _breaks(run, st) for name, st in results.items()}
        print(f"  totals at step {steps}: " + ", ".join(f"{k} ${v:.3f}" for k, v in totals.items()))
        at = steps // 10 * 3
        print(
            f"  visus images' cost per step: ${early:.5f} around step {at}, "
            f"${late:.5f} at step {long_steps} ({late / early:.2f}x)"
        )
        print(f"  visus cache reads from step 3 on: {read:.1%} of input tokens")
        print(f"  requests over a provider limit: {breaks}")
        verdicts += [
            (f"{run.wire}: visus cheapest at step {steps}", cheapest == "visus"),
            (f"{run.wire}: images' cost flat to step {long_steps} (<=1.2x)", late <= 1.2 * early),
            (f"{run.wire}: >=80% cache reads from step 3", read >= 0.8),
            (f"{run.wire}: no request breaks a provider limit (visus)", breaks["visus"] == 0),
        ]
        _sweep(run, steps)
    print("\ngoals:")
    for text, ok in verdicts:
        print(f"  [{'ok' if ok else 'MISSED'}] {text}")
    print(f"(run in {time.perf_counter() - started:.0f}s)")
