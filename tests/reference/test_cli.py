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


def test_serve_on_a_port_in_use_exits_2_before_printing_a_banner() -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = CliRunner().invoke(app, ["reference", "serve", "--port", str(port)])
    assert result.exit_code == 2
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "in use" in result.stderr
    assert "reference server on" not in result.stdout


def test_serve_banner_names_every_endpoint_and_the_key_each_wants(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import uvicorn

    ran: list[tuple[str, int]] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, host, port, **kw: ran.append((host, port)))
    result = CliRunner().invoke(app, ["reference", "serve", "--port", "0"])
    assert result.exit_code == 0, result.output
    assert ran == [("127.0.0.1", 0)]
    for line in (
        "/v1/chat/completions",
        "/v1/responses",
        "/v1/messages",
        "generateContent",
        "/api/chat",
        "/converse",
        "Authorization: Bearer <any>",
        "x-api-key: <any>",
        "x-goog-api-key: <any>",
    ):
        assert line in result.stdout
