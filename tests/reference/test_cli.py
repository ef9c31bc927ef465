"""``visus reference serve`` refuses non-loopback hosts unless told otherwise."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from visus.cli import app
from visus.cli.reference import is_loopback


@pytest.mark.parametrize(
    ("host", "loop"),
    [
        ("127.0.0.1", True),
        ("localhost", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("192.168.1.5", False),
        ("example.com", False),
    ],
)
def test_is_loopback(host: str, loop: bool) -> None:
    assert is_loopback(host) is loop


def test_serve_refuses_a_public_host() -> None:
    result = CliRunner().invoke(app, ["reference", "serve", "--host", "0.0.0.0"])
    assert result.exit_code == 2
    assert "--allow-remote" in result.output


def test_serve_help_lists_its_options() -> None:
    result = CliRunner().invoke(app, ["reference", "serve", "--help"])
    assert result.exit_code == 0
    for option in ("--host", "--port", "--context-tokens", "--allow-remote"):
        assert option in result.output
