"""The ``visus`` command line: a typer app with no logic of its own.

Each module in this package owns one group of commands and exposes
``register(app: typer.Typer) -> None``; modules are discovered here, so adding a
command never edits this file.

Example:
    $ visus view screenshot.png --model claude-sonnet-4-6 --json
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from pathlib import Path
from typing import Annotated

import typer

__all__ = ["app", "main"]

app = typer.Typer(
    name="visus",
    help="Give LLM agents eyes: view files as images, run agents, serve them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        from visus import __version__

        typer.echo(f"visus {__version__}")
        raise typer.Exit()


@app.callback()
def _global(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            "-V",
            help="Print the version and exit",
            callback=_print_version,
            is_eager=True,
        ),
    ] = False,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="visus.toml to use (default: $VISUS_CONFIG, else the user's config dir)",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Give LLM agents eyes: view files as images, run agents, serve them."""
    if config is not None:
        # Every command loads its configuration through visus.config, which reads this.
        os.environ["VISUS_CONFIG"] = str(config)


def _register_all() -> None:
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        module.register(app)


_register_all()


def main() -> None:
    """Console-script entry point."""
    app()
