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
import sys
from pathlib import Path
from typing import Annotated

import typer

from visus.cli import _help

__all__ = ["app", "main"]

_help.install()
app = typer.Typer(
    name="visus",
    help="Give LLM agents eyes: view files as images, run agents, serve them.",
    epilog=_help.EPILOG,
    invoke_without_command=True,  # `visus` alone prints this help and exits 0
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
)


def _print_version(value: bool) -> None:
    if value:
        from visus import __version__

        typer.echo(f"visus {__version__}")
        raise typer.Exit()


@app.callback()
def _global(
    ctx: typer.Context,
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
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())
        raise typer.Exit(0)


def _register_all() -> None:
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        module.register(app)
    _help.order(app)


_register_all()


def usage_error(e: Exception) -> str:
    """A wrong command line in the CLI's one error style: one line naming the command
    and where its help is (click draws a box under a usage line instead).

    Example:
        >>> from typer.core import TyperCommand
        >>> from typer._click import Context
        >>> from typer._click.exceptions import UsageError
        >>> ctx = Context(TyperCommand("run"), info_name="visus run")
        >>> usage_error(UsageError("No such option: --bogus", ctx=ctx))
        'visus: run: no such option: --bogus (visus run --help)'
    """
    from typer._click.exceptions import ClickException

    message = e.format_message() if isinstance(e, ClickException) else str(e)
    message = message.rstrip(".") if message.count(".") == 1 else message
    message = message[:1].lower() + message[1:]
    ctx = getattr(e, "ctx", None)
    where = ctx.command_path if ctx is not None else "visus"
    command = where.split(" ", 1)[1] + ": " if " " in where else ""
    return f"visus: {command}{message} ({where} --help)"


def _traces() -> None:
    """Traces on when the operator's ``OTEL_*`` variables ask (visus.telemetry.traces);
    without any, nothing is imported (``visus --help`` stays fast)."""
    if not any(name.startswith("OTEL_") for name in os.environ):
        return
    from visus.telemetry.traces import configure

    try:
        configure()
    except ImportError as e:
        typer.echo(f"visus: {e}", err=True)
        raise SystemExit(2) from e


def main() -> None:
    """Console-script entry point: the exit codes of ``visus --help``'s table."""
    from typer._click.exceptions import ClickException, NoArgsIsHelpError

    _traces()
    try:
        # Not standalone: a wrong command line comes here to be said in one line.
        code = app(standalone_mode=False)
    except NoArgsIsHelpError:
        code = 0  # a group named alone (`visus session`): its help is out, as `visus` alone
    except ClickException as e:
        typer.echo(usage_error(e), err=True)
        code = e.exit_code
    except typer.Abort:
        typer.echo("visus: aborted", err=True)
        code = 1
    except SystemExit as e:
        if type(sys.stdout).__name__ == "PacifyFlushWrapper":
            # Click (typer's vendored copy) met a closed stdout (`visus ... | head`),
            # swapped sys.stdout for this wrapper and exits 1; the reader leaving early
            # is not a failure.
            raise SystemExit(0) from None
        code = e.code
    if code == 130:
        # Stopped with Ctrl-C: the line saying so is out and the session recorded.
        # Leave now; interpreter shutdown would tear down daemon threads (the
        # embedded reference server mid-request, the OCR engine) with tracebacks.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)
    # Not standalone, typer hands back what a command returned (None) or an Exit's code.
    raise SystemExit(code if isinstance(code, int | str) else 0)
