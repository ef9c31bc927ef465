"""Anthropic Messages through the official SDK and raw HTTP."""

from __future__ import annotations

import base64
import io
from typing import Any

import anthropic
import httpx
import pytest
from PIL import Image

from .conftest import Grid, answer_json, assert_grid_seen

TOOLS: list[Any] = [
    {"name": "view", "description": "look", "input_schema": {"type": "object"}},
]


def _client(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="k", max_retries=0)


def _image(grid: Grid, media_type: str = "image/png") -> dict[str, Any]:
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": media_type, "data": grid.b64},
    }


def _post(url: str, body: dict[str, Any], key: bool = True) -> httpx.Response:
    headers = {"x-api-key": "k", "anthropic-version": "2023-06-01"} if key else {}
    return httpx.post(f"{url}/v1/messages", headers=headers, json=body, timeout=60)


def test_sdk_sees_a_3x3_grid(base_url: str, grid3: Grid) -> None:
    msg = _client(base_url).messages.create(
        model="claude-sonnet-4-6",
        max_tokens=1000,
        messages=[{"role": "user", "content": [_image(grid3), {"type": "text", "text": "?"}]}],
    )
    assert msg.stop_reason == "end_turn"
    text = "".join(b.text for b in msg.content if b.type == "text")
    assert_grid_seen(text, grid3)
    # Claude: 900x390 -> ceil(900/28) * ceil(390/28) = 33 * 14 patches, plus one text token.
    assert msg.usage.input_tokens == 33 * 14 + 1


def test_sdk_streaming(base_url: str, grid2: Grid) -> None:
    with _client(base_url).messages.stream(
        model="claude-sonnet-4-6",
        max_tokens=1000,
        messages=[{"role": "user", "content": [_image(grid2)]}],
    ) as stream:
        deltas = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(deltas) > 2
    assert_grid_seen("".join(deltas), grid2)
    assert final.usage.output_tokens > 0


def test_tool_use_then_image_in_tool_result(base_url: str, grid2: Grid) -> None:
    client = _client(base_url)
    ask = {"role": "user", "content": 'call view {"path": "g.png"}'}
    first = client.messages.create(
        model="claude-sonnet-4-6", max_tokens=100, messages=[ask], tools=TOOLS
    )
    assert first.stop_reason == "tool_use"
    use = next(b for b in first.content if b.type == "tool_use")
    assert (use.name, use.input) == ("view", {"path": "g.png"})
    # Streaming yields the same tool call, with its input rebuilt from JSON deltas.
    with client.messages.stream(
        model="claude-sonnet-4-6", max_tokens=100, messages=[ask], tools=TOOLS
    ) as stream:
        streamed = stream.get_final_message()
    assert [b.input for b in streamed.content if b.type == "tool_use"] == [{"path": "g.png"}]
    second = client.messages.create(
        model="claude-sonnet-4-6",
        max_tokens=100,
        tools=TOOLS,
        messages=[
            ask,
            {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": use.id,
                        "content": [{"type": "text", "text": "g.png"}, _image(grid2)],
                    }
                ],
            },
        ],
    )
    assert second.stop_reason == "end_turn"
    assert_grid_seen(second.content[0].text, grid2)  # type: ignore[union-attr]


def test_tool_pairing_is_enforced(base_url: str) -> None:
    use = {"type": "tool_use", "id": "toolu_1", "name": "view", "input": {}}
    orphan = _post(
        base_url,
        {
            "model": "m",
            "max_tokens": 10,
            "messages": [
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": [use]},
                {"role": "user", "content": "no result here"},
            ],
        },
    )
    assert orphan.status_code == 400
    assert orphan.json()["type"] == "error"
    assert "`tool_use` ids were found without `tool_result`" in orphan.json()["error"]["message"]
    unanswered = _post(
        base_url,
        {
            "model": "m",
            "max_tokens": 10,
            "messages": [
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": [use]},
            ],
        },
    )
    assert unanswered.status_code == 400
    stray = _post(
        base_url,
        {
            "model": "m",
            "max_tokens": 10,
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "r"}],
                }
            ],
        },
    )
    assert stray.status_code == 400
    assert "unexpected `tool_use_id`" in stray.json()["error"]["message"]


def test_image_rules(base_url: str, grid2: Grid) -> None:
    def body(*content: Any, role: str = "user") -> dict[str, Any]:
        messages: list[Any] = [{"role": "user", "content": "hi"}] if role == "assistant" else []
        return {
            "model": "m",
            "max_tokens": 10,
            "messages": [*messages, {"role": role, "content": list(content)}],
        }

    wrong_type = _post(base_url, body(_image(grid2, "image/jpeg")))
    assert wrong_type.status_code == 400
    assert "appears to be a image/png image" in wrong_type.json()["error"]["message"]
    in_assistant = _post(base_url, body(_image(grid2), role="assistant"))
    assert in_assistant.status_code == 400
    assert in_assistant.json()["error"]["type"] == "invalid_request_error"
    garbage = {
        "type": "image",
        "source": {
            "type": "base64",
            "media_type": "image/png",
            "data": base64.b64encode(b"nope").decode(),
        },
    }
    assert _post(base_url, body(garbage)).status_code == 400

    buf = io.BytesIO()
    Image.new("RGB", (2100, 10), "white").save(buf, format="PNG")
    wide = {
        "type": "image",
        "source": {
            "type": "base64",
            "media_type": "image/png",
            "data": base64.b64encode(buf.getvalue()).decode(),
        },
    }
    assert _post(base_url, body(wide, _image(grid2))).status_code == 200
    many = _post(base_url, body(wide, *[_image(grid2)] * 20))
    assert many.status_code == 400
    assert "many-image requests: 2000 pixels" in many.json()["error"]["message"]


def test_auth_and_context_errors(base_url: str, small_url: str, grid2: Grid) -> None:
    ok = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    no_key = _post(base_url, ok, key=False)
    assert no_key.status_code == 401
    assert no_key.json()["error"]["type"] == "authentication_error"
    stringified = {
        "model": "m",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "image: " + grid2.b64}],
    }
    with pytest.raises(anthropic.BadRequestError) as info:
        _client(small_url).messages.create(**stringified)
    err = info.value.body
    assert isinstance(err, dict)
    assert err["error"]["type"] == "invalid_request_error"
    assert err["error"]["message"].startswith("prompt is too long: ")
    assert err["error"]["message"].endswith(" tokens > 2000 maximum")
    # The same image as a real image part fits and is seen.
    real = _client(small_url).messages.create(
        model="m", max_tokens=10, messages=[{"role": "user", "content": [_image(grid2)]}]
    )
    assert len(answer_json(real.content[0].text)["images"]) == 1  # type: ignore[union-attr]
