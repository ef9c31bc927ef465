"""``visus run`` and ``visus usage``: one agent turn from the terminal, and what a
session cost (``visus chat`` lives in ``_chat.py`` and is registered here)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from visus.cli._agent import (
    ContinueOpt,
    DataOpt,
    EffortOpt,
    MaxStepsOpt,
    McpOpt,
    ModelOpt,
    NewSessionOpt,
    RootOpt,
    SessionOpt,
    agent_for,
    cached,
    error_text,
    session_id,
)
from visus.cli._progress import Progress
from visus.cli._turn import save_images, tool_lines

if TYPE_CHECKING:
    from visus.agent import Agent, PastedImage, TurnResult
    from visus.record.messages import ToolCall, Usage
    from visus.telemetry.ledger import Row

#: ``visus run``'s exit status when the turn used its whole step budget without an answer.
EXIT_STEP_BUDGET = 4  # visus --help's exit-code table (3 is an input refused)

PromptArg = Annotated[
    str | None,
    typer.Argument(
        help="The user message; piped stdin is the message, or goes with it "
        "(text first, an image attached)",
        show_default=False,
    ),
]
ImageOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--image",
        "-i",
        metavar="FILE|URL",
        help="Image to paste: a file, or an https URL fetched through visus's SSRF gate "
        "(repeatable)",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object")]
SaveImagesOpt = Annotated[
    Path | None,
    typer.Option(
        "--save-images",
        metavar="DIR",
        help="Folder to write the images the agent sends out (send_image)",
        show_default=False,
    ),
]


def run(
    prompt: PromptArg = None,
    model: ModelOpt = None,
    image: ImageOpt = None,
    session: SessionOpt = None,
    new_session: NewSessionOpt = None,
    cont: ContinueOpt = False,
    root: RootOpt = None,
    data: DataOpt = None,
    mcp: McpOpt = None,
    as_json: JsonOpt = False,
    max_steps: MaxStepsOpt = None,
    save_images: SaveImagesOpt = None,
    effort: EffortOpt = None,
) -> None:
    """Run one agent turn and print the answer.

    The answer goes to stdout; the tools the agent called, the images it sent and the
    session's usage go to stderr (with --json, stdout holds exactly one JSON object).
    A turn that used up its step budget without answering says so and exits 4.
    """
    from visus.cli._common import model_line
    from visus.cli._inputs import fitted_images, pasted_images, prompt_and_stdin

    sid = session_id(session, cont, data, new_session)
    text, pasted = prompt_and_stdin(prompt)
    pasted += pasted_images(image or [])
    agent = agent_for(model, data, root, mcp, max_steps, effort)
    pasted = fitted_images(pasted, agent.model.profile())  # exit 3 before anything runs
    if agent.config is not None:  # which model, and why: a key in the shell bills
        typer.echo(model_line(model, agent.config, agent.model_ref), err=True)
    screen = _Screen(agent, streamed=not as_json)
    result = _one_turn(agent, sid, text, pasted, screen)
    if not as_json:
        screen.end_line()
        for line in (*tool_lines(result), *(f"  note: {n}" for n in result.notes)):
            typer.echo(line, err=True)
    _save(result, save_images)
    if as_json:
        typer.echo(json.dumps(_json_result(result, agent.max_steps)))
    else:
        _summary(result)
    if result.stopped == "step_limit":
        raise typer.Exit(EXIT_STEP_BUDGET)


class _Screen:
    """Where a running turn shows: the answer streams to stdout (not with --json), the
    phase it waits on is a spinner on stderr."""

    def __init__(self, agent: Agent, *, streamed: bool) -> None:
        self.agent = agent
        self.streamed = streamed
        self.progress = Progress()
        self.at_line_start = True

    def delta(self, delta: str) -> None:
        self.progress.stop()
        if self.streamed and delta:
            sys.stdout.write(delta)
            sys.stdout.flush()
            self.at_line_start = delta.endswith("\n")

    def end_line(self) -> None:
        # Text the model wrote before a tool call ends its line: the spinner's redraw
        # would erase a half line on a terminal, and the next step's text would run on.
        if not self.at_line_start:
            sys.stdout.write("\n")
            sys.stdout.flush()
            self.at_line_start = True

    def tool_started(self, call: ToolCall) -> None:
        self.end_line()
        from visus.agent.phases import tool_phase  # what the web chat's bubble says too

        self.progress.update(tool_phase(call.name, call.arguments))

    def status(self, label: str) -> None:
        self.end_line()
        if label.startswith("waiting for") and _ocr_to_load(self.agent):
            label += " (it loads its OCR engine on first use)"  # a tool's image may
        self.progress.update(label)


def _one_turn(
    agent: Agent, sid: str, text: str, pasted: list[PastedImage], screen: _Screen
) -> TurnResult:
    """The turn, run on its own event loop; Ctrl-C stops it (exit 130, the session
    keeps what was done), a provider or input error exits 1."""
    from visus.errors import VisusError

    async def turn() -> TurnResult:
        try:
            if pasted and _ocr_to_load(agent):
                screen.progress.update(
                    "loading the reference model's OCR engine (once per process)"
                )
                with contextlib.suppress(ImportError):  # the server then says what to install
                    await asyncio.to_thread(_load_ocr)
            return await agent.run_turn(
                sid,
                text,
                pasted,
                on_delta=screen.delta,
                on_tool=screen.tool_started,
                on_status=screen.status,
            )
        finally:
            screen.progress.stop()
            await agent.aclose()

    try:
        return asyncio.run(turn())
    except KeyboardInterrupt:
        # asyncio.run cancelled the turn, and the agent recorded it as stopped.
        screen.progress.stop()
        screen.end_line()
        typer.echo(f"visus: stopped (session {sid}; go on with -s {sid})", err=True)
        raise typer.Exit(130) from None
    except VisusError as e:
        typer.echo(f"visus: {error_text(e, agent)}", err=True)
        raise typer.Exit(1) from e


def _save(result: TurnResult, folder: Path | None) -> None:
    """Write the images the agent sent out (``--save-images``), one stderr line each."""
    try:
        for line in save_images(result.images, folder):
            typer.echo(line, err=True)
    except OSError as e:
        typer.echo(f"visus: cannot save images in {folder}: {e.strerror or e}", err=True)
        raise typer.Exit(1) from e


def _summary(result: TurnResult) -> None:
    """The turn's closing lines: no answer within the step budget said on stdout, the
    session's usage on stderr."""
    from visus.cli._common import counted

    if result.stopped == "step_limit":
        # On stdout: a script reading the answer must see that there is none.
        typer.echo(
            f"visus: stopped after {result.steps} steps, the step budget, without a final "
            f"answer; raise it with --max-steps or [agent] max_steps, or continue with: "
            f"visus run -s {result.session} 'go on'"
        )
    typer.echo(
        f"[session {result.session} · {counted(result.steps, 'step')} · "
        f"{result.usage.input_tokens} in{cached(result.usage)} / "
        f"{result.usage.output_tokens} out · ${result.usage.cost_usd:.6f}]",
        err=True,
    )


