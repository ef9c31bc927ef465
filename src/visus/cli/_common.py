"""What several commands share: where the data folder is, and how a command fails.

Not a command module (the leading underscore keeps discovery away from it).

Example:
    >>> from pathlib import Path
    >>> data_root(Path("/tmp/visus-data"))
    PosixPath('/tmp/visus-data')
"""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import typer

__all__ = ["data_root", "fail"]


def fail(message: str, code: int = 2) -> NoReturn:
    """Print ``visus: message`` on stderr and leave with ``code``."""
    typer.echo(f"visus: {message}", err=True)
    raise typer.Exit(code)


def data_root(data: Path | None) -> Path:
    """The data folder exactly as ``visus run`` picks it.

    ``--data`` when given, else the configuration's ``data_dir`` (``visus.toml``, then
    ``$VISUS_DATA``, then the user's data folder), so the commands that read sessions
    find the ones ``run`` and ``chat`` wrote. A broken configuration fails the command.
    """
    from visus.config import load_config
    from visus.errors import ConfigError
    from visus.paths import data_dir

    if data is not None and str(data) != "":
        return data_dir(data)
    try:
        return data_dir(load_config().data_dir)
    except ConfigError as e:
        fail(str(e))
