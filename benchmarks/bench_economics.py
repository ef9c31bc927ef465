"""What a long screen-agent run costs in dollars under each retention strategy.

A 300-step session (totals also at step 100): one user message, then at each step one
1568x980 screenshot comes back from a ``view`` call; about a third of the screens are
unchanged from the step before (the same bytes). Each step's record goes through
visus's own retention (``model_view`` with the wire's ``image_ceiling``) and lowering
(``visus.wire.lower``: Anthropic ``cache_control`` breakpoints, OpenAI
``prompt_cache_key``) and is POSTed to the reference server, whose prompt-cache
accounting follows each provider's documentation (:mod:`visus.reference.cache`) and
which enforces reasoning bound to its prefix (:mod:`visus.reference.binding`); the usage
it answers is priced at list prices (``visus.models.prices``). Models: claude-sonnet-4-6
(no thinking) and gpt-5 as before, and claude-sonnet-5-5 and claude-opus-5-5 thinking
(adaptive; every request with ``drop_block``, as visus sends it): each reply, with its
thinking block, goes into the record and back as returned, and a block the server
drops (its prefix changed) is reasoning done again, billed as output in the next reply.
Each strategy gets a fresh server (an empty cache).

Strategies, side by side, as their code or docs describe them:

* ``claude-code``: keep everything until a provider limit (images per request, request
  bytes, half the context), then drop the oldest half in one batch; append-only
  otherwise (Claude Code keeps its history as sent);
* ``keep-last``: only the newest screenshot (Inspect's ``max_screenshots=1``);
* ``hermes``: hermes-agent's rule: 20 images per request if any image is over 2000 px,
  else 100 (these are 1568 px: 100); 24 MB; the oldest 8 at a time; exact duplicates
  skipped;
* ``visus``: ``policy_for(model)``: the count window (4 live, the window leaving whole)
  on models that do not bind reasoning; append-only up to the family's break-even
  (``APPEND_ONLY_FAMILIES``) on those that do.

claude-code and keep-last send an unchanged screen again (their record holds a copy of
the bytes with one changed metadata byte: the same tokens, as a client resending it pays).

Per step: input tokens, cached share, dollars; per strategy: evicting requests and
reasoning blocks dropped. Checked and printed: visus's total is the lowest (or tied) at
steps 100 and 300; at least 80% of its input tokens from step 3 on are cache reads; no
request of any strategy breaks a provider limit (images per request, request bytes,
context window). A sweep per family shows why the defaults are what they are:
``live_images``/``image_chunk`` pairs, or the append-only break-even in image tokens.

Run: ``.venv/bin/python -m benchmarks economics`` (``VISUS_ECONOMICS_STEPS`` shortens it;
``VISUS_ECONOMICS_MODELS=claude-opus-5-5,gpt-5`` picks models, any Anthropic or OpenAI
catalog id, e.g. ``gpt-6.1-sol``, on its provider's wire;
``VISUS_ECONOMICS_ONLY=visus,hermes,visus@60000/0.9`` runs only those strategies, with a
line of totals each; ``VISUS_ECONOMICS_HOLD=3`` holds each screen three steps;
``VISUS_ECONOMICS_REASONING=1000`` has the reference's thinking models reason 1,000 tokens
a reply instead of their own 48, to see how the choice depends on it).
"""

from __future__ import annotations

import contextlib
import functools
import io
import itertools
import json
import os
import random
import re
import statistics
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from unittest import mock

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
from visus.retention import Ceiling, RetentionPolicy, model_view, policy_for
from visus.wire import WIRES, RefitCache, ReplyContext, Wire, image_ceiling, lower

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
    #: What the strategy itself caps besides the wire's limits (hermes-agent's 24 MB).
    ceiling: Ceiling | None = None


@dataclass(frozen=True)
class Step:
    usage: Usage
    image_tokens: int  # tokens of the live images in the request
    request_bytes: int
    images: int
    elided: int = 0  # images sent as descriptors
    #: Descriptors whose ``view("sha256:...")`` names no stored screenshot, or several:
    #: a re-view of that earlier screen would fail.
    unrestorable: int = 0


