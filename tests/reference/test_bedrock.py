"""Bedrock Converse through boto3 (SigV4, REST-JSON, blobs in base64) and raw HTTP."""

from __future__ import annotations

import io
import random
from typing import Any

import boto3
import httpx
import pytest
from botocore.exceptions import ClientError
from PIL import Image

from .conftest import Grid, assert_grid_seen

MODEL = "anthropic.claude-sonnet-4-6-v1:0"
TOOLS: dict[str, Any] = {
    "tools": [
        {
            "toolSpec": {
                "name": "view",
                "description": "look",
                "inputSchema": {"json": {"type": "object"}},
            }
        }
    ]
}


def _client(url: str) -> Any:
    return boto3.client(
        "bedrock-runtime",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="secret",
    )


def _image(data: bytes, fmt: str = "png") -> dict[str, Any]:
    return {"image": {"format": fmt, "source": {"bytes": data}}}


def test_boto3_sees_a_grid(base_url: str, grid3: Grid) -> None:
    r = _client(base_url).converse(
        modelId=MODEL,
        messages=[{"role": "user", "content": [_image(grid3.png), {"text": "read"}]}],
    )
    assert r["stopReason"] == "end_turn"
    assert_grid_seen(r["output"]["message"]["content"][0]["text"], grid3)
    assert r["usage"]["inputTokens"] == 33 * 14 + 1


def test_tool_use_and_image_in_tool_result(base_url: str, grid2: Grid) -> None:
    client = _client(base_url)
    ask = {"role": "user", "content": [{"text": 'call view {"path": "g.png"}'}]}
    first = client.converse(modelId=MODEL, messages=[ask], toolConfig=TOOLS)
    assert first["stopReason"] == "tool_use"
    use = first["output"]["message"]["content"][0]["toolUse"]
    assert (use["name"], use["input"]) == ("view", {"path": "g.png"})
    result = {
        "toolResult": {
            "toolUseId": use["toolUseId"],
            "content": [{"text": "g.png"}, _image(grid2.png)],
        }
    }
    second = client.converse(
        modelId=MODEL,
        toolConfig=TOOLS,
        messages=[ask, first["output"]["message"], {"role": "user", "content": [result]}],
    )
    assert second["stopReason"] == "end_turn"
    assert_grid_seen(second["output"]["message"]["content"][0]["text"], grid2)


def _code(info: pytest.ExceptionInfo[ClientError]) -> str:
    return str(info.value.response["Error"]["Code"])


def test_validation_errors(base_url: str, small_url: str, grid2: Grid) -> None:
    client = _client(base_url)
    user = {"role": "user", "content": [{"text": "hi"}]}
    with pytest.raises(ClientError, match="must alternate between user and assistant") as info:
        client.converse(modelId=MODEL, messages=[user, user])
    assert _code(info) == "ValidationException"
    with pytest.raises(ClientError, match="must start with a user message"):
        client.converse(modelId=MODEL, messages=[{"role": "assistant", "content": [{"text": "x"}]}])
    with pytest.raises(ClientError, match="does not match the declared format"):
        client.converse(
            modelId=MODEL, messages=[{"role": "user", "content": [_image(grid2.png, "jpeg")]}]
        )
    with pytest.raises(ClientError, match="Too many images"):
        client.converse(
            modelId=MODEL, messages=[{"role": "user", "content": [_image(grid2.png)] * 21}]
        )
    noise = Image.frombytes("RGB", (1200, 1200), random.Random(0).randbytes(1200 * 1200 * 3))
    buf = io.BytesIO()
    noise.save(buf, format="PNG")
    assert len(buf.getvalue()) > 3_932_160  # random pixels do not compress
    with pytest.raises(ClientError, match=r"3\.75 MB"):
        client.converse(
            modelId=MODEL, messages=[{"role": "user", "content": [_image(buf.getvalue())]}]
        )
    with pytest.raises(ClientError, match="Input is too long") as info:
        _client(small_url).converse(
            modelId=MODEL, messages=[{"role": "user", "content": [{"text": grid2.b64}]}]
        )
    assert _code(info) == "ValidationException"
    unsigned = httpx.post(f"{base_url}/model/{MODEL}/converse", json={"messages": [user]})
    assert unsigned.status_code == 403


def test_converse_stream_events_parse_in_boto3(base_url: str, grid2: Grid) -> None:
    client = _client(base_url)
    r = client.converse_stream(
        modelId=MODEL, messages=[{"role": "user", "content": [_image(grid2.png)]}]
    )
    events = list(r["stream"])
    text = "".join(
        e["contentBlockDelta"]["delta"].get("text", "") for e in events if "contentBlockDelta" in e
    )
    assert_grid_seen(text, grid2)
    assert events[0] == {"messageStart": {"role": "assistant"}}
    assert events[-2] == {"messageStop": {"stopReason": "end_turn"}}
    assert events[-1]["metadata"]["usage"]["inputTokens"] > 0
    calls = list(
        client.converse_stream(
            modelId=MODEL,
            toolConfig=TOOLS,
            messages=[{"role": "user", "content": [{"text": 'call view {"path": "a"}'}]}],
        )["stream"]
    )
    start = next(e["contentBlockStart"] for e in calls if "contentBlockStart" in e)
    assert start["start"]["toolUse"]["name"] == "view"
    deltas = [
        e["contentBlockDelta"]["delta"]["toolUse"]["input"]
        for e in calls
        if "contentBlockDelta" in e
    ]
    assert deltas == ['{"path": "a"}']
