"""``visus analyze`` and ``visus analyze-video``: one question about a file or a video.

A source starting with ``https://`` is a URL (``http://`` only to loopback, with
``--allow-loopback-http``); anything else is a path, and the reach is the file's
own folder (the user named the file). An input refused prints ``visus: refused
(code): ...`` and exits 3, a model that failed ``visus: (code): ...`` and exits 1, bad
command-line values exit 2 (``visus --help`` has the table). The code is the analyze
error's in lower case (``file_not_found``), as every command spells a refusal.

Example:
    $ visus analyze shot.png --prompt "What error is shown?" --json
    $ visus analyze invoice.pdf -p "Total?" --schema total.schema.json --page-range 1-2
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

if TYPE_CHECKING:
    from visus.analyze import AnalyzeResult
    from visus.config import VisusConfig
    from visus.errors import AnalyzeError
    from visus.perception import Reach

_PAGES = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")

SourceArg = Annotated[str, typer.Argument(help="A file path or an https:// URL")]
PromptOpt = Annotated[str, typer.Option("--prompt", "-p", help="The question to ask")]
ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model",
        "-m",
        help="provider:model (default: [auxiliary.vision] model in visus.toml, else the "
        "agent's model, picked as `visus run --help` says)",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the JSON envelope")]
ConfigOpt = Annotated[Path | None, typer.Option("--config", help="visus.toml to use")]
SessionOpt = Annotated[
    str | None, typer.Option("--session", "-s", help="Add the cost to this session's usage")
]
LoopbackOpt = Annotated[
    bool,
    typer.Option("--allow-loopback-http", help="Allow http:// URLs to loopback (local testing)"),
]


def _usage_error(message: str) -> typer.Exit:
    typer.echo(f"visus: {message}", err=True)
    return typer.Exit(2)


def _pages(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    m = _PAGES.match(text)
    if not m:
        raise _usage_error(f"--page-range takes A-B or N (1-based), not {text!r}")
    first = int(m.group(1))
    return first, int(m.group(2) or first)


def _schema(path: Path | None) -> dict[str, Any] | None:
    if path is None:
        return None
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise _usage_error(f"cannot read --schema {path}: {e.strerror or e}") from e
    except ValueError as e:
        raise _usage_error(f"--schema {path} is not JSON: {e}") from e
    if not isinstance(value, dict):
        raise _usage_error(f"--schema {path} must hold a JSON object")
    from visus.analyze import normalise_format
    from visus.errors import AnalyzeError

    try:  # checked here, with the file's other faults: a command-line mistake (exit 2)
        return normalise_format(value)
    except AnalyzeError as e:
        raise _usage_error(f"--schema {path}: {str(e).removeprefix(f'{e.code}: ')}") from e


def _config(path: Path | None) -> VisusConfig:
    from visus.config import load_config
    from visus.errors import ConfigError

    try:
        return load_config(path)
    except ConfigError as e:
        raise _usage_error(str(e)) from e


def _where(source: str) -> tuple[str | None, str | None, Reach | None]:
    """``(file_path, file_url, reach)`` for a command-line source."""
    from visus.perception import Reach

    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", source):
        return None, source, None
    path = Path(source).expanduser()
    try:
        resolved = path.resolve()
    except (OSError, RuntimeError):
        resolved = path.absolute()
    return str(resolved), None, Reach([resolved.parent])


def _print(result: AnalyzeResult, as_json: bool) -> None:
    if as_json:
        typer.echo(result.to_json())
        return
    if result.structured:
        typer.echo(json.dumps(result.parsed, indent=2, ensure_ascii=False))
    else:
        typer.echo(result.text)
    cached = " · cached" if result.cached else ""
    typer.echo(
        f"[{result.model} · {result.input_tokens} in / {result.output_tokens} out · "
        f"${result.cost_usd:.6f}{cached}]",
        err=True,
    )


def analyze(
    source: SourceArg,
    prompt: PromptOpt,
    model: ModelOpt = None,
    schema: Annotated[
        Path | None, typer.Option("--schema", help="JSON Schema file the answer must meet")
    ] = None,
    as_json: JsonOpt = False,
    page_range: Annotated[
        str | None, typer.Option("--page-range", help="PDF pages A-B (1-based)")
    ] = None,
    cache: Annotated[
        bool, typer.Option("--cache", help="Reuse answers cached in the data folder")
    ] = False,
    session: SessionOpt = None,
    config: ConfigOpt = None,
    allow_loopback_http: LoopbackOpt = False,
) -> None:
    """Ask a vision model one question about an image or PDF."""
    from visus.analyze import FileAnalyzeCache, vision_analyze
    from visus.cli._common import check_model_ref, use_local_reference
    from visus.errors import AnalyzeError

    check_model_ref(model)
    pages = _pages(page_range)
    fmt = _schema(schema)
    cfg = _config(config)
    use_local_reference(model or cfg.vision_target().model)
    file_path, file_url, reach = _where(source)
    store = FileAnalyzeCache(cfg.data_dir / "analyze-cache") if cache else None
    try:
        result = asyncio.run(
            vision_analyze(
                prompt,
                file_path=file_path,
                file_url=file_url,
                model=model,
                format=fmt,
                reach=reach,
                config=cfg,
                cache=store,
                pages=pages,
                session=session,
                allow_loopback_http=allow_loopback_http,
            )
        )
    except AnalyzeError as e:
        _analyze_failed(e, source, allow_loopback_http)
    _print(result, as_json)


#: Codes of an input visus refused (exit 3); the others are the model failing (exit 1).
_REFUSED_CODES = frozenset(
    {
        "INVALID_INPUT",
        "FILE_NOT_FOUND",
        "URL_BLOCKED",
        "FILE_TOO_LARGE",
        "UNSUPPORTED_FILE_TYPE",
        "VISION_NOT_SUPPORTED",
        "PDF_NOT_SUPPORTED",
        "PDF_TOO_MANY_PAGES",
        "VIDEO_NOT_SUPPORTED",
    }
)


def _analyze_failed(e: AnalyzeError, source: str, allowed: bool) -> NoReturn:
    """``visus: refused (code): ...`` (exit 3) or ``visus: (code): ...`` (exit 1), the
    code in lower case as every other command spells a refusal (``refused (not_found)``)."""
    text = _error_text(e, source, allowed).removeprefix(f"{e.code}: ")
    refused = e.code in _REFUSED_CODES
    typer.echo(f"visus: {'refused ' if refused else ''}({e.reason}): {text}", err=True)
    raise typer.Exit(3 if refused else 1) from e


def _error_text(e: Exception, source: str, allowed: bool) -> str:
    """The error as printed; a blocked ``http://`` loopback URL names the option for it."""
    from urllib.parse import urlsplit

    from visus.cli.reference import is_loopback
    from visus.errors import AnalyzeError

    text = str(e)
    if isinstance(e, AnalyzeError) and e.code == "URL_BLOCKED" and not allowed:
        parts = urlsplit(source)
        if parts.scheme == "http" and is_loopback(parts.hostname or ""):
            text += " (for a server on this machine pass --allow-loopback-http)"
    return text