@dataclass(frozen=True)
class WireRun:
    wire: Wire
    model: ModelSpec
    max_images: int
    max_bytes: int


def _run_of(wire: Wire, name: str, max_bytes: int) -> WireRun:
    spec = get_model(name)
    return WireRun(wire, spec, spec.max_images, max_bytes)


_ANTHROPIC_BYTES = limits.ANTHROPIC_MAX_REQUEST_BYTES
RUNS: tuple[WireRun, ...] = (
    _run_of("anthropic", "claude-sonnet-4-6", _ANTHROPIC_BYTES),
    _run_of("openai-responses", "gpt-5", 50 * limits.MB),
    # Thinking (adaptive; Opus 5.5 always): each reply's thinking block goes back as
    # returned, bound to its prefix; a dropped block is reasoning billed again.
    _run_of("anthropic", "claude-sonnet-5-5", _ANTHROPIC_BYTES),
    _run_of("anthropic", "claude-opus-5-5", _ANTHROPIC_BYTES),
)
#: The wire and request-byte limit of a model named outside ``RUNS``, by provider.
_WIRE_OF: dict[str, tuple[Wire, int]] = {
    "anthropic": ("anthropic", _ANTHROPIC_BYTES),
    "openai": ("openai-responses", 50 * limits.MB),
}


def _named_run(name: str) -> WireRun:
    """The run of ``name``: from ``RUNS``, else on its provider's wire (gpt-6.1-sol,
    claude-fable-5-2, ...: every binding family measured the same way)."""
    known = next((r for r in RUNS if r.model.name == name), None)
    if known is not None:
        return known
    wire, max_bytes = _WIRE_OF[get_model(name).provider]
    return _run_of(wire, name, max_bytes)


_RUN_NAMES = os.environ.get("VISUS_ECONOMICS_MODELS")
if _RUN_NAMES:
    RUNS = tuple(_named_run(n) for n in _RUN_NAMES.split(","))


def _strategies(run: WireRun) -> list[Strategy]:
    # hermes-agent: 20 images per request if any is over 2000 px, else 100 (these are
    # 1568 px); 24 MB; the oldest 8 at a time; exact duplicates skipped.
    hermes = 20 if max(WIDTH, HEIGHT) > 2000 else 100
    return [
        # Claude Code: keep everything until a provider limit, then drop a batch of the
        # oldest (half of what fits), the history otherwise append-only.
        Strategy(
            "claude-code",
            RetentionPolicy(
                live_images=None, append_only=True, append_tokens=10**9, append_share=0.5
            ),
            dedup=False,
        ),
        Strategy(
            "keep-last",
            RetentionPolicy(live_images=1, image_chunk=1, append_only=False),
            dedup=False,
        ),
        Strategy(
            "hermes",
            RetentionPolicy(live_images=hermes, image_chunk=8, append_only=False),
            dedup=True,
            ceiling=Ceiling(image_bytes=24 * limits.MB),
        ),
        Strategy("visus", policy_for(run.model), dedup=True),
    ]


# --- the session --------------------------------------------------------------------------


@functools.lru_cache(maxsize=512)
def _screen(seed: int, nonce: int = 0) -> bytes:
    """A UI-like screenshot (panels, buttons, text); ``nonce`` changes one metadata byte."""
    data = _drawn(seed)
    if nonce:  # a tEXt chunk before IEND: the same pixels, other bytes
        body = b"tEXt" + b"n\x00" + str(nonce).encode()
        chunk = len(body[4:]).to_bytes(4, "big") + body + zlib.crc32(body).to_bytes(4, "big")
        data = data[:-12] + chunk + data[-12:]
    return data


@functools.lru_cache(maxsize=512)
def _drawn(seed: int) -> bytes:
    """The screen of ``seed`` as a PNG, drawn and encoded once (a resent copy differs
    only in its metadata: :func:`_screen`)."""
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
    return out.getvalue()


#: Calls the instruction lists: more than the longest run takes (see ``main``).
_LIST = 3 * int(os.environ.get("VISUS_ECONOMICS_STEPS", "100"))


