"""``visus lower``: print the exact request a session would send to a model.

Loads the session with its blobs, applies retention (``model_view``) and lowers the
view onto a wire. The model defaults to the one the session was run with; the system
prompt and tools are the agent's defaults (what ``visus run`` sends) unless the
session's meta names its own, or ``--bare`` leaves them out. Base64 image data is
printed in full (it is the request); ``--abbreviate`` shortens it for reading.

Example:
    $ visus lower 20261122-064800-1a2b3c4d --wire openai-chat --model gpt-4.1 --abbreviate
    $ visus lower 20261122-064800-1a2b3c4d --wire anthropic --live-turns 2 --chunk 4

Exit status 2 for an unknown session, model or wire.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from visus.cli._common import (
    ChunkOpt,
    DataOpt,
    ImageBudgetOpt,
    LiveTurnsOpt,
    SessionArg,
    data_root,
    retention,
)

if TYPE_CHECKING:
    from visus.record.messages import ToolSpec
    from visus.wire import Wire

# The library is imported when the command runs, so `visus --help` stays fast; the
# wire names for the help text are spelled here (a test checks them against WIRES).
WIRE_NAMES = ("anthropic", "openai-chat", "openai-responses", "gemini", "ollama", "bedrock")

__all__ = ["WIRE_NAMES", "register"]

DEFAULT_MODEL = "claude-sonnet-4-6"


def _fail(message: str) -> NoReturn:
    typer.echo(f"visus: {message}", err=True)
    raise typer.Exit(2)


def _system(meta: Mapping[str, Any], bare: bool) -> str | None:
    from visus.agent.loop import DEFAULT_SYSTEM

    system = meta.get("system")
    if isinstance(system, str):
        return system
    return None if bare else DEFAULT_SYSTEM


def _tools(meta: Mapping[str, Any], bare: bool) -> tuple[ToolSpec, ...]:
    from visus.agent.tools import ToolRegistry
    from visus.record.messages import ToolSpec

    raw = meta.get("tools")
    if not isinstance(raw, list):
        return () if bare else ToolRegistry.builtin().specs()
    return tuple(
        ToolSpec(str(t["name"]), str(t.get("description", "")), dict(t.get("parameters", {})))
        for t in raw
        if isinstance(t, Mapping) and "name" in t
    )


WireOpt = Annotated[
    str | None,
    typer.Option("--wire", "-w", help=f"One of: {', '.join(WIRE_NAMES)} (default: the model's)."),
]
TargetModelOpt = Annotated[
    str | None,
    typer.Option("--model", "-m", help="Target model (default: the session's, else Sonnet)."),
]


def lower_command(
    session: SessionArg,
    wire: WireOpt = None,
    model: TargetModelOpt = None,
    live_turns: LiveTurnsOpt = None,
    chunk: ChunkOpt = None,
    budget: ImageBudgetOpt = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", min=1, help="Output cap.")] = 4096,
    data: DataOpt = None,
    short: Annotated[
        bool, typer.Option("--abbreviate", help="Shorten base64 image data for reading.")
    ] = False,
    bare: Annotated[
        bool, typer.Option("--bare", help="No default system prompt or tools.")
    ] = False,
) -> None:
    """Print the request JSON SESSION would send to MODEL on WIRE."""
    from visus.cli._sessions import find
    from visus.errors import VisusError
    from visus.models import get_model
    from visus.paths import refit_index
    from visus.providers import wire_for_provider
    from visus.record.messages import ModelRequest
    from visus.retention import model_view
    from visus.wire import RefitCache, abbreviate, lower

    root = data_root(data)
    found = find(root, session)  # the web chat's sessions too
    try:
        blobs = found.place.blobs
        loaded = found.place.sessions.load(found.id, blobs=blobs)
        recorded = loaded.meta.get("model")
        name = model or (recorded if isinstance(recorded, str) and recorded else DEFAULT_MODEL)
        spec = get_model(name)
        chosen: Wire = wire_for_provider(spec.provider) if wire is None else _wire(wire)
        policy = retention(live_turns, chunk, budget)
        request = ModelRequest(
            messages=model_view(loaded.messages, policy, model=spec),
            system=_system(loaded.meta, bare),
            tools=_tools(loaded.meta, bare),
            max_tokens=max_tokens,
        )
        body = lower(
            request,
            wire=chosen,
            model=spec,
            blobs=blobs,
            refit_cache=RefitCache(refit_index(found.place.folder)),  # the agent's own index
        )
    except VisusError as e:
        _fail(str(e))
    for problem in loaded.problems:
        typer.echo(f"visus: warning: {problem}", err=True)
    typer.echo(json.dumps(abbreviate(body) if short else body, indent=2, ensure_ascii=False))


def _wire(name: str) -> Wire:
    from visus.wire import WIRES

    for known in WIRES:
        if known == name:
            return known
    _fail(f"unknown wire {name!r}; known wires: {', '.join(WIRES)}")


def register(app: typer.Typer) -> None:
    from visus.cli._help import DATA

    app.command("lower", rich_help_panel=DATA)(lower_command)
