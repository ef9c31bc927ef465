"""``visus run --mcp NAME=COMMAND ARGS...``: a mounted server's image reaches the model."""

from __future__ import annotations

import json
import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from visus.cli import app

PEER = str(Path(__file__).parents[1] / "agent" / "mcp_peer.py")
_JSON = re.compile(r"```json\n(.*?)\n```", re.DOTALL)


@pytest.fixture(scope="module")
def reference_url() -> Iterator[str]:
    from visus.reference.server import serve_in_background

    with serve_in_background() as url:
        yield url


def test_run_with_mcp_flag(
    reference_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "VISUS_DATA"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "visus.toml").write_text("")
    monkeypatch.setenv("VISUS_CONFIG", str(tmp_path / "visus.toml"))
    monkeypatch.setenv("VISUS_REFERENCE_URL", reference_url)
    monkeypatch.chdir(tmp_path)
    flag = f"peer={shlex.join([sys.executable, PEER])}"
    data = str(tmp_path / "data")

    result = CliRunner().invoke(
        app, ["run", "--data", data, "--json", "--mcp", flag, "call peer__picture {}"]
    )
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    answer = json.loads(result.stdout)["answer"]
    images = json.loads(_JSON.findall(answer)[0])["images"]
    assert [(i["width"], i["height"]) for i in images] == [(64, 32)]
    assert "peer: started" not in result.stderr  # the server's stderr went to a log
    assert "peer: started" in (tmp_path / "data" / "logs" / "mcp-peer.log").read_text()

    bad = CliRunner().invoke(app, ["run", "--data", data, "--mcp", "no name", "hi"])
    assert bad.exit_code == 2
    assert "--mcp" in bad.stderr
