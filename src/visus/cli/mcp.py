"""``visus mcp``: the visus MCP server over stdio, talking to a tether server.

Example:
    $ visus mcp --url http://127.0.0.1:8750 --root ~/work
    (an MCP host such as Claude Code starts this command and speaks JSON-RPC on stdio)
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

__all__ = ["host_config", "register"]

DEFAULT_URL = "http://127.0.0.1:8750"


def _command() -> list[str]:
    """How a host starts this visus: the ``visus`` script of this environment, by its
    absolute path (a host's PATH rarely holds the venv), else this Python with -m."""
    script = Path(sys.executable).with_name("visus")
    if script.is_file():
        return [str(script)]
    found = shutil.which("visus")
    return [found] if found else [sys.executable, "-c", "from visus.cli import main; main()"]


def host_config(
    roots: list[Path] | None,
    url: str,
    max_bytes: int | None,
    token: str | None = None,
    *,
    fetch_urls: bool = True,
) -> dict[str, Any]:
    """The ``mcpServers`` entry that starts ``visus mcp`` as it was called here (with
    the token, when one was given, in the server's environment).

    Example:
        >>> entry = host_config([Path("/srv/files")], DEFAULT_URL, None)["mcpServers"]["visus"]
        >>> entry["args"]
        ['mcp', '--root', '/srv/files']
    """
    command, *prefix = _command()
    args = [*prefix, "mcp"]
    for root in roots or [Path.cwd()]:
        args += ["--root", str(root.expanduser().resolve())]
    if url != DEFAULT_URL:
        args += ["--url", url]
    if max_bytes is not None:
        args += ["--max-result-bytes", str(max_bytes)]
    if not fetch_urls:
        args.append("--no-fetch-urls")
    entry: dict[str, Any] = {"command": command, "args": args}
    if token:
        entry["env"] = {"VISUS_TOKEN": token}
    return {"mcpServers": {"visus": entry}}


def mcp_command(
    url: Annotated[
        str, typer.Option(envvar="VISUS_TETHER_URL", help="Base URL of the tether server.")
    ] = DEFAULT_URL,
    token: Annotated[
        str | None, typer.Option(envvar="VISUS_TOKEN", help="Bearer token of the tether server.")
    ] = None,
    root: Annotated[
        list[Path] | None,
        typer.Option(
            metavar="DIR", help="Root the view tool may see (repeatable); default: the current dir."
        ),
    ] = None,
    max_result_bytes: Annotated[
        int | None,
        typer.Option(
            envvar="VISUS_MCP_MAX_RESULT_BYTES",
            help="Largest tool result in bytes (default 1 MB: what Claude's hosts take).",
        ),
    ] = None,
    no_fetch_urls: Annotated[
        bool,
        typer.Option(
            "--no-fetch-urls",
            help="No tool fetches an https URL a client names: view refuses it "
            "(outside_reach), vision_analyze its file_url (url_blocked) (default: [server] "
            "fetch_urls in visus.toml, on: public addresses only).",
        ),
    ] = False,
    print_config: Annotated[
        bool,
        typer.Option(
            "--print-config",
            help="Print the mcpServers entry an MCP host needs to start this server (absolute "
            "paths: a host starts it with its own PATH and working folder), then exit.",
        ),
    ] = False,
) -> None:
    """Run the MCP server on stdio: tether_send/read/instances, view, vision_analyze."""
    import anyio

    from visus.cli._common import check_roots, config, data_root

    check_roots(root)
    if print_config:
        entry = host_config(root, url, max_result_bytes, token, fetch_urls=not no_fetch_urls)
        typer.echo(json.dumps(entry, indent=2))
        return

    from visus.agent.policy import guarded_reach
    from visus.mcp_server import build_server
    from visus.telemetry.logs import setup_logging
    from visus.tether.client import TetherClient

    # Before the server is built: the MCP SDK configures logging otherwise (a rich
    # handler that wraps every line of the host's log file at 80 columns).
    setup_logging("text")

    # view never shows visus's own files, the data folder of this configuration included.
    urls = config().server.fetch_urls and not no_fetch_urls
    reach = guarded_reach(list(root or [Path.cwd()]), data=[data_root(None)], urls=urls)

    async def main() -> None:
        async with TetherClient(url, token) as client:
            server = build_server(client, roots=reach, result_bytes=max_result_bytes)
            await server.run_stdio_async()

    anyio.run(main)


def register(app: typer.Typer) -> None:
    from visus.cli._help import SERVE

    app.command("mcp", rich_help_panel=SERVE)(mcp_command)