#: ``VISUS_ECONOMICS_HOLD=k`` (k > 1): each screen stays k steps (a page loading), so a
#: window of 4 distinct screens spans 4k steps; unset, every third screen is the one before.
_HOLD = int(os.environ.get("VISUS_ECONOMICS_HOLD", "0"))


#: ``VISUS_ECONOMICS_REASONING=R``: the reasoning tokens a thinking reply (or Responses
#: reasoning item) of the reference does (and a dropped block of it costs again),
#: instead of its own 48 at medium effort.
_REASONING = int(os.environ.get("VISUS_ECONOMICS_REASONING", "0"))


def _reasoning() -> contextlib.AbstractContextManager[object]:
    """The reference's reasoning per reply as ``VISUS_ECONOMICS_REASONING`` says (its
    server runs in this process's thread)."""
    stack = contextlib.ExitStack()
    if _REASONING > 0:  # Claude thinking blocks and Responses reasoning items
        for wire in ("wire_claude_thinking", "wire_openai_reasoning"):
            target = f"visus.reference.{wire}.reasoning_tokens"
            stack.enter_context(mock.patch(target, return_value=_REASONING))
    return stack


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
        #: Stored screenshots by the digest prefix a descriptor names.
        self.prefixes: dict[str, set[str]] = {}

    def step(self, n: int, reply: AssistantMessage | None = None) -> None:
        """Step ``n``'s call and screenshot; ``reply``: the model's own (a thinking
        model's, its reasoning kept), else a plain call."""
        if not _unchanged(n):
            self.seed = n
        data = _screen(self.seed, nonce=0 if self.dedup or self.seed == n else n)
        digest = self.blobs.put(data, "image/png")
        self.prefixes.setdefault(digest[: limits.DESCRIPTOR_DIGEST_CHARS], set()).add(digest)
        part = ImagePart(
            digest, "image/png", len(data), WIDTH, HEIGHT, PerceptionOrigin("screen.png")
        )
        if reply is None or not reply.tool_calls:
            call = ToolCall(f"call_{n}", "view", {"path": "screen.png"})
            reply = AssistantMessage(tool_calls=(call,), turn=1)
        call_id = reply.tool_calls[0].id
        self.record.append(reply)
        self.record.append(
            ToolResult(call_id, "view", (TextPart("Viewed screen.png"), part), turn=1)
        )


def _run(run: WireRun, strategy: Strategy, steps: int) -> list[Step]:
    session = Session(steps, strategy.dedup)
    spec = run.model
    out: list[Step] = []
    with (
        _reasoning(),
        serve_in_background(context_tokens=spec.context_tokens) as url,
        httpx.Client(
            base_url=url, timeout=120, headers={"authorization": "Bearer k", "x-api-key": "k"}
        ) as client,
    ):
        # A model whose reasoning is bound to its prefix (Anthropic thinking, OpenAI
        # frontier reasoning items) sends it back as returned: an eviction drops it.
        thinking = spec.thinking != "none" or spec.preserved_thinking
        ceiling = image_ceiling(spec, run.wire)
        if strategy.ceiling is not None:
            ceiling = ceiling.tighter(strategy.ceiling)
        reply: AssistantMessage | None = None
        for n in range(1, steps + 1):
            # A thinking model's own reply (its reasoning) goes into the record.
            session.step(n, reply if thinking else None)
            view = model_view(session.record, strategy.policy, model=spec, ceiling=ceiling)
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
            body = dict(body)
            betas = body.pop("betas", None)  # a header, as the SDK sends them
            raw = json.dumps(body).encode()
            path = "/v1/messages" if run.wire == "anthropic" else "/v1/responses"
            headers = {"content-type": "application/json", "anthropic-version": "2023-06-01"}
            if isinstance(betas, list) and betas:
                headers["anthropic-beta"] = ",".join(str(b) for b in betas)

            answer = client.post(path, content=raw, headers=headers)
            if answer.is_error:
                raise RuntimeError(f"{strategy.name} step {n}: {answer.text[:400]}")
            reply = WIRES[run.wire].parse(answer.json(), ReplyContext(spec))
            assert reply.usage is not None
            live = [p for m in view for p in m.parts if isinstance(p, ImagePart)]
            tokens = sum(image_tokens(spec, p.width, p.height) for p in live)
            notes = [
                p.text
                for m in view
                for p in m.parts
                if isinstance(p, TextPart) and p.text.startswith("[image elided")
            ]
            lost = sum(len(session.prefixes.get(ref, ())) != 1 for ref in _refs(notes))
            out.append(Step(reply.usage, tokens, len(raw), len(live), len(notes), lost))
    return out


