"""A tool with an empty description: Bedrock omits the key (botocore requires at least
one character when it is present); ``visus lower`` fills none in either."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from typer.testing import CliRunner

from visus.cli import app
from visus.paths import sessions_dir
from visus.record.messages import TextPart, ToolSpec, UserMessage
from visus.record.sessions import SessionStore
from visus.wire import lower

from .corpus import VARIANTS, store, system_and_tools
from .sdk_check import check_bedrock

BARE = ToolSpec(name="ping", description="", parameters={"type": "object", "properties": {}})


def test_bedrock_leaves_an_empty_description_out_and_botocore_accepts_it() -> None:
    request = replace(system_and_tools(), tools=(*system_and_tools().tools, BARE))
    checked = 0
    for v in VARIANTS:
        if v.wire != "bedrock":
            continue
        body = lower(request, wire=v.wire, model=v.spec, blobs=store())
        specs = {t["toolSpec"]["name"]: t["toolSpec"] for t in body["toolConfig"]["tools"]}
        assert "description" not in specs["ping"]
        assert specs["view"]["description"]  # a real description still goes
        check_bedrock(body, model_id=v.spec.name)
        checked += 1
    assert checked


def test_visus_lower_fills_no_empty_description(tmp_path: Path) -> None:
    sessions = SessionStore(sessions_dir(tmp_path))
    tools = [{"name": "ping", "parameters": {"type": "object", "properties": {}}}]
    sid = sessions.create(
        "s", meta={"model": "bedrock:us.anthropic.claude-sonnet-4-5-20250929-v1:0", "tools": tools}
    )
    sessions.append(sid, UserMessage((TextPart("hi"),), turn=1))
    result = CliRunner().invoke(app, ["lower", sid, "--data", str(tmp_path)])
    assert result.exit_code == 0, result.stderr
    body = json.loads(result.stdout)
    (tool,) = body["toolConfig"]["tools"]
    assert tool["toolSpec"] == {
        "name": "ping",
        "inputSchema": {"json": {"type": "object", "properties": {}}},
    }
    check_bedrock(body, model_id="us.anthropic.claude-sonnet-4-5-20250929-v1:0")
