"""What ``visus run`` and ``visus chat`` share: their options, the agent they build,
the session a turn goes to, and how an error and a usage line read.

Not a command module (the leading underscore keeps discovery away from it).

Example:
    >>> from visus.record.messages import Usage
    >>> cached(Usage(input_tokens=12000, cache_read_tokens=9000, cache_write_tokens=1500))
    ' (9000 cache read, 1500 cache write)'
    >>> cached(Usage(input_tokens=12))
    ''
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from visus.cli._common import MODEL_HELP, DataOpt

if TYPE_CHECKING:
    from visus.agent import Agent
    from visus.record.messages import Usage

__all__ = [
    "ContinueOpt",
    "DataOpt",
    "EffortOpt",
    "MaxStepsOpt",
    "McpOpt",
    "ModelOpt",
    "NewSessionOpt",
    "RootOpt",
    "SessionOpt",
    "agent_for",
    "cached",
    "error_text",
    "session_id",
]

ModelOpt = Annotated[
    str | None,
    typer.Option("--model", "-m", help=MODEL_HELP, show_default=False),
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
        # A short metavar keeps the help column readable at 80 columns.
        metavar="NAME=CMD|URL",
        help="Mount an MCP server's tools as NAME__TOOL: NAME=COMMAND ARGS... starts a stdio "
        "server, NAME=https://.../mcp connects to one (repeatable; also [[mcp.servers]])",
    ),
]
MaxStepsOpt = Annotated[
    int | None,
    typer.Option(
        "--max-steps",
        min=1,
        metavar="N",
        help="Model calls one turn may make (default: [agent] max_steps in visus.toml, else "
        "200); a turn that uses them all without answering says so and exits 4",
        show_default=False,
    ),
]


EffortOpt = Annotated[
    str | None,
    typer.Option(
        "--effort",
        metavar="LEVEL",
        help="How hard the model thinks: low, medium, high, xhigh, max (the levels it "
        "takes: visus models --json; default: [agent] effort, else the model's own)",
        show_default=False,
    ),
]


def agent_for(
    model: str | None,
    data: Path | None,
    roots: list[Path] | None,
    mcp: list[str] | None = None,
    max_steps: int | None = None,
    effort: str | None = None,
) -> Agent:
    from visus.agent import McpServerSpec, build_agent
    from visus.cli._common import check_model_ref, check_roots, config, use_local_reference
    from visus.errors import VisusError

    check_roots(roots)
    check_model_ref(model)
    use_local_reference(model or config().default_model)
    try:
        servers = [McpServerSpec.parse(flag) for flag in mcp or ()]
        return build_agent(
            model,
            data=data,
            roots=roots or [Path.cwd()],
            mcp_servers=servers,
            max_steps=max_steps,
            effort=effort,
        )
    except VisusError as e:
        typer.echo(f"visus: {e}", err=True)
        raise typer.Exit(2) from e


def error_text(e: Exception, agent: Agent) -> str:
    """``e`` as text; a provider failure without an HTTP status names the server's URL."""
    from visus.errors import ProviderError

    text = str(e)
    config = getattr(agent.client, "config", None)
    url = getattr(config, "base_url", None)
    if isinstance(e, ProviderError) and e.status is None and isinstance(url, str) and url:
        # "Connection error." alone does not say which server did not answer.
        text = f"{text} (server {url})"
    return text


def session_id(
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


def cached(u: Usage) -> str:
    """`` (9000 cache read, 1500 cache write)``, or nothing when the provider cached none."""
    if not (u.cache_read_tokens or u.cache_write_tokens):
        return ""
    return f" ({u.cache_read_tokens} cache read, {u.cache_write_tokens} cache write)"
