"""How every command's ``--help`` reads, and the one exit-code table of the CLI.

Help text is Markdown (typer's ``markdown`` mode): paragraphs reflow at the terminal's
width instead of breaking where the docstring's lines did, and ``[[mcp.servers]]`` is
text, not Rich markup. Typer 0.29 prints each parameter's Python type in angle brackets
(``<str>``, ``<bool>``, ``<path>``); here an option that takes a value shows its
metavar (``--data DIR``; by default its name in capitals), a flag shows nothing, and an
argument shows its name once. Markdown would take ``<token>`` for an HTML tag and drop
it, and a table cell cuts a word longer than its column to "…"
(``anthropic:claude-sonnet-4-6`` at 80 columns): here ``<`` outside code is escaped and
long words fold onto the next line.

Not a command module (the leading underscore keeps discovery away from it).

Example:
    >>> [code for code, _ in EXIT_CODES]
    [0, 1, 2, 3, 4, 130]
"""

from __future__ import annotations

import functools
import inspect
import re
from typing import TYPE_CHECKING, Any

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption
from typer.models import CommandInfo, TyperInfo

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderResult
    from rich.markdown import Markdown
    from rich.text import Text

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
    (4, "the step budget ran out: a turn used every model call `--max-steps` allows without "
     "answering (`visus run`)"),
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
    for cls in (TyperCommand, TyperGroup):
        if not hasattr(cls.format_help, "__visus__"):
            cls.format_help = _with_visus_text(cls.format_help)  # type: ignore[method-assign]


#: A code span (kept as it is) or a ``<`` that starts a tag-like word (escaped).
_CODE_OR_TAG = re.compile(r"(`+)(?:.+?)\1|<(?=[A-Za-z/])", re.DOTALL)


def escape_tags(text: str) -> str:
    r"""``text`` with every ``<`` that Markdown would read as an HTML tag escaped,
    outside code spans.

    Example:
        >>> print(escape_tags("send Authorization: Bearer <token>; `<what>` stays"))
        send Authorization: Bearer \<token>; `<what>` stays
    """
    return _CODE_OR_TAG.sub(lambda m: m.group(0) if m.group(1) else "\\<", text)


@functools.cache
def _folding() -> type[Markdown]:
    from rich.markdown import Markdown

    class Folding(Markdown):
        """Markdown whose words longer than their table column fold instead of ending
        in "…" (the column's default overflow)."""

        def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
            return super().__rich_console__(console, options.update(overflow="fold"))

    return Folding


def _help_text(*, text: str, style: str = "", markup_mode: str) -> Markdown | Text:
    """typer's ``rich_utils._make_rich_text`` with tags escaped and long words folded."""
    from rich.emoji import Emoji
    from typer import rich_utils

    if markup_mode != rich_utils.MARKUP_MODE_MARKDOWN:
        made: Markdown | Text = _typer_text()(text=text, style=style, markup_mode=markup_mode)
        return made
    return _folding()(Emoji.replace(escape_tags(inspect.cleandoc(text))), style=style)


@functools.cache
def _typer_text() -> Any:
    """typer's own text maker, swapped for :func:`_help_text` the first time help is
    printed (so that rich loads only then, not with every command)."""
    from typer import rich_utils

    own = rich_utils._make_rich_text
    rich_utils._make_rich_text = _help_text
    return own


def _with_visus_text(format_help: Any) -> Any:
    @functools.wraps(format_help)
    def format_help_with_visus_text(self: Any, ctx: Any, formatter: Any) -> Any:
        _typer_text()
        return format_help(self, ctx, formatter)

    format_help_with_visus_text.__visus__ = True  # type: ignore[attr-defined]
    return format_help_with_visus_text
