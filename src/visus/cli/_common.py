"""What several commands share: where the data folder is, and how a command fails.

Not a command module (the leading underscore keeps discovery away from it).

Example:
    >>> from pathlib import Path
    >>> data_root(Path("/tmp/visus-data"))
    PosixPath('/tmp/visus-data')
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

if TYPE_CHECKING:
    from visus.config import VisusConfig
    from visus.retention import RetentionPolicy

__all__ = [
    "MODEL_HELP",
    "MODEL_RULE",
    "ChunkOpt",
    "DataOpt",
    "ImageBudgetOpt",
    "LiveTurnsOpt",
    "LogFormatOpt",
    "OpenMetricsOpt",
    "SessionArg",
    "cannot_listen",
    "check_listen",
    "check_model_ref",
    "check_roots",
    "config",
    "counted",
    "data_line",
    "data_origin",
    "data_root",
    "fail",
    "model_line",
    "retention",
    "use_local_reference",
]

# The arguments of the commands that read a recorded session (``visus session show``
# and ``check``, ``visus lower``); :func:`retention` reads the three retention options.
SessionArg = Annotated[str, typer.Argument(help="Session id (see `visus session list`).")]
#: ``--data`` for every command that reads or writes a data folder.
#: ``visus serve`` and ``visus proxy``: /metrics without the token (docs/operations.md).
OpenMetricsOpt = Annotated[
    bool,
    typer.Option(
        "--open-metrics",
        help="Serve /metrics without the token (a scraper inside your network); "
        "/healthz and /readyz never need it",
    ),
]
LogFormatOpt = Annotated[
    str,
    typer.Option(
        "--log-format",
        metavar="text|json",
        help="Log lines as text, or one JSON object each with its request id",
    ),
]
DataOpt = Annotated[
    Path | None,
    typer.Option(
        "--data",
        metavar="DIR",
        help="Data folder (default: data_dir in visus.toml, else $VISUS_DATA, else the user's)",
        show_default=False,
    ),
]
LiveTurnsOpt = Annotated[
    int | None,
    typer.Option(
        "--live-turns",
        min=1,
        help="Turns whose images stay live (default: [retention] in visus.toml, else 1).",
        show_default=False,
    ),
]
ChunkOpt = Annotated[
    int | None,
    typer.Option(
        "--chunk",
        min=1,
        help="Move the elision boundary every K turns (default: [retention], else 1).",
        show_default=False,
    ),
]
ImageBudgetOpt = Annotated[
    int | None,
    typer.Option(
        "--image-token-budget",
        min=0,
        help="Cap on live image tokens (default: [retention], else none).",
        show_default=False,
    ),
]


def counted(n: int, noun: str) -> str:
    """A count and its noun, plural unless it is one (no "1 turns", no "step(s)").

    Example:
        >>> counted(1, "turn"), counted(3, "step")
        ('1 turn', '3 steps')
    """
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def fail(message: str, code: int = 2) -> NoReturn:
    """Print ``visus: message`` on stderr and leave with ``code``."""
    typer.echo(f"visus: {message}", err=True)
    raise typer.Exit(code)


def check_model_ref(ref: str | None, flag: str = "--model") -> None:
    """Exit 2 naming an unknown provider: ``foo:bar`` is not read as an Ollama tag
    (write ``ollama:foo:bar`` for one), or every image would be refused as text-only.

    Example:
        >>> check_model_ref("openai:gpt-4.1"), check_model_ref("claude-sonnet-4-6")
        (None, None)
    """
    if ref is None:
        return
    from visus.errors import VisusError
    from visus.models import PROVIDERS, parse_model_ref

    prefix, sep, _ = ref.partition(":")
    if not sep or prefix in PROVIDERS:
        return
    try:
        provider, _ = parse_model_ref(ref)
    except VisusError as e:
        fail(f"{flag} {ref}: {e}")
    if provider != "openai-compatible" or "/" in ref:
        return  # an Ollama tag of a known model (llava:13b), a Bedrock id (...-v1:0)
    fail(
        f"{flag} {ref}: unknown provider {prefix!r} (providers: {', '.join(PROVIDERS)}; "
        f"an Ollama model is written ollama:{ref})"
    )


def model_line(given: str | None, cfg: VisusConfig, model: str | None = None) -> str:
    """The start-up line naming the model and why it is the one (no surprise bills).

    Example:
        >>> from visus.config import load_config
        >>> model_line(None, load_config(env={"OPENAI_API_KEY": "sk-0123456789abcdef"}))
        'model openai:gpt-6.1-sol, from OPENAI_API_KEY; --model reference for the offline model'
        >>> model_line(None, load_config(env={}))
        'model reference (offline, no provider key set); --model provider:model or a key ...'
    """
    ref = model or given or cfg.default_model
    origin = "--model" if given else cfg.model_origin
    if ref.split(":", 1)[0] in ("reference", "reference-pdf"):
        return (
            f"model {ref} (offline, {origin}); --model provider:model or a key such as "
            "OPENAI_API_KEY for a real one"
        )
    return f"model {ref}, from {origin}; --model reference for the offline model"


#: How the model is picked when ``--model`` is not given: :func:`visus.config.model_rule`
#: written out (importing the provider table for every ``--help`` costs half a second;
#: tests/cli/test_first_hour.py keeps the two equal).
MODEL_RULE = (
    "default_model in visus.toml (or VISUS_DEFAULT_MODEL); else the first provider key set: "
    "ANTHROPIC_API_KEY (anthropic:claude-sonnet-5-5), OPENAI_API_KEY (openai:gpt-6.1-sol), "
    "GEMINI_API_KEY (gemini:gemini-3.5-flash), OPENROUTER_API_KEY "
    "(openai-compatible:openai/gpt-6.1-sol); else reference, the offline model"
)
#: ``--model``'s help on every command that runs an agent.
MODEL_HELP = f"provider:model, e.g. openai:gpt-4.1. Default: {MODEL_RULE}"


def data_root(data: Path | None) -> Path:
    """The data folder exactly as ``visus run`` picks it.

    ``--data`` when given, else the configuration's ``data_dir`` (``visus.toml``, then
    ``$VISUS_DATA``, then the user's data folder), so the commands that read sessions
    find the ones ``run`` and ``chat`` wrote. A broken configuration fails the command.
    """
    from visus.paths import data_dir

    if data is not None and str(data) != "":
        return data_dir(data)
    return data_dir(config().data_dir)


def data_origin(data: Path | None) -> str:
    """Where :func:`data_root`'s folder comes from, in words, for a banner: ``--data``,
    ``VISUS_DATA``, ``data_dir in /path/visus.toml`` or the user's data folder (the
    default of every command alike, ``scripts/serve.sh`` included).

    Example:
        >>> data_origin(Path("/tmp/visus-data"))
        '--data'
    """
    if data is not None and str(data) != "":
        return "--data"
    return config().data_origin


def data_line(root: Path, origin: str) -> str:
    """The data folder and why it is the one, as ``visus serve``'s banner prints it.

    Example:
        >>> data_line(Path("/home/u/.local/share/visus"), "the user's data folder")
        "/home/u/.local/share/visus  (the user's data folder, every visus command's ..."
        >>> data_line(Path("/srv/v"), "--data")
        '/srv/v  (from --data)'
    """
    from visus.config import DEFAULT_DATA_ORIGIN

    if origin == DEFAULT_DATA_ORIGIN:
        return (
            f"{root}  ({origin}, every visus command's default; --data or VISUS_DATA names another)"
        )
    return f"{root}  (from {origin})"


def config() -> VisusConfig:
    """The configuration in force (``--config``, ``$VISUS_CONFIG``, ...); exit 2 if broken."""
    from visus.config import load_config
    from visus.errors import ConfigError

    try:
        return load_config()
    except ConfigError as e:
        fail(str(e))


def retention(
    live_turns: int | None, chunk: int | None, budget: int | None = None
) -> RetentionPolicy:
    """The retention ``visus run`` applies (``[retention]``), with the options given over it."""
    from dataclasses import replace

    from visus.errors import VisusError

    settings = config().retention
    try:
        return replace(
            settings.policy(),
            live_turns=settings.live_turns if live_turns is None else live_turns,
            chunk=settings.chunk if chunk is None else chunk,
            image_token_budget=settings.image_token_budget if budget is None else budget,
        )
    except VisusError as e:
        fail(str(e))


def use_local_reference(ref: str) -> None:
    """Point this command at the local reference server when ``ref`` is the offline
    reference model and no server is named (``VISUS_REFERENCE_URL``, ``[providers.
    reference]``): the one an earlier command started, else one started now, which
    stays a while for the next (:mod:`visus.reference.local`). Its OCR engine then loads
    once, not in every ``visus run``. ``VISUS_REFERENCE_SHARED=0``, or a server that
    cannot start (said in one line), leaves the command its own, in-process.
    """
    import os

    from visus.reference.local import enabled, local_reference_url

    if ref.split(":", 1)[0] not in ("reference", "reference-pdf") or not enabled():
        return
    if os.environ.get("VISUS_REFERENCE_URL") or config().provider("reference").base_url:
        return
    from visus import limits
    from visus.cli._progress import Progress
    from visus.errors import ConfigError

    json_block = os.environ.get("VISUS_REFERENCE_JSON", "").strip().lower() in ("1", "true")
    with Progress() as progress:
        progress.update("finding the reference model's server (it keeps its OCR engine loaded)")
        try:
            local = local_reference_url(json_block=json_block)
        except ConfigError as e:
            typer.echo(f"visus: note: {e}", err=True)
            return
    os.environ["VISUS_REFERENCE_URL"] = local.url
    if local.started:
        minutes = round(limits.REFERENCE_LOCAL_IDLE_SECONDS / 60)
        typer.echo(
            f"visus: started the reference model's server for this and later commands (pid "
            f"{local.pid}, {local.url}; it exits after {minutes} idle minutes; "
            "VISUS_REFERENCE_SHARED=0 keeps each command to itself)",
            err=True,
        )


def cannot_listen(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be bound (e.g. already in use), or ``None``."""
    import socket

    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host.strip("[]"), port))
        except OSError as e:
            return e.strerror or str(e)
        except OverflowError:  # a port past 65535, from the command line or visus.toml
            return f"port {port} is out of range (0-65535)"
    return None


def check_listen(host: str, port: int) -> None:
    """Exit 2 when ``host:port`` cannot be bound, naming ``--port`` (a busy port is
    the usual reason: another server, or this one started twice)."""
    problem = cannot_listen(host, port)
    if problem:
        fail(f"cannot listen on {host}:{port}: {problem} (choose another with --port)")


def check_roots(roots: list[Path] | None) -> None:
    """Exit 2 naming a ``--root`` that is not an existing folder (a typo would otherwise
    surface later as every path being 'not found')."""
    for root in roots or []:
        if not root.expanduser().is_dir():
            why = "is not a folder" if root.expanduser().exists() else "does not exist"
            fail(f"--root {root} {why}")
