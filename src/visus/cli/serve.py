"""``visus serve``: the main job — tether API, MCP endpoint and web chat in one process."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from visus.cli._common import MODEL_HELP, DataOpt, LogFormatOpt, OpenMetricsOpt

if TYPE_CHECKING:
    from fastapi import FastAPI

    from visus.config import VisusConfig


ModelOpt = Annotated[
    str | None,
    typer.Option("--model", "-m", help=f"The web chat's model. {MODEL_HELP}", show_default=False),
]
TokenOpt = Annotated[
    str | None,
    typer.Option(
        envvar="VISUS_TOKEN",
        help="Token every client sends (default: [server] token, else a random one made "
        "at start and printed in the web chat's URL)",
    ),
]
NoTokenOpt = Annotated[
    bool,
    typer.Option(
        "--no-token",
        help="Serve without a token: loopback only, and then any local program can "
        "drive the agents",
    ),
]
StoreOpt = Annotated[
    str | None,
    typer.Option(
        "--store",
        metavar="URL",
        help="postgresql://user@host/db: instances, sessions, blobs and the tether ring "
        "in that database, shared by every replica on it (default: [store] url in "
        "visus.toml, $VISUS_STORE; none: local files)",
        show_default=False,
    ),
]
MountOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--mcp",
        metavar="NAME=COMMAND ARGS...|NAME=URL",
        help="MCP server every instance's agent mounts as tools NAME__TOOL (repeatable)",
    ),
]
RootOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--root",
        metavar="DIR",
        help="Folder the agents (and /mcp's view) may reach, at most: a create request "
        "only narrows these (repeatable; default: [server] roots, else <data>/files)",
    ),
]
AllowWriteOpt = Annotated[
    bool,
    typer.Option(
        "--allow-write",
        help="Give the agents the edit tool (default: [server] write_tools, off)",
    ),
]
NoFetchUrlsOpt = Annotated[
    bool,
    typer.Option(
        "--no-fetch-urls",
        help="No tool (the agents', /mcp's) fetches an https URL a client names "
        "(default: [server] fetch_urls, on: public addresses only)",
    ),
]


HostOpt = Annotated[str, typer.Option(help="Address to listen on")]
PortOpt = Annotated[int, typer.Option(help="Port to listen on")]
NoMcpOpt = Annotated[bool, typer.Option("--no-mcp", help="Do not serve /mcp")]


def serve(
    host: HostOpt = "127.0.0.1",
    port: PortOpt = 8750,
    data: DataOpt = None,
    model: ModelOpt = None,
    token: TokenOpt = None,
    no_token: NoTokenOpt = False,
    store: StoreOpt = None,
    no_mcp: NoMcpOpt = False,
    mount: MountOpt = None,
    root: RootOpt = None,
    allow_write: AllowWriteOpt = False,
    no_fetch_urls: NoFetchUrlsOpt = False,
    open_metrics: OpenMetricsOpt = False,
    log_format: LogFormatOpt = "text",
) -> None:
    """Serve the tether API, the MCP endpoint and the web chat.

    Embedded defaults: the offline reference model (when no provider key is set), data
    under the user's data folder (or --data / VISUS_DATA), loopback only, a random token
    printed in the web chat's URL (open that URL; the page keeps the token in its own
    storage, never a cookie; API clients send Authorization: Bearer <token>). What clients
    may reach is decided here, once: --root, --mcp, --allow-write and --no-fetch-urls
    over visus.toml;
    a create request only narrows it, and no agent reaches visus's own files.
    """
    from visus.agent import McpServerSpec
    from visus.app import create_main_app
    from visus.cli._common import (
        check_listen,
        check_model_ref,
        check_roots,
        config,
        data_origin,
        data_root,
    )
    from visus.cli.store import store_url
    from visus.errors import VisusError
    from visus.telemetry.logs import setup_logging
    from visus.tether.server import tether_server

    # The same data folder as run, chat and session (data_dir in visus.toml counts).
    origin = data_origin(data)
    data = data_root(data)
    check_roots(root)
    check_model_ref(model)
    check_listen(host, port)
    if log_format not in ("text", "json"):
        typer.echo(f"visus: serve: --log-format is text or json, not {log_format!r}", err=True)
        raise typer.Exit(2)
    # Before the app is built: the MCP SDK's server, made for /mcp, configures logging
    # (a rich handler wrapping every line at 80 columns in a log file) unless the root
    # logger has a handler already.
    setup_logging("json" if log_format == "json" else "text")
    try:
        cfg = config()  # read once: every gate below comes from this value
        kept = cfg.server.token
        token = token or (kept.get_secret_value() if kept else None)
        url = store_url(store)
        app = create_main_app(
            data=data,
            token=token,
            no_token=no_token,
            model=model,
            mcp=not no_mcp,
            host=host,
            roots=root,
            mcp_servers=[McpServerSpec.parse(flag) for flag in mount or ()],
            write_tools=True if allow_write else None,
            store=url,
            config=cfg,
            fetch_urls=False if no_fetch_urls else None,
            open_metrics=open_metrics,
        )
    except (VisusError, ImportError) as e:
        typer.echo(f"visus: {e}", err=True)
        raise typer.Exit(2) from e
    generated = token is None and not no_token
    started = _Started(host, port, data, url, model, cfg, generated, mcp=not no_mcp)
    _banner(app, started, origin)
    _secrets(cfg)
    # tether_server drains on SIGTERM (/readyz 503 first) and ends open SSE streams;
    # plain uvicorn would wait for them.
    tether_server(app, host=host, port=port, log_level="warning", log_config=None).run()


def _secrets(cfg: VisusConfig) -> None:
    """The configuration's keys and tokens, kept out of every log line."""
    from visus.telemetry.logs import register_secret

    for entry in cfg.providers.values():
        if entry.api_key is not None:
            register_secret(entry.api_key.get_secret_value())
    for secret in (cfg.store.url, cfg.auxiliary.vision.api_key, cfg.telegram.bot_token):
        if secret is not None:
            register_secret(secret.get_secret_value())


