"""``visus --help`` stays fast: the command modules import the library only when run."""

from __future__ import annotations

import json
import subprocess
import sys

from visus.cli.lower import WIRE_NAMES
from visus.cli.view import view_command

HEAVY = (
    "PIL",
    "pydantic",
    "pydantic_settings",
    "httpx",
    "visus.agent",
    "visus.config",
    "visus.media",
    "visus.models",
    "visus.perception",
    "visus.record",
    "visus.wire",
)


def test_importing_the_cli_loads_no_library_layer() -> None:
    code = (
        "import json, sys, visus.cli\n"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(proc.stdout) == []


def test_spelled_out_names_match_the_library() -> None:
    import inspect

    from visus.perception import DEFAULT_MODEL
    from visus.wire import WIRES

    assert tuple(WIRES) == WIRE_NAMES
    assert inspect.signature(view_command).parameters["model"].default == DEFAULT_MODEL


def test_help_shows_readable_metavars_not_python_types() -> None:
    from typer.testing import CliRunner

    from visus.cli import app

    for command in (["view"], ["run"], ["chat"], ["serve"], ["mcp"], ["telegram"]):
        out = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "120"}).stdout
        assert "list[" not in out, (command, out)
    run_help = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "120"}).stdout
    assert "--root" in run_help
    assert " DIR " in run_help
    assert " FILE|URL " in run_help
