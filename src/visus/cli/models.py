"""``visus models``: the model catalog (vision, PDF, video, image limits, prices).

Example:
    $ visus models
    $ visus models --json
"""

from __future__ import annotations

import dataclasses
import json
from typing import Annotated, Any

import typer

__all__ = ["register"]


def _row(spec: Any) -> dict[str, Any]:
    return {
        "model": spec.ref,
        "vision": spec.vision,
        "pdf": spec.pdf,
        "video": spec.video,
        "images_in_tool_results": spec.images_in_tool_results,
        "max_edge": spec.max_edge,
        "max_pixels": spec.max_pixels,
        "max_image_bytes": spec.max_image_bytes,
        "max_images": spec.max_images,
        "media_types": sorted(spec.media_types),
        "context_tokens": spec.context_tokens,
        "input_usd_per_mtok": spec.input_price_per_mtok,
        "output_usd_per_mtok": spec.output_price_per_mtok,
        "cache_min_tokens": spec.cache_min_tokens,
        "thinking": spec.thinking,
        "preserved_thinking": spec.preserved_thinking,
        "forced_tool_choice": spec.forced_tool_choice,
        "efforts": list(spec.efforts),
        "legacy": spec.legacy,
        "token_formula": dataclasses.asdict(spec.tokens),
    }


def _yes(flag: bool) -> str:
    return "yes" if flag else "-"


def models(
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON array")] = False,
    provider: Annotated[
        str | None, typer.Option("--provider", "-p", help="Only this provider's models")
    ] = None,
) -> None:
    """List the models visus knows: what they take (vision, pdf, video), limits, prices.

    Legacy models (a newer one of the family replaces them) say so. A model outside this
    list still works as ``provider:model``: it takes the profile of its family's nearest
    listed model (visus says which, once), or a [[models]] entry sets its own.
    """
    from visus.models.catalog import CATALOG

    rows = [
        _row(spec)
        for spec in sorted(CATALOG.values(), key=lambda s: (s.provider, s.name))
        if provider is None or spec.provider == provider
    ]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        from visus.cli._common import fail
        from visus.models import PROVIDERS

        fail(f"no models for provider {provider!r} (providers: {', '.join(PROVIDERS)})")
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    columns = ("model", "vision", "pdf", "video", "max edge", "max MP", "$/Mtok in/out", "")
    for column in columns:
        table.add_column(column, justify="left" if column in ("model", "") else "right")
    for r in rows:
        table.add_row(
            r["model"],
            _yes(r["vision"]),
            _yes(r["pdf"]),
            _yes(r["video"]),
            str(r["max_edge"]),
            f"{r['max_pixels'] / 1e6:.2f}",
            f"{r['input_usd_per_mtok']:g} / {r['output_usd_per_mtok']:g}",
            "legacy" if r["legacy"] else "",
        )
    Console(width=200, soft_wrap=True).print(table)


def register(app: typer.Typer) -> None:
    """Add the ``models`` command."""
    from visus.cli._help import SEE

    app.command("models", rich_help_panel=SEE)(models)
