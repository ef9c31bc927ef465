"""``visus reference serve``: the offline reference vision server on loopback.

Example:
    $ visus reference serve --port 8760 --context-tokens 32000
"""

from __future__ import annotations

import ipaddress
from typing import Annotated

import typer

from visus import limits
from visus.cli._common import check_listen

__all__ = ["is_loopback", "register"]

_DEFAULT_PORT = 8760


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def serve(
    host: Annotated[
        str, typer.Option(help="Address to bind (loopback unless --allow-remote).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = _DEFAULT_PORT,
    context_tokens: Annotated[
        int, typer.Option("--context-tokens", min=1, help="Context window of the model.")
    ] = limits.REFERENCE_CONTEXT_TOKENS,
    allow_remote: Annotated[
        bool, typer.Option("--allow-remote", help="Allow binding a non-loopback address.")
    ] = False,
    max_output_tokens: Annotated[
        int | None,
        typer.Option(
            "--max-output-tokens",
            min=1,
            help="Cut answers off at this many tokens (or the request's cap, if smaller), "
            "with each wire's truncation signal. Default: never cut.",
        ),
    ] = None,
    json_block: Annotated[
        bool,
        typer.Option(
            "--json",
            help="End every answer with a fenced JSON block of every image seen (words, "
            "positions, colours): for tests and scripts.",
        ),
    ] = False,
) -> None:
    """Serve every provider wire, answered by the OCR-and-colour reference model."""
    if not is_loopback(host) and not allow_remote:
        typer.echo(
            f"visus: refusing to bind {host}: not a loopback address (pass --allow-remote)",
            err=True,
        )
        raise typer.Exit(2)
    check_listen(host, port)
    import uvicorn

    from visus.reference.server import create_app

    base = f"http://{f'[{host}]' if ':' in host else host}:{port}"
    typer.echo(f"visus reference server on {base} (context {context_tokens} tokens)")
    typer.echo(_ENDPOINTS)
    typer.echo(f"try: VISUS_REFERENCE_URL={base} visus run -m reference:anthropic 'hello'")
    app = create_app(context_tokens, max_output_tokens, json_block=json_block or None)
    uvicorn.run(app, host=host, port=port, log_level="warning")


# Like the real services, each wire wants a key (any non-empty one passes).
_ENDPOINTS = """\
  POST /v1/chat/completions              openai-chat       Authorization: Bearer <any>
  POST /v1/responses                     openai-responses  Authorization: Bearer <any>
  POST /v1/messages                      anthropic         x-api-key: <any>
  POST /v1beta/models/M:generateContent  gemini            x-goog-api-key: <any>
  POST /api/chat                         ollama
  POST /model/M/converse                 bedrock           Authorization: <any> (SigV4)"""


def register(app: typer.Typer) -> None:
    """Add the ``reference`` command group."""
    from visus.cli._help import SERVE

    group = typer.Typer(
        help="The offline reference vision model and its server.", no_args_is_help=True
    )
    group.command("serve")(serve)
    app.add_typer(group, name="reference", rich_help_panel=SERVE)
