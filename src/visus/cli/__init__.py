"""The ``visus`` command line: a typer app with no logic of its own.

Each module in this package owns one group of commands and exposes
``register(app: typer.Typer) -> None``; modules are discovered here, so adding a
command never edits this file.

Example:
    $ visus view screenshot.png --model claude-sonnet-4-6 --json
"""

from __future__ import annotations

import importlib
import pkgutil

import typer

__all__ = ["app", "main"]

app = typer.Typer(
    name="visus",
    help="Give LLM agents eyes: view files as images, run agents, serve them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


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
