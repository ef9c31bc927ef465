"""Agent overhead per step, excluding model time, over a 200-turn session.

Every turn the user asks the agent to look at a fresh 1568x733 text-heavy UI
screenshot (the size a client fitting screenshots to Anthropic's 1.15 MP sends, so
``view`` passes it through rather than resizing it). The provider is a double: its
``complete()`` lowers the request through the real ``visus.wire.lower`` (Anthropic
wire, claude-sonnet-4-6, so lowering and the live blob's verified read count as agent
cost) and returns a canned reply at once: a ``view`` tool call on a turn's first
step, a short answer on its second. So each turn is two steps and runs the real
loop: load the session log, record the user message, retention (``model_view``),
lowering, the real ``view`` tool (decode, fit, encode, blob put), recording the
call, its result and the answer (each append fsynced).

The baseline, measured in the same run on the same requests, is ``json.dumps`` of
each lowered request payload: the least any client must do to send it.

Reported per step (a turn's wall and CPU time minus the double's own time, the
baseline and the view tool's image work, over its two steps), for turns 1-10,
191-200 and the median over all, with each part of the turn timed by thin wrappers
around the stores, the tool registry and ``model_view``.

The agent loads the whole session log at the start of every turn. A second run of
the same 200 turns uses a session store that keeps the history of a session it wrote
in memory and re-reads the file only when it changed behind its back: a prototype of
keeping the history in the agent between turns, to show what that would save.

Run: ``.venv/bin/python -m benchmarks agent``
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw, ImageFont

import visus.agent.loop as agent_loop
from visus.agent import Agent
from visus.agent.tools import ToolContext, ToolOutcome, ToolRegistry
from visus.models import ModelSpec, get_model
from visus.perception import Reach
from visus.record.blobs import FileBlobStore
from visus.record.messages import (
    AssistantMessage,
    Message,
    ModelRequest,
    TextPart,
    ToolCall,
    ToolResult,
    Usage,
)
from visus.record.sessions import LoadedSession, SessionStore
from visus.retention import RetentionPolicy
from visus.wire import BlobReader, RefitCache, Wire, lower

MODEL = "claude-sonnet-4-6"
WIRE: Wire = "anthropic"
TURNS = 200
SESSION = "bench"

# Per-turn timings, keyed by part; every wrapper adds to the current turn's bucket.
_Timings = dict[str, float]


@dataclass
class Clock:
    """Accumulates seconds per part for the turn being run."""

    turns: list[_Timings] = field(default_factory=list)

    def start_turn(self) -> None:
        self.turns.append(defaultdict(float))

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.turns[-1][name] += time.perf_counter() - t0
            self.turns[-1][name + "_cpu"] += time.process_time() - c0


def _screenshot_png(i: int, w: int = 1568, h: int = 733) -> bytes:
    """A text-heavy editor screenshot: title bar, sidebar and rows of coloured code."""
    import io

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
            word = "".join(
                rnd.choice("abcdefghijklmnopqrstuvwxyz_") for _ in range(rnd.randint(2, 9))
            )
            colour = rnd.choice([(86, 156, 214), (206, 145, 120), (181, 206, 168), (220, 220, 170)])
            draw.text((x, y), word, fill=colour, font=font)
            x += 9 * len(word) + 9
            if x > w - 80:
                break
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


class TimedSessions(SessionStore):
    def __init__(self, root: Path, clock: Clock) -> None:
        super().__init__(root)
        self.clock = clock

    def load(self, session_id: str, *, blobs: Any = None) -> LoadedSession:
        with self.clock.part("load"):
            return super().load(session_id, blobs=blobs)

    def append(self, session_id: str, message: Message) -> None:
        with self.clock.part("append"):
            super().append(session_id, message)


class TimedBlobs(FileBlobStore):
    def __init__(self, root: Path, clock: Clock) -> None:
        super().__init__(root)
        self.clock = clock

    def put(self, data: bytes, media_type: str) -> str:
        with self.clock.part("blob_put"):
            return super().put(data, media_type)


class TimedTools(ToolRegistry):
    def __init__(self, clock: Clock) -> None:
        base = ToolRegistry.builtin()
        super().__init__(t for n in base.names() if (t := base.get(n)) is not None)
        self.clock = clock

    async def call(self, name: str, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutcome:
        with self.clock.part("tool"):
            return await super().call(name, args, ctx)


@dataclass
class CannedClient:
    """A provider double: lowers for real, then answers from a script instantly."""

    clock: Clock
    provider: str = "bench"
    wire: Wire = WIRE
    request_bytes: list[int] = field(default_factory=list)

    async def complete(
        self,
        request: ModelRequest,
        *,
        model: ModelSpec,
        blobs: BlobReader,
        on_delta: Any = None,
        refit_cache: RefitCache | None = None,
    ) -> AssistantMessage:
        with self.clock.part("lower"):
            payload = lower(
                request, wire=self.wire, model=model, blobs=blobs, refit_cache=refit_cache
            )
        # The baseline: serialising the same request, timed apart from the agent.
        with self.clock.part("baseline"):
            body = json.dumps(payload)
        self.request_bytes.append(len(body))
        with self.clock.part("canned"):
            last = request.messages[-1]
            turn = last.turn
            if isinstance(last, ToolResult):
                return AssistantMessage(
                    parts=(TextPart(f"Screen {turn} shows an editor with code."),),
                    turn=turn,
                    model=model.name,
                    usage=Usage(1000, 12),
                )
            call = ToolCall(f"call_{turn:04d}", "view", {"path": f"screen{turn}.png"})
            return AssistantMessage(
                tool_calls=(call,), turn=turn, model=model.name, usage=Usage(1000, 20)
            )


async def _run(
    root: Path, shots: Sequence[bytes], sessions: type[TimedSessions]
) -> tuple[Clock, CannedClient]:
    clock = Clock()
    work = root / "work"
    work.mkdir()
    client = CannedClient(clock)
    agent = Agent(
        client=client,
        model=get_model(MODEL),
        sessions=sessions(root / "sessions", clock),
        blobs=TimedBlobs(root / "blobs", clock),
        reach=Reach([work]),
        tools=TimedTools(clock),
        policy=RetentionPolicy(),
    )
    # model_view is looked up in the loop's module at each call; time it there.
    real_view = vars(agent_loop)["model_view"]

    def timed_view(*args: Any, **kwargs: Any) -> Any:
        with clock.part("model_view"):
            return real_view(*args, **kwargs)

    vars(agent_loop)["model_view"] = timed_view
    try:
        for turn in range(1, TURNS + 1):
            (work / f"screen{turn}.png").write_bytes(shots[turn - 1])
            clock.start_turn()
            with clock.part("wall"):
                result = await agent.run_turn(SESSION, f"What is on screen {turn}?")
            assert result.steps == 2, result
            assert result.stopped == "answer"
    finally:
        vars(agent_loop)["model_view"] = real_view
    # The record holds every turn; each turn viewed and stored its own screenshot.
    loaded = SessionStore(root / "sessions").load(SESSION)
    assert len(loaded.messages) == 4 * TURNS, len(loaded.messages)
    digests = {
        p.digest for m in loaded.messages if m.kind == "tool" for p in m.parts if p.kind == "image"
    }
    assert len(digests) == TURNS, len(digests)
    return clock, client


def _derive(turn: _Timings) -> dict[str, float]:
    """Per-step figures of one turn (two steps), in milliseconds."""
    out: dict[str, float] = {}
    for sfx in ("", "_cpu"):
        # The double's own time and the baseline are not the agent's; nor is the view
        # tool's image work (decode, fit, encode). Storing its result (blob put) is.
        image_work = turn["tool" + sfx] - turn["blob_put" + sfx]
        own = turn["canned" + sfx] + turn["baseline" + sfx] + image_work
        out["overhead" + sfx] = (turn["wall" + sfx] - own) / 2 * 1000
        out["baseline" + sfx] = turn["baseline" + sfx] / 2 * 1000
        out["image_work" + sfx] = image_work * 1000
        for key in ("load", "append", "model_view", "lower", "blob_put"):
            out[key + sfx] = turn[key + sfx] * 1000
    return out


def _median(rows: Sequence[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in rows)


_HEADER = (
    "| turns | overhead/step ms | baseline/step ms | ratio | overhead/step CPU ms | "
    "baseline/step CPU ms | CPU ratio | load ms/turn | appends ms/turn | "
    "model_view ms/turn | lower ms/turn | blob put ms/turn | view image work ms/turn |\n"
    "| --- |" + " ---: |" * 12
)


def _row(label: str, rows: Sequence[dict[str, float]]) -> str:
    m = {k: _median(rows, k) for k in rows[0]}
    return (
        f"| {label} | {m['overhead']:.1f} | {m['baseline']:.2f} | "
        f"x{m['overhead'] / m['baseline']:.1f} | {m['overhead_cpu']:.2f} | "
        f"{m['baseline_cpu']:.2f} | x{m['overhead_cpu'] / m['baseline_cpu']:.1f} | "
        f"{m['load']:.1f} | {m['append']:.1f} | {m['model_view']:.2f} | {m['lower']:.1f} | "
        f"{m['blob_put']:.1f} | {m['image_work']:.0f} |"
    )


def _report(title: str, clock: Clock, client: CannedClient) -> dict[str, float]:
    rows = [_derive(t) for t in clock.turns]
    first, last = rows[:10], rows[-10:]
    print(f"\n{title}\n")
    print(_HEADER)
    print(_row("1-10", first))
    print(_row(f"{TURNS - 9}-{TURNS}", last))
    print(_row(f"all {TURNS} (median)", rows))
    print()
    canned = statistics.median(t["canned"] for t in clock.turns) * 1e6
    # Step 1 of a turn carries no live image (text history and tools); step 2 carries
    # the screenshot just viewed.
    text_only, with_image = client.request_bytes[0::2], client.request_bytes[1::2]
    print(f"canned reply (the double's own time): median {canned:.0f} µs per turn")
    print(
        f"request bytes, step 1 (no live image): turn 1 {text_only[0]:,}, "
        f"turn {TURNS} {text_only[-1]:,}; step 2 (one live image): turn 1 "
        f"{with_image[0]:,}, turn {TURNS} {with_image[-1]:,}"
    )

    def ratio(key: str) -> str:
        before = _median(first, key)
        return f"{key} x{_median(last, key) / before:.2f}" if before else f"{key} (none)"

    growth = ", ".join(
        ratio(key) for key in ("overhead", "overhead_cpu", "baseline_cpu", "load_cpu", "lower_cpu")
    )
    print(f"turns {TURNS - 9}-{TURNS} vs 1-10: {growth}")
    share = statistics.median(r["load_cpu"] / 2 / r["overhead_cpu"] for r in last)
    print(f"load's share of the per-step CPU overhead in turns {TURNS - 9}-{TURNS}: {share:.0%}")
    return {"overhead_cpu_last": _median(last, "overhead_cpu")}


def main() -> None:
    print(f"agent overhead per step, {TURNS} turns x 2 steps, one fresh 1568x733 view per turn")
    print(f"({MODEL} on the {WIRE} wire; provider double lowers for real, replies canned)")
    t0 = time.perf_counter()
    shots = [_screenshot_png(turn) for turn in range(1, TURNS + 1)]
    print(f"made {TURNS} screenshots in {time.perf_counter() - t0:.1f}s")
    results: list[dict[str, float]] = []
    # The agent keeps a session's history in memory while the log is as it left it,
    # so the per-turn load column stays at zero after the first turn.
    for title, store in (("the agent (history kept in memory between turns)", TimedSessions),):
        with tempfile.TemporaryDirectory() as tmp:
            t1 = time.perf_counter()
            clock, client = asyncio.run(_run(Path(tmp), shots, store))
            elapsed = time.perf_counter() - t1
            log = (Path(tmp) / "sessions" / f"{SESSION}.jsonl").stat().st_size
        results.append(_report(title, clock, client))
        print(f"session log after {TURNS} turns: {log:,} bytes; run took {elapsed:.1f}s")
    last_cpu = results[0]["overhead_cpu_last"]
    print(f"\nCPU overhead per step in turns {TURNS - 9}-{TURNS}: {last_cpu:.2f} ms")


if __name__ == "__main__":
    main()
