"""``visus config show`` and ``visus config path``: the resolved configuration, secrets masked.

Example:
    $ visus config show --json
    $ visus config path
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any

import typer

__all__ = ["register"]

_ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", help="visus.toml to read (default: $VISUS_CONFIG or user dir)."),
]


_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(name: str) -> str:
    return name if _BARE_KEY.match(name) else json.dumps(name, ensure_ascii=False)


def _toml(value: Any) -> str:
    """One TOML value (strings in JSON's escapes, which TOML's basic strings share)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)  # TOML spells floats as Python does (inf, nan included)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value if v is not None) + "]"
    if isinstance(value, dict):
        items = [f"{_key(str(k))} = {_toml(v)}" for k, v in value.items() if v is not None]
        return "{ " + ", ".join(items) + " }" if items else "{}"
    raise TypeError(f"no TOML for {type(value).__name__}")


def _lines(data: Any, prefix: str = "") -> list[str]:
    """``data`` as TOML dotted keys; an unset value is a comment (TOML has no null).

    Example:
        >>> _lines({"a": {"b": 1, "c": None}, "d": [{"e": "x"}]})
        ['a.b = 1', '# a.c is unset', 'd = [{ e = "x" }]']
    """
    if isinstance(data, dict) and (not prefix or data):
        out: list[str] = []
        for key, value in data.items():
            name = f"{prefix}.{_key(str(key))}" if prefix else _key(str(key))
            out.extend(_lines(value, name))
        return out
    if data is None:
        return [f"# {prefix} is unset"]
    return [f"{prefix} = {_toml(data)}"]


def show(
    config: _ConfigOption = None, as_json: Annotated[bool, typer.Option("--json")] = False
) -> None:
    """Print the resolved configuration (file, then VISUS_* variables) with secrets masked,
    as TOML (a visus.toml could hold it) or, with --json, as JSON."""
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
    # The folder every command (run, chat, session, serve, scripts/serve.sh) uses.
    typer.echo(f"# data_dir: {cfg.data_dir}, from {cfg.data_origin}", err=True)
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
    from visus.cli._help import DATA

    group = typer.Typer(
        name="config", help="Show the resolved configuration.", no_args_is_help=True
    )
    group.command("show")(show)
    group.command("path")(path)
    app.add_typer(group, name="config", rich_help_panel=DATA)