def analyze_video(
    source: SourceArg,
    prompt: Annotated[
        str, typer.Option("--prompt", "-p", help="The question to ask")
    ] = "Describe this video in detail.",
    model: ModelOpt = None,
    as_json: JsonOpt = False,
    frames: Annotated[
        int | None, typer.Option("--frames", min=1, help="Most keyframes to send")
    ] = None,
    session: SessionOpt = None,
    config: ConfigOpt = None,
    allow_loopback_http: LoopbackOpt = False,
) -> None:
    """Ask a vision model about a video, shown as timestamped keyframes."""
    from visus import limits
    from visus.analyze import video_analyze
    from visus.errors import AnalyzeError

    cfg = _config(config)
    file_path, file_url, reach = _where(source)
    try:
        result = asyncio.run(
            video_analyze(
                file_url,
                prompt,
                model,
                file_path=file_path,
                reach=reach,
                config=cfg,
                max_frames=frames or limits.ANALYZE_VIDEO_MAX_FRAMES,
                session=session,
                allow_loopback_http=allow_loopback_http,
            )
        )
    except AnalyzeError as e:
        _analyze_failed(e, source, allow_loopback_http)
    _print(result, as_json)


def register(app: typer.Typer) -> None:
    from visus.cli._help import SEE

    app.command("analyze", rich_help_panel=SEE)(analyze)
    app.command("analyze-video", rich_help_panel=SEE)(analyze_video)
