"""``visus view``: see a file as the model would, or the refusal it would get.

Example:
    $ visus view shot.png --model claude-sonnet-4-6 --json
    {"ok": true, "media_type": "image/png", "width": 1568, ...}

Exit status: 0 for a perception, 3 for a refusal, 2 when ``--out`` cannot be written or a
``--root`` is not a folder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

if TYPE_CHECKING:
    from visus.perception import Perception, Reach, Refusal

__all__ = ["parse_region", "register"]

EXIT_REFUSAL = 3
EXIT_OUT_FAILED = 1  # the work failed (visus --help's exit-code table)


PathArg = Annotated[
    str,
    typer.Argument(
        help="File to view (yours, anywhere; under a --root if given), an https URL, or "
        "sha256:<hex> of an image in the --session's record."
    ),
]
RegionOpt = Annotated[
    str | None,
    typer.Option(
        metavar="X0,Y0,X1,Y1",
        help="Zoom: show only this part, in the source's pixels (pdf: points), at up to "
        "the model's full resolution.",
    ),
]
RootOpt = Annotated[
    list[Path] | None,
    typer.Option(
        metavar="DIR",
        help="Check the path against these folders, as an agent's reach (repeatable); "
        "default: any file you name, relative paths from the current directory.",
    ),
]
RenderOpt = Annotated[
    bool, typer.Option("--render/--no-render", help="Allow rendering svg, text and pdf.")
]
LoopbackOpt = Annotated[
    bool,
    typer.Option("--allow-loopback-http", help="Allow http:// URLs to loopback (testing)."),
]
SessionOpt = Annotated[
    str | None,
    typer.Option("--session", "-s", help="Session whose record a sha256: ref names."),
]
DataOpt = Annotated[
    Path | None, typer.Option("--data", help="Data folder (default: visus.toml's).")
]


def view_command(
    path: PathArg,
    model: Annotated[
        str,
        typer.Option("--model", "-m", help="Model to fit for."),
    ] = "claude-sonnet-4-6",  # perception.DEFAULT_MODEL; not imported, for a fast --help
    page: Annotated[int | None, typer.Option(help="PDF page, 1-based.")] = None,
    offset: Annotated[int | None, typer.Option(help="Text: first line, 0-based.")] = None,
    limit: Annotated[int | None, typer.Option(help="Text: lines to render.")] = None,
    region: RegionOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    out: Annotated[Path | None, typer.Option(help="Write the fitted image here.")] = None,
    root: RootOpt = None,
    render: RenderOpt = True,
    allow_loopback_http: LoopbackOpt = False,
    session: SessionOpt = None,
    data: DataOpt = None,
) -> None:
    """View a file or an https URL as an image fitted for a model, or say why it was refused.

    A URL is fetched through the same SSRF gate as the agent's view tool.
    """
    from visus.cli._common import check_roots
    from visus.perception import Refusal, is_digest_ref, view

    check_roots(root)
    _check_model(model)
    box = _region(region)
    reach = _reach(path, root, render)
    source: str | bytes | Refusal = path
    name: str | None = None
    if path.startswith(("https://", "http://")):
        source, name = _fetch(path, allow_loopback_http), path.rsplit("/", 1)[-1] or None
    if is_digest_ref(path):
        result = _view_recorded(
            path, session, data, reach=reach, model=model, page=page, region=box
        )
    elif isinstance(source, Refusal):
        result = source
    else:
        result = view(
            source,
            reach=reach,
            model=model,
            page=page,
            offset=offset,
            limit=limit,
            name=name,
            region=box,
        )
    if isinstance(result, Refusal):
        if result.reason == "outside_reach" and root:
            result = _naming_roots(result, reach)
        _emit_refusal(result, as_json=as_json)
        raise typer.Exit(EXIT_REFUSAL)
    if out is not None:
        _write_out(result.data, out, as_json=as_json)
    _emit_perception(result, as_json=as_json, out=out)


def _reach(path: str, root: list[Path] | None, render: bool) -> Reach:
    """What ``visus view`` may open. The person at the terminal is the operator: without
    ``--root`` the file they name is theirs to see wherever it is (as ``visus run
    --image`` reads it), relative paths from the current directory; ``--root``
    checks a path against those folders, as an agent's reach would."""
    from visus.perception import Reach, is_digest_ref

    if root:
        return Reach(root, render=render)
    roots = [Path.cwd()]
    if not path.startswith(("https://", "http://")) and not is_digest_ref(path):
        roots.append((Path.cwd() / Path(path).expanduser()).parent)
    return Reach(roots, render=render)


def _naming_roots(refusal: Refusal, reach: Reach) -> Refusal:
    """An ``outside_reach`` refusal that says which roots ``--root`` gave, and how to
    reach the file (``visus view`` without ``--root`` opens any file of the user's)."""
    from dataclasses import replace

    roots = ", ".join(str(r) for r in reach.roots)
    return replace(
        refusal,
        message=f"{refusal.message} (--root: {roots}; add its folder with --root DIR, or "
        "leave --root out to view any file of yours)",
    )


def parse_region(text: str) -> list[int] | None:
    """``x0,y0,x1,y1`` as four whole numbers (the CLI's and ``visus chat``'s spelling of
    ``view``'s ``region``), or None when it is not that.

    Example:
        >>> parse_region("10, 20,300,400"), parse_region("1,2,3"), parse_region("a,b,c,d")
        ([10, 20, 300, 400], None, None)
    """
    try:
        box = [int(p.strip()) for p in text.split(",")]
    except ValueError:
        return None
    return box if len(box) == 4 else None


