"""How every command's ``--help`` reads, and the one exit-code table of the CLI.

Help text is Markdown (typer's ``markdown`` mode): paragraphs reflow at the terminal's
width instead of breaking where the docstring's lines did, and ``[[mcp.servers]]`` is
text, not Rich markup. Typer 0.29 prints each parameter's Python type in angle brackets
(``<str>``, ``<bool>``, ``<path>``); here an option that takes a value shows its
metavar (``--data DIR``; by default its name in capitals), a flag shows nothing, and an
argument shows its name once.

Not a command module (the leading underscore keeps discovery away from it).

Example:
    >>> [code for code, _ in EXIT_CODES]
    [0, 1, 2, 3, 130]
"""

from __future__ import annotations

import typer
from typer.core import TyperArgument, TyperOption
from typer.models import CommandInfo, TyperInfo

__all__ = ["AGENT", "DATA", "EPILOG", "EXIT_CODES", "PANELS", "SEE", "SERVE", "install", "order"]

#: The panels ``visus --help`` groups its commands in.
SEE = "See files as a model does"
AGENT = "Run an agent"
SERVE = "Serve"
DATA = "Sessions, data and configuration"

#: Every command's exit codes; the errors all print one line ``visus: <what>`` on stderr.
EXIT_CODES: tuple[tuple[int, str], ...] = (
    (0, "done (also when the reader of stdout went away, as with `| head`)"),
    (1, "the work failed: the model or a server answered an error, a check found damage, "
     "an output could not be written"),
    (2, "the command line or configuration is wrong: an unknown option, command, provider, "
     "model or session, a bad value, a busy port, a broken visus.toml"),
    (3, "an input was refused: a file or URL not found, outside the roots, too large, "
     "not an image, undecodable, blocked"),
    (130, "stopped with Ctrl-C (the session keeps what was done)"),
)  # fmt: skip

#: The main ``--help``'s epilog (Markdown).
EPILOG = "Errors are one line on stderr: `visus: <what went wrong>`. Exit codes:\n\n" + "\n".join(
    f"- **{code}** {text}" for code, text in EXIT_CODES
)

#: Panels in the order ``visus --help`` shows them.
PANELS = (SEE, AGENT, SERVE, DATA)


def order(app: typer.Typer) -> None:
    """Commands and groups sorted by panel (registration goes by module name)."""

    def key(info: CommandInfo | TyperInfo) -> int:
        panel = info.rich_help_panel
        return PANELS.index(panel) if isinstance(panel, str) and panel in PANELS else len(PANELS)

    app.registered_commands.sort(key=key)
    app.registered_groups.sort(key=key)


def _option_type(self: TyperOption, ctx: typer.Context) -> str | None:
    del ctx
    if self.is_flag:
        return None
    if self.metavar is not None:
        return self.metavar
    return (self.name or "value").upper()


def _argument_type(self: TyperArgument, ctx: typer.Context) -> str | None:
    del self, ctx  # the argument's column already names it
    return None


def install() -> None:
    """Replace typer's ``<type>`` placeholders in help (see the module docstring)."""
    TyperOption.display_type_rich = _option_type  # type: ignore[method-assign,assignment]
    TyperArgument.display_type_rich = _argument_type  # type: ignore[method-assign,assignment]