_REF = re.compile(r'view\("sha256:([0-9a-f]+)"\)')


def _refs(notes: Sequence[str]) -> list[str]:
    """The digest prefix each elided screenshot's descriptor tells the model to view
    (a note that names none counts as one that cannot be restored)."""
    return [m.group(1) if (m := _REF.search(n)) else "" for n in notes]


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
            f" | {'':>16}${sum(s.usage.cost_usd for s in st):>9.3f}" for st in results.values()
        )
    )


#: Strategies run to ``steps`` only (``VISUS_ECONOMICS_SHORT=claude-code,hermes``); the
#: rest to 3x. Every strategy runs to 3x by default (the reference reads each resent
#: image's header once and compares JSON by fingerprint: claude-code's 300 steps of
#: up to 300 live screenshots take minutes).
_SHORT = tuple(n for n in os.environ.get("VISUS_ECONOMICS_SHORT", "").split(",") if n)
#: ``VISUS_ECONOMICS_ONLY=visus,hermes,visus@60000/0.5``: only these strategies, each to
#: 3x the steps, with a line of totals each (``visus@TOKENS[/SHARE]``: visus append-only
#: with that break-even and share; ``visus+weigh``: with ``weigh_reasoning``), nothing else.
_ONLY = tuple(n for n in os.environ.get("VISUS_ECONOMICS_ONLY", "").split(",") if n)


def _named(run: WireRun, name: str) -> Strategy:
    """A strategy of :func:`_strategies` by name, ``visus@TOKENS[/SHARE]``, or
    ``visus+weigh`` (visus's defaults with ``weigh_reasoning``)."""
    if name == "visus+weigh":
        return Strategy(name, RetentionPolicy(weigh_reasoning=True), dedup=True)
    if not name.startswith("visus@"):
        return next(s for s in _strategies(run) if s.name == name)
    tokens, _, share = name.removeprefix("visus@").partition("/")
    policy = RetentionPolicy(append_tokens=int(tokens), append_share=float(share or 0.5))
    return Strategy(name, policy, dedup=True)


def _only(steps: int) -> None:
    """``VISUS_ECONOMICS_ONLY``: each named strategy to ``3 * steps`` on each model, its
    dollars at ``steps``, ``2 * steps`` and ``3 * steps`` and how it got there."""
    for run in RUNS:
        for name in _ONLY:
            started = time.perf_counter()
            st = _run(run, _named(run, name), 3 * steps)
            totals = " / ".join(
                f"${sum(s.usage.cost_usd for s in st[:at]):.3f}"
                for at in (steps, 2 * steps, 3 * steps)
            )
            evictions = sum(b.elided > a.elided for a, b in itertools.pairwise(st))
            print(
                f"{run.model.name} {name}: {totals} at steps {steps}/{2 * steps}/{3 * steps}; "
                f"{evictions} evicting requests, "
                f"{sum(s.usage.reasoning_dropped for s in st)} reasoning blocks dropped, "
                f"most live {max(s.images for s in st)}, largest request "
                f"{max(s.request_bytes for s in st) / limits.MB:.1f} MB, "
                f"{_breaks(run, st)} over a provider limit, "
                f"{sum(s.unrestorable for s in st)} descriptors no re-view restores "
                f"({time.perf_counter() - started:.0f} s)",
                flush=True,
            )


