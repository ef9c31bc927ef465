"""What several commands share: where the data folder is, and how a command fails.

Not a command module (the leading underscore keeps discovery away from it).

Example:
    >>> from pathlib import Path
    >>> data_root(Path("/tmp/visus-data"))
    PosixPath('/tmp/visus-data')
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import typer

if TYPE_CHECKING:
    from visus.config import VisusConfig
    from visus.retention import RetentionPolicy

__all__ = ["cannot_listen", "check_roots", "config", "data_root", "fail", "retention"]


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
    from visus.paths import data_dir

    if data is not None and str(data) != "":
        return data_dir(data)
    return data_dir(config().data_dir)


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
    from visus.errors import VisusError
    from visus.retention import RetentionPolicy

    settings = config().retention
    try:
        return RetentionPolicy(
            live_turns=settings.live_turns if live_turns is None else live_turns,
            chunk=settings.chunk if chunk is None else chunk,
            image_token_budget=settings.image_token_budget if budget is None else budget,
            attachments_live_turns=settings.attachments_window,
            live_images=settings.images_window,
            image_chunk=settings.image_chunk,
        )
    except VisusError as e:
        fail(str(e))


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


def check_roots(roots: list[Path] | None) -> None:
    """Exit 2 naming a ``--root`` that is not an existing folder (a typo would otherwise
    surface later as every path being 'not found')."""
    for root in roots or []:
        if not root.expanduser().is_dir():
            why = "is not a folder" if root.expanduser().exists() else "does not exist"
            fail(f"--root {root} {why}")
