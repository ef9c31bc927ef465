"""``visus mcp``: the visus MCP server over stdio, talking to a tether server.

Example:
    $ visus mcp --url http://127.0.0.1:8750 --root ~/work
    (an MCP host such as Claude Code starts this command and speaks JSON-RPC on stdio)
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ["register"]

DEFAULT_URL = "http://127.0.0.1:8750"


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
) -> None:
    """Run the MCP server on stdio: tether_send/read/instances, view, vision_analyze."""
    import anyio

    from visus.cli._common import check_roots, data_root

    check_roots(root)

    from visus.agent.policy import guarded_reach
    from visus.mcp_server import build_server
    from visus.tether.client import TetherClient

    # view never shows visus's own files, the data folder of this configuration included.
    reach = guarded_reach(list(root or [Path.cwd()]), data=[data_root(None)])

    async def main() -> None:
        async with TetherClient(url, token) as client:
            server = build_server(client, roots=reach, result_bytes=max_result_bytes)
            await server.run_stdio_async()

    anyio.run(main)


def register(app: typer.Typer) -> None:
    from visus.cli._help import SERVE

    app.command("mcp", rich_help_panel=SERVE)(mcp_command)