def _sweep(run: WireRun, steps: int) -> None:
    """Dollars at ``steps`` for the knobs of the model's family: the append-only
    break-even (image tokens; half of what fits leaves) where the history is
    append-only, else ``live_images``/``image_chunk``."""
    spec = run.model
    if policy_for(spec).append_only:
        print(
            f"\nsweep on {spec.name}: append_tokens/append_share -> dollars at step {steps}, "
            "mean live"
        )
        # An eviction rewrites what stays live: the share that leaves matters as much as
        # the break-even (benchmarks/RESULTS.md "The accounting fixed").
        for tokens, share in ((10_000, 0.9), (20_000, 0.9), (40_000, 0.9), (60_000, 0.5)):
            policy = RetentionPolicy(append_tokens=tokens, append_share=share)
            result = _run(run, Strategy("sweep", policy, dedup=True), steps)
            _say_sweep(f"{tokens:>7,}/{share}", result)
        return
    print(f"\nsweep on {spec.name}: live_images/image_chunk -> dollars at step {steps}, mean live")
    for live, chunk in ((10, 10), (6, 6), (4, 4), (3, 3), (1, 1)):
        policy = RetentionPolicy(live_images=live, image_chunk=chunk)
        _say_sweep(f"{live:>2}/{chunk:<2}", _run(run, Strategy("sweep", policy, True), steps))


def _say_sweep(label: str, result: Sequence[Step]) -> None:
    mean_live = statistics.mean(s.images for s in result)
    total = sum(s.usage.cost_usd for s in result)
    dropped = sum(s.usage.reasoning_dropped for s in result)
    print(f"  {label} ${total:8.3f}  {mean_live:5.1f} live  {dropped} reasoning blocks dropped")


def main() -> None:
    steps = int(os.environ.get("VISUS_ECONOMICS_STEPS", "100"))
    if _ONLY:
        _only(steps)
        return
    long_steps = 3 * steps
    started = time.perf_counter()
    verdicts: list[tuple[str, bool]] = []
    for run in RUNS:
        name = f"{run.wire} {run.model.name}"
        # Every strategy to 3x unless VISUS_ECONOMICS_SHORT names it (see _SHORT).
        results = {
            s.name: _run(run, s, steps if s.name in _SHORT else long_steps)
            for s in _strategies(run)
        }
        marks = [n for n in (1, 2, 3, 10, 30, 50, 100, 200, 300) if n <= long_steps]
        _table(run, results, marks)
        visus = results["visus"]
        for at in (steps, long_steps):
            totals = {
                k: sum(s.usage.cost_usd for s in st[:at])
                for k, st in results.items()
                if len(st) >= at
            }
            said = ", ".join(f"{k} ${v:.3f}" for k, v in totals.items())
            print(f"  totals at step {at}: {said}")
            cheapest = totals["visus"] <= min(totals.values()) + 1e-9
            verdicts.append((f"{name}: visus cheapest at step {at}", cheapest))
        for k, st in results.items():
            dropped = sum(s.usage.reasoning_dropped for s in st)
            evictions = sum(b.elided > a.elided for a, b in itertools.pairwise(st))
            print(f"  {k}: {evictions} evicting requests, {dropped} reasoning blocks dropped")
        early = statistics.mean(
            _image_cost(s) for s in visus[max(0, steps // 10 * 3 - 10) : max(1, steps // 10 * 3)]
        )
        late = statistics.mean(_image_cost(s) for s in visus[long_steps - 10 : long_steps])
        read = _read_share(visus)
        breaks = {k: _breaks(run, st) for k, st in results.items()}
        print(f"  visus images' cost per step: {late / early:.2f}x step {steps // 10 * 3}'s")
        print(f"  visus cache reads from step 3 on: {read:.1%} of input tokens")
        print(f"  requests over a provider limit: {breaks}")
        lost = {k: sum(s.unrestorable for s in st) for k, st in results.items()}
        print(f"  descriptors naming no stored screenshot (a failed re-view): {lost}")
        verdicts += [
            (f"{name}: >=80% cache reads from step 3", read >= 0.8),
            (f"{name}: no request breaks a provider limit", not any(breaks.values())),
            (f"{name}: every elided screenshot can be viewed again", not any(lost.values())),
        ]
        _sweep(run, steps)
        print(f"  ({run.model.name} done at {time.perf_counter() - started:.0f}s)", flush=True)
    print("\ngoals:")
    for text, ok in verdicts:
        print(f"  [{'ok' if ok else 'MISSED'}] {text}")
    print(f"(run in {time.perf_counter() - started:.0f}s)")
