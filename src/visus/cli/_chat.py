"""``visus chat``: the agent in a terminal conversation, with a few slash commands.

A line is either a command (``/view PATH``, ``/paste PATH``, ``/images``, ``/usage``,
``/help``, ``/quit``) answered here, or a message sent to the agent with the images
attached since the last one. ``visus run``'s module registers the command, so ``run``
stays first in ``visus --help`` (discovery skips this module's leading underscore).

Example:
    >>> _COMMAND.fullmatch("/sumary") is not None, _COMMAND.fullmatch("/etc/hosts") is None
    (True, True)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from visus.cli._agent import (
    ContinueOpt,
    DataOpt,
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
from visus.cli._turn import save_images, tool_lines

if TYPE_CHECKING:
    from visus.agent import Agent, PastedImage
    from visus.record.messages import ToolCall

__all__ = ["CHAT_HELP", "chat"]

CHAT_HELP = """\
/view PATH    see a file as the model would and attach it to your next message
              (it leaves the context after a few turns; the model can view it again);
              /view PATH --region X0,Y0,X1,Y1 attaches only that part, zoomed in (the
              source's pixels, as visus view --region and the view tool take it)
/paste PATH   attach an image file as it is to your next message
/images       the images in this session
/usage        tokens and cost so far
/help         this list
/quit         leave (also /exit, Ctrl-D, or Ctrl-C at the prompt)
Ctrl-C while the agent works stops that turn; the session goes on."""

_COMMAND = re.compile(r"/[A-Za-z?]+")
#: ``/view PATH --region X0,Y0,X1,Y1`` (the path may hold spaces).
_VIEW_REGION = re.compile(r"(?P<path>.+?)\s+--region(?:=|\s+)(?P<box>\S*)")


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
    /view PATH [--region X0,Y0,X1,Y1] (see a file, or a zoomed part of it, and attach it
    to your next message), /paste PATH (attach an image file as is), /help, /quit. Empty
    lines are not sent.
    """
    from visus.cli._common import model_line

    sid = session_id(session, cont, data, new_session)
    agent = agent_for(model, data, root, mcp, max_steps)
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
    """Read lines until /quit or end of input: a command is answered here, anything
    else goes to the agent with the images attached since the last message."""
    pending: list[PastedImage] = []
    while True:
        try:
            line = input("you> ")
        except EOFError:
            break
        cmd, _, arg = line.strip().partition(" ")
        if not cmd:
            continue  # an empty line is not a message
        if cmd in {"/quit", "/exit"}:
            break
        if _command(agent, sid, cmd, arg.strip(), pending):
            continue
        _turn(agent, sid, line, pending, runner)
        pending = []


def _command(agent: Agent, sid: str, cmd: str, arg: str, pending: list[PastedImage]) -> bool:
    """Answer ``cmd`` if it is a chat command (attaching to ``pending`` for /view and
    /paste); False when the line is a message for the agent."""
    if cmd in {"/help", "/?"}:
        typer.echo(CHAT_HELP)
    elif cmd == "/usage":
        typer.echo(_usage_text(agent, sid))
    elif cmd == "/images":
        typer.echo(_images_text(agent, sid))
    elif cmd in {"/view", "/paste"} and not arg:
        typer.echo(f"usage: {cmd} PATH")
    elif cmd == "/view":
        typer.echo(_attach_view(agent, arg, pending))
    elif cmd == "/paste":
        typer.echo(_attach_file(arg, pending))
    elif _COMMAND.fullmatch(cmd):
        # "/etc/hosts?" is a message; "/sumary" is a mistyped command.
        typer.echo(f"unknown command {cmd}; /help lists them")
    else:
        return False
    return True


def _attach_view(agent: Agent, arg: str, pending: list[PastedImage]) -> str:
    """``/view PATH [--region X0,Y0,X1,Y1]``: the file (or that part of it, zoomed, as
    ``visus view --region`` spells it) as the model would see it, attached to the next
    message."""
    from visus.agent import PastedImage
    from visus.cli.view import parse_region
    from visus.perception import Refusal, view

    path, region = arg, None
    found = _VIEW_REGION.fullmatch(arg)
    if found is not None:
        path, region = found["path"], parse_region(found["box"])
        if region is None:
            return (
                "usage: /view PATH [--region X0,Y0,X1,Y1] (four whole numbers, the "
                f"source's pixels), not {found['box']!r}"
            )
    result = view(path, reach=agent.reach, model=agent.model, region=region)
    if isinstance(result, Refusal):
        return f"cannot view: {result.message}"
    pending.append(PastedImage(result.data, result.media_type, path))
    return f"attached {result.describe(path)} to your next message"


def _attach_file(arg: str, pending: list[PastedImage]) -> str:
    """``/paste PATH``: the file's own bytes attached to the next message."""
    from visus.agent import PastedImage

    path = Path(arg).expanduser()
    try:
        pending.append(PastedImage(path.read_bytes(), filename=path.name))
    except OSError as e:
        return f"cannot read {path}: {e.strerror}"
    return f"attached {path.name} to your next message"


class _Answer:
    """A turn's output on stdout: the answer as it streams, each tool call on its own
    line as it starts (not after the answer)."""

    def __init__(self) -> None:
        self.at_line_start = False  # "agent> " is written first

    def delta(self, delta: str) -> None:
        if delta:
            self.at_line_start = delta.endswith("\n")
        sys.stdout.write(delta)
        sys.stdout.flush()

    def tool_started(self, call: ToolCall) -> None:
        sys.stdout.write(("" if self.at_line_start else "\n") + f"  [{call.name}] ")
        sys.stdout.write(_brief(call.arguments) + "\n")
        sys.stdout.flush()
        self.at_line_start = True


def _turn(
    agent: Agent, sid: str, line: str, pending: list[PastedImage], runner: asyncio.Runner
) -> None:
    """One message to the agent and its answer; an error or Ctrl-C ends the turn, not
    the chat."""
    from visus.errors import VisusError

    answer = _Answer()
    try:
        # Echo goes off before "agent>" shows: keys typed from then on wait, unseen,
        # for the next prompt instead of landing inside the answer.
        with _no_echo():
            sys.stdout.write("agent> ")
            sys.stdout.flush()
            turn = runner.run(
                agent.run_turn(
                    sid, line, pending, on_delta=answer.delta, on_tool=answer.tool_started
                )
            )
    except VisusError as e:
        typer.echo(f"\nerror: {error_text(e, agent)}")
    except KeyboardInterrupt:
        # Ctrl-C stops the turn, not the chat: the runner cancelled the agent's task,
        # which recorded the stop, so the session goes on from here.
        typer.echo("\n(stopped; Ctrl-C at the prompt leaves the chat)")
    else:
        sys.stdout.write("\n")
        for note in (*tool_lines(turn), *save_images(turn.images, None)):
            typer.echo(note)


def _brief(arguments: object) -> str:
    from visus.cli._turn import _preview

    return _preview(json.dumps(arguments, ensure_ascii=False), 60)


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
        f"{total.input_tokens} input + {total.output_tokens} output tokens{cached(total)}, "
        f"${total.cost_usd:.6f}"
    )