def _json_result(result: TurnResult, max_steps: int) -> dict[str, object]:
    """``visus run --json``'s one object."""
    usage = result.usage.as_json()
    cost = usage.pop("cost_usd")
    return {
        "answer": result.answer,
        "usage": usage,
        "cost_usd": cost,
        "session": result.session,
        "stopped": result.stopped,
        "stop_reason": result.stop_reason,
        "steps": result.steps,
        "max_steps": max_steps,
    }


def _ocr_to_load(agent: Agent) -> bool:
    """Whether the reference model's OCR engine will load in this process on its next
    image (seconds, once): ``visus run`` loads it first, under its own label."""
    from visus.agent.runtime import reference_embedded

    if agent.model.provider != "reference" or not reference_embedded():
        return False
    from visus.reference.vision import ocr_ready

    return not ocr_ready()


def _load_ocr() -> None:
    from visus.reference.vision import load_ocr

    load_ocr()


def usage(
    session: Annotated[
        str | None,
        typer.Argument(help="Session id (ID or INSTANCE/ID, see `visus session list`)"),
    ] = None,
    data: DataOpt = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    proxy: Annotated[
        bool,
        typer.Option(
            "--proxy",
            help="What `visus proxy` saved instead: bytes, image tokens and dollars, and "
            "the latency it added, per day and model",
        ),
    ] = False,
) -> None:
    """Tokens and cost of a session, per turn and in total (or, with --proxy, what the
    proxy saved)."""
    from visus.cli._common import data_root, fail
    from visus.cli._sessions import find
    from visus.errors import VisusError
    from visus.record.messages import Usage

    if proxy or session is None:
        if session is not None or not proxy:
            fail("usage: name a SESSION, or give --proxy (not both)")
        _proxy_usage(data_root(data), as_json)
        return
    found = find(data_root(data), session)  # the web chat's sessions too
    try:
        messages = found.place.sessions.load(found.id).messages
    except VisusError as e:
        fail(str(e))
    per_turn: dict[int, Usage] = {}
    steps: dict[int, list[Usage]] = {}
    for m in messages:
        if m.kind != "user" and m.usage is not None:
            per_turn[m.turn] = per_turn.get(m.turn, Usage()) + m.usage
            if m.kind == "assistant":  # a model step (a tool's own spend joins its turn)
                steps.setdefault(m.turn, []).append(m.usage)
    total = sum(per_turn.values(), Usage())
    if as_json:
        turns = [
            {"turn": t, **u.as_json(), "steps": [s.as_json() for s in steps.get(t, [])]}
            for t, u in sorted(per_turn.items())
        ]
        typer.echo(json.dumps({"session": session, "turns": turns, **total.as_json()}))
        return
    for t, u in sorted(per_turn.items()):
        typer.echo(f"turn {t}: {_usage_line(u)}")
    typer.echo(f"total: {_usage_line(total)}")