def _write_out(data: bytes, out: Path, *, as_json: bool) -> None:
    """``--out``: the fitted image written; a failure is said (as JSON with ``--json``)
    and exits 1."""
    try:
        out.write_bytes(data)
    except OSError as e:
        why = e.strerror or str(e)  # str(e) repeats the path the message already names
        message = f"cannot write {out}: {why}"
        failed = {"ok": False, "reason": "invalid_input", "message": message}
        if as_json:
            typer.echo(json.dumps(failed))
        else:
            typer.echo(f"visus: {message}", err=True)
        raise typer.Exit(EXIT_OUT_FAILED) from None


def _region(text: str | None) -> list[int] | None:
    """``--region x0,y0,x1,y1`` as four whole numbers; anything else is a usage error."""
    if text is None:
        return None
    box = parse_region(text)
    if box is None:
        typer.echo(
            f"visus: --region takes x0,y0,x1,y1 (four whole numbers, the source's pixels), "
            f"not {text!r}",
            err=True,
        )
        raise typer.Exit(2)
    return box


def _view_recorded(
    ref: str,
    session: str | None,
    data: Path | None,
    *,
    reach: Reach,
    model: str,
    page: int | None,
    region: list[int] | None,
) -> Perception | Refusal:
    """``sha256:...`` within one session's record: its images only, never another's."""
    from visus.cli._common import data_root
    from visus.cli._sessions import find
    from visus.errors import VisusError
    from visus.perception import Refusal, view_digest
    from visus.record.messages import DocumentPart, ImagePart

    if session is None:
        return Refusal(
            "invalid_input",
            f"{ref} names an image of a session's record: give --session ID",
            ref,
        )
    found = find(data_root(data), session)  # the web chat's sessions too
    try:
        messages = found.place.sessions.load(found.id).messages
    except VisusError as e:
        return Refusal("not_found", f"session {session!r}: {e}", ref)
    known = [
        p.digest
        for m in messages
        if m.kind != "assistant"
        for p in m.parts
        if isinstance(p, ImagePart | DocumentPart)
    ]
    blobs = found.place.blobs
    return view_digest(
        ref, known=known, load=blobs.get, reach=reach, model=model, page=page, region=region
    )


def _check_model(model: str) -> None:
    """Only a model no provider claims is refused (exit 2): a bare name that is neither
    listed nor of a family visus knows, or an unknown provider prefix. A model of a known
    provider the catalog does not list takes its family's nearest profile, and visus says
    so once (with a "did you mean" when the name is a listed one's near miss)."""
    from visus.cli._common import check_model_ref
    from visus.errors import VisusError
    from visus.models import get_model, is_known_model, parse_model_ref, similar_models

    check_model_ref(model)
    try:
        if is_known_model(model) or get_model(model).assumed_from is not None:
            return
        named = model.partition(":")[0] == parse_model_ref(model)[0]
    except VisusError as e:  # an unknown provider prefix
        typer.echo(f"visus: {e}", err=True)
        raise typer.Exit(2) from None
    if named:  # a provider's own name for it (a local server's model): text only
        return
    close = similar_models(model)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    typer.echo(
        f"visus: unknown model {model!r}{hint} (`visus models` lists the known ones)", err=True
    )
    raise typer.Exit(2)


def _fetch(url: str, allow_loopback_http: bool) -> bytes | Refusal:
    """The URL's bytes through visus.net's SSRF gate, or the refusal the tool would give."""
    from visus import limits
    from visus.errors import NetError
    from visus.net import fetch
    from visus.perception import fetch_refusal

    try:
        return fetch(
            url, max_bytes=limits.MAX_SOURCE_BYTES, allow_loopback_http=allow_loopback_http
        ).data
    except NetError as e:
        return fetch_refusal(url, e)


def _emit_refusal(refusal: Refusal, *, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(refusal.to_json()))
        return
    typer.echo(f"visus: refused ({refusal.reason}): {refusal.message}", err=True)


def _emit_perception(p: Perception, *, as_json: bool, out: Path | None) -> None:
    if as_json:
        payload = p.to_json()
        if out is not None:
            payload["out"] = str(out)
        typer.echo(json.dumps(payload))
        return
    console = Console(highlight=False, soft_wrap=True)
    console.print(f"[bold green]{escape(p.source)}[/bold green] for [bold]{escape(p.model)}[/bold]")
    console.print(f"  {escape(p.describe())}")
    console.print(
        f"  sent     {p.width}x{p.height} {p.media_type}, {p.size:,} bytes, ~{p.tokens} tokens"
    )
    console.print(f"  source   {p.source_width}x{p.source_height} {p.source_kind}")
    if p.region is not None:
        console.print(f"  region   {p.region.as_list()}")
    if p.page is not None:
        console.print(f"  page     {p.page} of {p.page_count}")
    if p.line_start is not None:
        console.print(f"  lines    {p.line_start}-{p.line_end} of {p.line_total}")
    if p.frame_count is not None and p.frame_count > 1:
        console.print(f"  frames   first of {p.frame_count}")
    console.print(f"  digest   {p.tagged_digest}")
    if out is not None:
        console.print(f"  written  {escape(str(out))}")


def register(app: typer.Typer) -> None:
    """Add ``visus view`` to the app."""
    from visus.cli._help import SEE

    app.command("view", rich_help_panel=SEE)(view_command)