@dataclass(frozen=True)
class _Started:
    """What this start was given, as the banner tells it."""

    host: str
    port: int
    data: Path
    store: str | None
    model: str | None
    config: VisusConfig
    generated: bool  # the token was made at this start
    mcp: bool


def _banner(app: FastAPI, started: _Started, origin: str) -> None:
    """What ``visus serve`` prints at start: the data folder and why it is the one, where
    to open the web chat (with the token this start made), the API and /mcp, the model,
    and what the agents may reach."""
    from visus.cli._common import data_line, model_line

    base = open_url(started.host, started.port)
    typer.echo(f"visus serve · data {data_line(started.data, origin)}")
    if _is_wildcard(started.host):
        import socket

        typer.echo(
            f"  listening  every address ({started.host} port {started.port}): from another "
            f"machine open http://{socket.gethostname()}:{started.port}/ or its IP address"
        )
    if started.store:
        from visus.store.base import redact_url

        replica = app.state.registry.store.replica
        typer.echo(f"  store      {redact_url(started.store)}  (replica {replica})")
    token = app.state.token
    if started.generated:
        # As Jupyter does: the URL to open, with the token this start made.
        typer.echo(f"  web chat   {base}/?token={token}")
        typer.echo(
            "  token      made at start; API clients send Authorization: Bearer <token> "
            "([server] token or VISUS_TOKEN keeps one)"
        )
    else:
        typer.echo(f"  web chat   {base}/" + ("?token=<your token>" if token else ""))
    if token is None:
        typer.echo(
            "  token      none (--no-token): any program on this machine can drive the agents"
        )
    typer.echo(f"  tether API {base}/v1   (OpenAPI {base}/openapi.json)")
    policy = app.state.policy
    if started.mcp:
        seen = ", ".join(str(r) for r in policy.roots)
        typer.echo(f"  MCP        {base}/mcp   (its view tool reads {seen}; --root sets it)")
    line = model_line(started.model, started.config).removeprefix("model ")
    typer.echo(f"  model      {line}")
    picks = "any" if policy.models.any else ", ".join(policy.models.refs)
    typer.echo(f"  models     clients may pick {picks}  ([server] models)")
    typer.echo(f"  instance   {app.state.default_instance} (the web chat's)")
    for shown_root in policy.roots:
        # Where to put what the agents should read or view (their roots, at most).
        typer.echo(f"  files      {shown_root}  (agents read and view files here)")
    if policy.write_tools:
        typer.echo("  edit       on: agents may change files under these roots")
    if not policy.fetch_urls:
        typer.echo("  URLs       off: no tool fetches an https URL a client names")
    _warn_exposed(started.data)


def _is_wildcard(host: str) -> bool:
    return host.strip("[]") in ("0.0.0.0", "::", "")


def open_url(host: str, port: int) -> str:
    """The base URL to open for a server listening on ``host``: a wildcard address
    (``0.0.0.0``, ``::``) is where it listens, not an address a browser can open, so
    this machine's loopback stands for it.

    Example:
        >>> open_url("0.0.0.0", 8750), open_url("::", 8750), open_url("10.0.0.5", 80)
        ('http://127.0.0.1:8750', 'http://[::1]:8750', 'http://10.0.0.5:80')
    """
    bare = host.strip("[]")
    if _is_wildcard(host):
        bare = "::1" if ":" in bare else "127.0.0.1"
    shown = f"[{bare}]" if ":" in bare else bare
    return f"http://{shown}:{port}"


#: The data folder's own subfolders (records, blobs, instances, logs) ``visus serve``
#: checks at start; ``files`` is the operator's to share.
_OWN_FOLDERS = ("", "sessions", "blobs", "serve", "serve/instances", "logs", "integrations")


def _warn_exposed(data: Path) -> None:
    """Warn about data folders that group or others may read. visus creates them 0700;
    one made before (0755), or by hand, is left as it is: the operator may share it on
    purpose (a backup group), so this says what to run instead of changing it."""
    import stat

    from visus.paths import exposed

    for folder in exposed(data / name for name in _OWN_FOLDERS):
        mode = stat.filemode(folder.stat().st_mode)
        typer.echo(
            f"visus: warning: {folder} is {mode}: other users can list the sessions, "
            f"instances and images in it (the files are 0600); chmod 700 {folder}",
            err=True,
        )


def register(app: typer.Typer) -> None:
    from visus.cli._help import SERVE

    app.command("serve", rich_help_panel=SERVE)(serve)
