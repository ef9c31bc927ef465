"""``visus run``, ``visus chat`` and ``visus usage``: the agent from the terminal."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from visus.cli._common import MODEL_HELP
from visus.cli._turn import tool_lines

if TYPE_CHECKING:
    from visus.agent import Agent, PastedImage, TurnResult
    from visus.record.messages import ToolCall, Usage

ModelOpt = Annotated[
    str | None,
    typer.Option("--model", "-m", help=MODEL_HELP, show_default=False),
]
DataOpt = Annotated[
    Path | None,
    typer.Option(
        "--data",
        help="Data folder (default: data_dir in visus.toml, else $VISUS_DATA, else the user's)",
        show_default=False,
    ),
]
RootOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--root", metavar="DIR", help="Folder the tools may see (repeatable; default: cwd)"
    ),
]
SessionOpt = Annotated[
    str | None,
    typer.Option(
        "--session",
        "-s",
        help="Continue this session (see `visus session list`); an unknown id is an error",
        show_default=False,
    ),
]
NewSessionOpt = Annotated[
    str | None,
    typer.Option(
        "--new-session",
        metavar="ID",
        help="Start a new session with this id (default: a fresh time-stamped one)",
        show_default=False,
    ),
]
ContinueOpt = Annotated[
    bool,
    typer.Option("--continue", "-c", help="Continue the most recent session in the data folder"),
]

McpOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--mcp",
        metavar="NAME=COMMAND ARGS...|NAME=URL",
        help="Mount an MCP server's tools as NAME__TOOL (repeatable; also [[mcp.servers]])",
    ),
]
MaxStepsOpt = Annotated[
    int | None,
    typer.Option(
        "--max-steps",
        min=1,
        help="Model calls one turn may make (default: [agent] max_steps in visus.toml, else "
        "200); a turn that uses them all without answering says so and exits 3",
        show_default=False,
    ),
]

#: ``visus run``'s exit status when the turn used its whole step budget without an answer.
EXIT_STEP_BUDGET = 4  # visus --help's exit-code table (3 is an input refused)

_COMMAND = re.compile(r"/[A-Za-z?]+")


def _agent(
    model: str | None,
    data: Path | None,
    roots: list[Path] | None,
    mcp: list[str] | None = None,
    max_steps: int | None = None,
) -> Agent:
    from visus.agent import McpServerSpec, build_agent
    from visus.cli._common import check_model_ref, check_roots
    from visus.errors import VisusError

    check_roots(roots)
    check_model_ref(model)
    try:
        servers = [McpServerSpec.parse(flag) for flag in mcp or ()]
        return build_agent(
            model,
            data=data,
            roots=roots or [Path.cwd()],
            mcp_servers=servers,
            max_steps=max_steps,
        )
    except VisusError as e:
        typer.echo(f"visus: {e}", err=True)
        raise typer.Exit(2) from e


def _error_text(e: Exception, agent: Agent) -> str:
    """``e`` as text; a provider failure without an HTTP status names the server's URL."""
    from visus.errors import ProviderError

    text = str(e)
    config = getattr(agent.client, "config", None)
    url = getattr(config, "base_url", None)
    if isinstance(e, ProviderError) and e.status is None and isinstance(url, str) and url:
        # "Connection error." alone does not say which server did not answer.
        text = f"{text} (server {url})"
    return text


def _session_id(
    given: str | None, latest: bool = False, data: Path | None = None, new: str | None = None
) -> str:
    """The session a turn goes to, checked before any work (exit 2): ``--session`` (it
    must exist), ``--new-session`` (it must not), the most recent one with
    ``--continue``, or a fresh time-stamped id."""
    import secrets
    import time

    from visus.cli._common import data_root, fail
    from visus.errors import InvalidKeyError
    from visus.paths import sessions_dir
    from visus.record.sessions import SessionStore, validate_session_id

    if sum((given is not None, latest, new is not None)) > 1:
        fail("--session, --new-session and --continue each name a session: give one")
    folder = sessions_dir(data_root(data))
    store = SessionStore(folder)
    if latest:
        sessions = store.list()
        if not sessions:
            fail(f"--continue: no session yet under {folder}")
        return sessions[0].id
    if given is None and new is None:
        return time.strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)
    try:
        sid = validate_session_id(given if given is not None else str(new))
    except InvalidKeyError as e:
        fail(str(e))
    if new is not None and store.exists(sid):
        fail(f"--new-session {sid}: that session exists (continue it with --session {sid})")
    if given is not None and not store.exists(sid):
        fail(_unknown_session(sid, data_root(data)))
    return sid


