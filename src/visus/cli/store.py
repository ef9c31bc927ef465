"""``visus store migrate`` and ``visus gc``: the store's schema and its blob garbage.

Example:
    $ visus store migrate --store postgresql://visus@db.internal/visus
    $ visus gc --grace 3600
"""

from __future__ import annotations

from typing import Annotated

import typer

from visus.cli._common import DataOpt

__all__ = ["register", "store_url"]

StoreOpt = Annotated[
    str | None,
    typer.Option(
        "--store",
        metavar="URL",
        help="postgresql://user@host/db (default: [store] url in visus.toml, $VISUS_STORE; "
        "none: local files)",
        show_default=False,
    ),
]

store_app = typer.Typer(
    help="The store: local files or a PostgreSQL database.", no_args_is_help=True
)


def store_url(explicit: str | None) -> str:
    """``--store`` when given, else ``[store] url`` / ``$VISUS_STORE``, else ``""`` (files)."""
    if explicit is not None:
        return explicit
    from visus.cli._common import config

    url = config().store.url
    return url.get_secret_value() if url is not None else ""


@store_app.command("migrate")
def migrate(store: StoreOpt = None) -> None:
    """Bring the database's schema to this visus's version (replicas also do it on start)."""
    from visus.cli._common import fail
    from visus.errors import VisusError
    from visus.store import is_database_url, open_store

    url = store_url(store)
    if not is_database_url(url):
        fail("store migrate: give --store postgresql://... (local files have no schema)")
    try:
        opened = open_store(url, ".", migrate=True)
    except (VisusError, ImportError) as e:
        fail(str(e))
    before = getattr(opened, "migrated_from", 0)
    opened.close()
    if before == opened.schema_version:
        typer.echo(f"store schema is at version {before}; nothing to do")
    else:
        typer.echo(f"store schema migrated from version {before} to {opened.schema_version}")


def gc(
    store: StoreOpt = None,
    data: DataOpt = None,
    grace: Annotated[
        float,
        typer.Option(
            "--grace",
            min=0,
            help="Keep blobs younger than this many seconds (a turn may not have recorded "
            "them yet)",
        ),
    ] = 3600.0,
) -> None:
    """Delete the blobs no session names any more (files or database)."""
    from visus.cli._common import data_root, fail
    from visus.errors import VisusError
    from visus.store import open_store

    url = store_url(store)
    root = data_root(data)
    try:
        removed = young = 0
        # Local files: the data folder's own sessions and those of `visus serve`.
        for folder in [root] if url else [root, root / "serve"]:
            opened = open_store(url, folder)
            try:
                done = opened.gc(grace_seconds=grace)
            finally:
                opened.close()
            removed, young = removed + done.removed, young + done.young
    except (VisusError, ImportError) as e:
        fail(str(e))
    where = "the database" if url else str(root)
    typer.echo(f"removed {_blobs(removed)} from {where}")
    if young:
        # Else a newcomer who just ran `visus session rm` sees "removed 0" and no why.
        typer.echo(
            f"kept {_blobs(young)} written in the last {grace:g} s (a "
            "running turn may not have recorded them yet): --grace 0 removes them when "
            "no turn runs"
        )


def _blobs(count: int) -> str:
    return f"{count} unreferenced blob{'s' if count != 1 else ''}"


def register(app: typer.Typer) -> None:
    from visus.cli._help import DATA

    app.add_typer(store_app, name="store", rich_help_panel=DATA)
    app.command("gc", rich_help_panel=DATA)(gc)