def _proxy_usage(data: Path, as_json: bool) -> None:
    """The proxy's savings ledger (``<data>/proxy/ledger.json``), per day and model."""
    from visus.cli._common import fail
    from visus.errors import VisusError
    from visus.telemetry.ledger import Row, read_ledger

    try:
        days = read_ledger(data / "proxy" / "ledger.json")
    except VisusError as e:
        fail(str(e))
    total = Row()
    for models in days.values():
        for row in models.values():
            total.merge(row)
    if as_json:
        shaped = {d: {m: r.as_json() for m, r in models.items()} for d, models in days.items()}
        typer.echo(json.dumps({"days": shaped, "total": total.as_json()}))
        return
    if not days:
        typer.echo(f"no proxy savings recorded in {data} yet")
        return
    for day, models in days.items():
        for model, row in models.items():
            typer.echo(f"{day} {model}: {_saved_line(row)}")
    typer.echo(f"total: {_saved_line(total)}")


def _saved_line(row: Row) -> str:
    """``12 requests, 3,400,000 bytes and 9,000 image tokens saved ($0.027000), +4.1 ms each``."""
    added = 1000 * row.added_seconds / row.requests if row.requests else 0.0
    dropped = row.reasoning_dropped
    return (
        f"{row.requests} requests, {row.bytes_saved:,} bytes and {row.tokens_saved:,} image "
        f"tokens saved (${row.usd_saved:.6f}), +{added:.1f} ms each"
        + (f"; {dropped} reasoning blocks dropped upstream" if dropped else "")
        + (f"; used {_usage_line(_used(row))}" if row.input_tokens or row.output_tokens else "")
    )


def _used(row: Row) -> Usage:
    """What the upstream's answers said a ledger row's requests used."""
    from visus.record.messages import Usage

    return Usage(
        row.input_tokens,
        row.output_tokens,
        row.usd_spent,
        cache_read_tokens=row.cache_read_tokens,
        cache_write_tokens=row.cache_write_tokens,
    )


def _usage_line(u: Usage) -> str:
    """``12000 in (9000 cache read, 1500 cache write), 30 out, $0.012300``."""
    return f"{u.input_tokens} in{cached(u)}, {u.output_tokens} out, ${u.cost_usd:.6f}"


def register(app: typer.Typer) -> None:
    from visus.cli._chat import chat
    from visus.cli._help import AGENT, DATA

    app.command("run", rich_help_panel=AGENT)(run)
    app.command("chat", rich_help_panel=AGENT)(chat)  # after run in --help
    app.command("usage", rich_help_panel=DATA)(usage)
