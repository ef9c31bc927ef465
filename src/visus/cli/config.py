"""``visus config show`` and ``visus config path``: the resolved configuration, secrets masked.

Example:
    $ visus config show --json
    $ visus config path
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

__all__ = ["register"]

_ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", help="visus.toml to read (default: $VISUS_CONFIG or user dir)."),
]


def _lines(data: Any, prefix: str = "") -> list[str]:
    if isinstance(data, dict):
        out: list[str] = []
        for key, value in data.items():
            out.extend(_lines(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return [f"{prefix} = {json.dumps(data, ensure_ascii=False)}"]


def show(
    config: _ConfigOption = None, as_json: Annotated[bool, typer.Option("--json")] = False
) -> None:
    """Print the resolved configuration (file, then VISUS_* variables) with secrets masked."""
    from visus.config import config_path, load_config
    from visus.errors import ConfigError

    try:
        cfg = load_config(config)
    except ConfigError as e:
        typer.echo(f"visus: {e}", err=True)
        raise typer.Exit(2) from None
    data = cfg.masked()
    # Which file was read (stderr, so --json stays one object on stdout).
    where = config_path(config)
    if where.is_file():
        typer.echo(f"# config file: {where}", err=True)
    else:
        typer.echo(f"# config file: none ({where} does not exist): defaults and VISUS_*", err=True)
    if as_json:
        typer.echo(json.dumps(data, indent=2, ensure_ascii=False))
    else:
        typer.echo("\n".join(_lines(data)))


def path(config: _ConfigOption = None) -> None:
    """Print where the configuration file is looked for, and whether it exists."""
    from visus.config import config_path

    where = config_path(config)
    typer.echo(str(where))
    if not where.is_file():
        typer.echo("(no file there: defaults and environment apply)", err=True)


def register(app: typer.Typer) -> None:
    """Add the ``config`` command group."""
    group = typer.Typer(
        name="config", help="Show the resolved configuration.", no_args_is_help=True
    )
    group.command("show")(show)
    group.command("path")(path)
    app.add_typer(group, name="config")