def _unknown_session(sid: str, root: Path) -> str:
    """Why ``--session sid`` cannot be continued here, and what to do instead."""
    from visus.cli._sessions import places

    elsewhere = [p for p in places(root)[1:] if p.sessions.exists(sid)]
    if elsewhere:
        return (
            f"--session {sid}: that is a {elsewhere[0].label} session, which visus run and "
            f"chat do not continue (visus session show {elsewhere[0].prefix}{sid} shows it)"
        )
    return (
        f"--session {sid}: no such session under {root / 'sessions'} (visus session list "
        f"shows them; --new-session {sid} starts one with that id)"
    )


CHAT_HELP = """\
/view PATH    see a file as the model would and attach it to your next message
              (it leaves the context after a few turns; the model can view it again)
/paste PATH   attach an image file as it is to your next message
/images       the images in this session
/usage        tokens and cost so far
/help         this list
/quit         leave (also /exit, Ctrl-D, or Ctrl-C at the prompt)
Ctrl-C while the agent works stops that turn; the session goes on."""


def run(
    prompt: Annotated[
        str | None,
        typer.Argument(
            help="The user message; piped stdin is the message, or goes with it "
            "(text first, an image attached)",
            show_default=False,
        ),
    ] = None,
    model: ModelOpt = None,
    image: Annotated[
        list[str] | None,
        typer.Option(
            "--image",
            "-i",
            metavar="FILE|URL",
            help="Image to paste: a file, or an https URL fetched through visus's SSRF gate "
            "(repeatable)",
        ),
    ] = None,
    session: SessionOpt = None,
    new_session: NewSessionOpt = None,
    cont: ContinueOpt = False,
    root: RootOpt = None,
    data: DataOpt = None,
    mcp: McpOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
    max_steps: MaxStepsOpt = None,
    save_images: Annotated[
        Path | None,
        typer.Option(
            "--save-images",
            help="Folder to write the images the agent sends out (send_image)",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run one agent turn and print the answer.

    The answer goes to stdout; the tools the agent called, the images it sent and the
    session's usage go to stderr (with --json, stdout holds exactly one JSON object).
    A turn that used up its step budget without answering says so and exits 4.
    """
    from visus.cli._common import model_line
    from visus.cli._inputs import pasted_images, prompt_and_stdin
    from visus.cli._progress import Progress
    from visus.errors import VisusError

    sid = _session_id(session, cont, data, new_session)
    text, pasted = prompt_and_stdin(prompt)
    pasted += pasted_images(image or [])
    agent = _agent(model, data, root, mcp, max_steps)

    if agent.config is not None:  # which model, and why: a key in the shell bills
        typer.echo(model_line(model, agent.config, agent.model_ref), err=True)
    progress = Progress()
    at_line_start = True

    def stream(delta: str) -> None:
        nonlocal at_line_start
        progress.stop()
        if not as_json and delta:
            sys.stdout.write(delta)
            sys.stdout.flush()
            at_line_start = delta.endswith("\n")

    def end_line() -> None:
        # Text the model wrote before a tool call ends its line: the spinner's redraw
        # would erase a half line on a terminal, and the next step's text would run on.
        nonlocal at_line_start
        if not at_line_start:
            sys.stdout.write("\n")
            sys.stdout.flush()
            at_line_start = True

    def tool_started(call: ToolCall) -> None:
        end_line()
        from visus.agent.phases import tool_phase  # what the web chat's bubble says too

        progress.update(tool_phase(call.name, call.arguments))

    def status(label: str) -> None:
        end_line()
        if label.startswith("waiting for") and _ocr_to_load(agent):
            label += " (it loads its OCR engine on first use)"  # a tool's image may
        progress.update(label)

    async def one_turn() -> TurnResult:
        try:
            if pasted and _ocr_to_load(agent):
                progress.update("loading the reference model's OCR engine (once per process)")
                with contextlib.suppress(ImportError):  # the server then says what to install
                    await asyncio.to_thread(_load_ocr)
            return await agent.run_turn(
                sid, text, pasted, on_delta=stream, on_tool=tool_started, on_status=status
            )
        finally:
            progress.stop()
            await agent.aclose()

    try:
        result = asyncio.run(one_turn())
    except KeyboardInterrupt:
        # asyncio.run cancelled the turn, and the agent recorded it as stopped.
        progress.stop()
        end_line()
        typer.echo(f"visus: stopped (session {sid}; go on with -s {sid})", err=True)
        raise typer.Exit(130) from None
    except VisusError as e:
        typer.echo(f"visus: {_error_text(e, agent)}", err=True)
        raise typer.Exit(1) from e
    if not as_json:
        end_line()
        for line in (*tool_lines(result), *(f"  note: {n}" for n in result.notes)):
            typer.echo(line, err=True)
    try:
        for line in _save(result, save_images):
            typer.echo(line, err=True)
    except OSError as e:
        typer.echo(f"visus: cannot save images in {save_images}: {e.strerror or e}", err=True)
        raise typer.Exit(1) from e
    budget_spent = result.stopped == "step_limit"
    if as_json:
        typer.echo(json.dumps(_json_result(result, agent.max_steps)))
    else:
        if budget_spent:
            # On stdout: a script reading the answer must see that there is none.
            typer.echo(
                f"visus: stopped after {result.steps} steps, the step budget, without a final "
                f"answer; raise it with --max-steps or [agent] max_steps, or continue with: "
                f"visus run -s {result.session} 'go on'"
            )
        typer.echo(
            f"[session {result.session} · {result.steps} step(s) · "
            f"{result.usage.input_tokens} in{_cached(result.usage)} / "
            f"{result.usage.output_tokens} out · ${result.usage.cost_usd:.6f}]",
            err=True,
        )
    if budget_spent:
        raise typer.Exit(EXIT_STEP_BUDGET)


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


def _brief(arguments: object) -> str:
    from visus.cli._turn import _preview

    return _preview(json.dumps(arguments, ensure_ascii=False), 60)


def _save(result: TurnResult, folder: Path | None) -> list[str]:
    from visus.cli._turn import save_images

    return save_images(result.images, folder)


def chat(
    model: ModelOpt = None,
    session: SessionOpt = None,
    new_session: NewSessionOpt = None,
    cont: ContinueOpt = False,
    root: RootOpt = None,
    data: DataOpt = None,
    mcp: McpOpt = None,
    max_steps: MaxStepsOpt = None,
) -> None:
    """Talk to the agent interactively.

    Commands: /usage (tokens and cost so far), /images (this session's images),
    /view PATH (see a file and attach it to your next message), /paste PATH (attach an
    image file as is), /help, /quit. Empty lines are not sent.
    """
    from visus.cli._common import model_line

    sid = _session_id(session, cont, data, new_session)
    agent = _agent(model, data, root, mcp, max_steps)
    if sys.stdin.isatty():
        # input() edits lines (arrows, history) only once readline is loaded; without
        # it a terminal sends the arrow keys' escape codes into the message.
        with contextlib.suppress(ImportError):  # not on every platform (Windows)
            import readline  # noqa: F401
    typer.echo(f"visus chat · session {sid} · /help for commands")
    if agent.config is not None:
        typer.echo(model_line(model, agent.config, agent.model_ref))
    # One event loop for the whole chat: the provider client's connections belong to it.
    # input() runs on the main thread, between turns, so Ctrl-C at the prompt leaves at
    # once (in a worker thread it waited for the next Enter).
    with asyncio.Runner() as runner:
        try:
            _chat(agent, sid, runner)
        except KeyboardInterrupt:
            typer.echo("")
            raise typer.Exit(130) from None
        finally:
            runner.run(agent.aclose())


def _chat(agent: Agent, sid: str, runner: asyncio.Runner) -> None:
    from visus.agent import PastedImage
    from visus.errors import VisusError
    from visus.perception import Refusal, view

    pending: list[PastedImage] = []

    def stream(delta: str) -> None:
        sys.stdout.write(delta)
        sys.stdout.flush()

    while True:
        try:
            line = input("you> ")
        except EOFError:
            break
        cmd, _, arg = line.strip().partition(" ")
        arg = arg.strip()
        if not cmd:
            continue  # an empty line is not a message
        if cmd in {"/quit", "/exit"}:
            break
        if cmd in {"/help", "/?"}:
            typer.echo(CHAT_HELP)
            continue
        if cmd == "/usage":
            typer.echo(_usage_text(agent, sid))
            continue
        if cmd == "/images":
            typer.echo(_images_text(agent, sid))
            continue
        if cmd in {"/view", "/paste"} and not arg:
            typer.echo(f"usage: {cmd} PATH")
            continue
        if cmd == "/view":
            result = view(arg, reach=agent.reach, model=agent.model)
            if isinstance(result, Refusal):
                typer.echo(f"cannot view: {result.message}")
            else:
                pending.append(PastedImage(result.data, result.media_type, arg))
                typer.echo(f"attached {result.describe()} to your next message")
            continue
        if cmd == "/paste":
            path = Path(arg).expanduser()
            try:
                pending.append(PastedImage(path.read_bytes(), filename=path.name))
                typer.echo(f"attached {path.name} to your next message")
            except OSError as e:
                typer.echo(f"cannot read {path}: {e.strerror}")
            continue
        if _COMMAND.fullmatch(cmd):
            # "/etc/hosts?" is a message; "/sumary" is a mistyped command.
            typer.echo(f"unknown command {cmd}; /help lists them")
            continue
        at_line_start = False

        def tool_started(call: ToolCall) -> None:
            nonlocal at_line_start
            # The call shows as it starts, on its own line, not after the answer.
            sys.stdout.write(("" if at_line_start else "\n") + f"  [{call.name}] ")
            sys.stdout.write(_brief(call.arguments) + "\n")
            sys.stdout.flush()
            at_line_start = True

        def answer_delta(delta: str) -> None:
            nonlocal at_line_start
            if delta:
                at_line_start = delta.endswith("\n")
            stream(delta)

        try:
            # Echo goes off before "agent>" shows: keys typed from then on wait, unseen,
            # for the next prompt instead of landing inside the answer.
            with _no_echo():
                sys.stdout.write("agent> ")
                sys.stdout.flush()
                turn = runner.run(
                    agent.run_turn(sid, line, pending, on_delta=answer_delta, on_tool=tool_started)
                )
        except VisusError as e:
            typer.echo(f"\nerror: {_error_text(e, agent)}")
        except KeyboardInterrupt:
            # Ctrl-C stops the turn, not the chat: the runner cancelled the agent's task,
            # which recorded the stop, so the session goes on from here.
            typer.echo("\n(stopped; Ctrl-C at the prompt leaves the chat)")
        else:
            sys.stdout.write("\n")
            for note in (*tool_lines(turn), *_save(turn, None)):
                typer.echo(note)
        pending = []


@contextlib.contextmanager
def _no_echo() -> Iterator[None]:
    """Keys typed while the agent works are not echoed into its answer.

    They stay in the terminal's input buffer and show at the next ``you>`` prompt
    (readline reads and echoes them there). Only when stdin is a terminal (POSIX).
    """
    try:
        import termios

        fd = sys.stdin.fileno()
        if not os.isatty(fd):
            raise OSError
        saved = termios.tcgetattr(fd)
    except (ImportError, OSError, ValueError):
        yield
        return
    quiet = list(saved)
    quiet[3] &= ~termios.ECHO
    termios.tcsetattr(fd, termios.TCSANOW, quiet)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSANOW, saved)


def _images_text(agent: Agent, sid: str) -> str:
    from visus.record.messages import ImagePart

    if not agent.sessions.exists(sid):
        return "no images yet"
    lines = []
    for m in agent.sessions.load(sid).messages:
        if m.kind == "assistant":
            continue
        for part in m.parts:
            if isinstance(part, ImagePart):
                o = part.origin
                src = o.source if o.kind == "perception" else f"pasted {o.filename or ''}"
                lines.append(f"turn {m.turn}: {part.width}x{part.height} {part.media_type} {src}")
    return "\n".join(lines) or "no images yet"


def _usage_text(agent: Agent, sid: str) -> str:
    from visus.record.messages import Usage

    if not agent.sessions.exists(sid):
        return "no usage yet"
    total = Usage()
    for m in agent.sessions.load(sid).messages:
        if m.kind != "user" and m.usage is not None:
            total = total + m.usage
    return (
        f"{total.input_tokens} input + {total.output_tokens} output tokens{_cached(total)}, "
        f"${total.cost_usd:.6f}"
    )


def usage(
    session: Annotated[
        str, typer.Argument(help="Session id (ID or INSTANCE/ID, see `visus session list`)")
    ],
    data: DataOpt = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Tokens and cost of a session, per turn and in total."""
    from visus.cli._common import data_root, fail
    from visus.cli._sessions import find
    from visus.errors import VisusError
    from visus.record.messages import Usage

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


def _usage_line(u: Usage) -> str:
    """``12000 in (9000 cache read, 1500 cache write), 30 out, $0.012300``."""
    return f"{u.input_tokens} in{_cached(u)}, {u.output_tokens} out, ${u.cost_usd:.6f}"


def _cached(u: Usage) -> str:
    """`` (9000 cache read, 1500 cache write)``, or nothing when the provider cached none."""
    if not (u.cache_read_tokens or u.cache_write_tokens):
        return ""
    return f" ({u.cache_read_tokens} cache read, {u.cache_write_tokens} cache write)"


def register(app: typer.Typer) -> None:
    from visus.cli._help import AGENT, DATA

    app.command("run", rich_help_panel=AGENT)(run)
    app.command("chat", rich_help_panel=AGENT)(chat)
    app.command("usage", rich_help_panel=DATA)(usage)
