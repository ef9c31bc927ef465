"""visus's MCP listings, valid against the registry's published schema (vendored in
tests/mcp_schemas, never fetched): the repository's ``server.json`` (``visus mcp`` over
stdio and ``/mcp`` over streamable HTTP) and the server card ``visus serve`` publishes at
``/.well-known/mcp/server-card.json`` (SEP-2127), without a token."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import jsonschema
import pytest

from tests.tether.doubles import live_server
from visus.app import create_main_app
from visus.config import load_config
from visus.mcp_server.listing import CARD_PATH, server_json

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((ROOT / "tests" / "mcp_schemas" / "server.schema.json").read_text())


def _validate(document: dict[str, object]) -> None:
    validator = jsonschema.Draft7Validator(SCHEMA, format_checker=jsonschema.FormatChecker())
    errors = sorted(validator.iter_errors(document), key=str)
    assert not errors, [e.message for e in errors]


def test_the_repositorys_server_json_is_current_and_valid() -> None:
    committed = json.loads((ROOT / "server.json").read_text())
    assert committed == server_json()  # regenerate: python -c 'from visus.mcp_server...'
    _validate(committed)
    assert committed["$schema"] == SCHEMA["$id"]
    (package,) = committed["packages"]
    assert package["transport"] == {"type": "stdio"}
    assert package["packageArguments"] == [{"type": "positional", "value": "mcp"}]
    (remote,) = committed["remotes"]
    assert remote["type"] == "streamable-http"
    assert remote["url"].endswith("/mcp")


def test_a_broken_listing_fails_the_schema() -> None:
    broken = {**server_json(), "name": "no slash"}
    with pytest.raises(AssertionError):
        _validate(broken)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    app = create_main_app(
        data=tmp_path, token="card-test-token", config=load_config(env={}), web=False
    )
    with live_server(app) as url:
        yield url


def test_serve_publishes_a_valid_server_card_without_the_token(served: str) -> None:
    answer = httpx.get(f"{served}{CARD_PATH}", timeout=30)
    assert answer.status_code == 200
    card = answer.json()
    _validate(card)
    (remote,) = card["remotes"]
    assert remote["url"] == f"{served}/mcp"
    assert remote["authentication"] == {"required": True, "schemes": ["bearer"]}
    # SEP-2127's own fields: capabilities, and the tools /mcp lists.
    assert card["capabilities"]["tools"] == {"listChanged": False}
    names = {t["name"] for t in card["tools"]}
    assert {"view", "vision_analyze", "tether_send", "tether_read"} <= names
    for tool in card["tools"]:
        jsonschema.Draft202012Validator.check_schema(tool["inputSchema"])
    assert "card-test-token" not in answer.text
    assert httpx.get(f"{served}/v1/instances").status_code == 401  # the rest needs it
