"""OpenAI wires through the official SDK and raw HTTP: perception, tools, strictness."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from .conftest import Grid, answer_json, assert_grid_seen

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "view",
            "description": "look at a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)


def _image_part(grid: Grid) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": grid.data_url}}


def test_chat_sdk_sees_a_3x3_grid(base_url: str, grid3: Grid) -> None:
    r = _client(base_url).chat.completions.create(
        model="gpt-4.1",
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "read it"}, _image_part(grid3)]}
        ],
    )
    text = r.choices[0].message.content or ""
    assert_grid_seen(text, grid3)
    assert r.choices[0].finish_reason == "stop"
    assert r.usage is not None
    # gpt-4.1 tiles: 900x390 -> one 512 px tile row of two tiles = 85 + 2*170.
    assert r.usage.prompt_tokens == 425 + 2
    assert r.usage.completion_tokens == -(-len(text) // 4)


def test_chat_streaming_with_usage(base_url: str, grid2: Grid) -> None:
    stream = _client(base_url).chat.completions.create(
        model="gpt-4.1",
        messages=[{"role": "user", "content": [_image_part(grid2)]}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 2
    assert_grid_seen(text, grid2)
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.prompt_tokens > 0


def test_chat_tool_round_trip_with_hoisted_image(base_url: str, grid2: Grid) -> None:
    client = _client(base_url)
    ask = 'call view {"path": "a.png"}\ncall view {"path": "b.png"}'
    first = client.chat.completions.create(
        model="gpt-4.1", messages=[{"role": "user", "content": ask}], tools=TOOLS
    )
    calls = first.choices[0].message.tool_calls or []
    assert first.choices[0].finish_reason == "tool_calls"
    assert [json.loads(c.function.arguments) for c in calls] == [  # type: ignore[union-attr]
        {"path": "a.png"},
        {"path": "b.png"},
    ]
    messages: list[Any] = [
        {"role": "user", "content": ask},
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": calls[0].id, "content": "image 1 below"},
        {"role": "tool", "tool_call_id": calls[1].id, "content": "no image"},
        {"role": "user", "content": [{"type": "text", "text": "from a.png"}, _image_part(grid2)]},
    ]
    second = client.chat.completions.create(model="gpt-4.1", messages=messages, tools=TOOLS)
    assert not second.choices[0].message.tool_calls
    assert_grid_seen(second.choices[0].message.content or "", grid2)


def test_image_in_a_tool_message_gets_openais_400(base_url: str, grid2: Grid) -> None:
    messages: list[Any] = [
        {"role": "user", "content": "look"},
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "view", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": [_image_part(grid2)]},
    ]
    with pytest.raises(openai.BadRequestError) as info:
        _client(base_url).chat.completions.create(model="gpt-4.1", messages=messages)
    assert info.value.status_code == 400
    err = info.value.body
    assert isinstance(err, dict)
    assert err["message"] == (
        "Image URLs are only allowed for messages with role 'user', but this message with "
        "role 'tool' contains an image URL."
    )
    assert err["type"] == "invalid_request_error"
    assert set(err) == {"message", "type", "param", "code"}


@pytest.mark.parametrize(
    ("messages", "needle"),
    [
        (
            [
                {"role": "user", "content": "x"},
                {"role": "tool", "tool_call_id": "c1", "content": "r"},
            ],
            "must be a response to a preceeding message with 'tool_calls'",
        ),
        (
            [
                {"role": "user", "content": "x"},
                {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "v", "arguments": "{}"},
                        }
                    ],
                },
                {"role": "user", "content": "y"},
                {"role": "tool", "tool_call_id": "c1", "content": "r"},
            ],
            "did not have response messages: c1",
        ),
        (
            [
                {"role": "user", "content": "x"},
                {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "v", "arguments": "{}"},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "c9", "content": "r"},
            ],
            "'tool_call_id' of 'c9' not found",
        ),
    ],
)
def test_tool_messages_must_follow_their_calls(
    base_url: str, messages: list[Any], needle: str
) -> None:
    r = httpx.post(
        f"{base_url}/v1/chat/completions",
        headers={"Authorization": "Bearer k"},
        json={"model": "gpt-4.1", "messages": messages},
    )
    assert r.status_code == 400
    assert needle in r.json()["error"]["message"]


def test_bad_images_and_missing_key_are_refused(base_url: str) -> None:
    def post(url: str, headers: dict[str, str] | None = None) -> httpx.Response:
        part = {"type": "image_url", "image_url": {"url": url}}
        return httpx.post(
            f"{base_url}/v1/chat/completions",
            headers={"Authorization": "Bearer k"} if headers is None else headers,
            json={"model": "gpt-4.1", "messages": [{"role": "user", "content": [part]}]},
        )

    not_image = post("data:image/png;base64,aGVsbG8gd29ybGQ=")
    assert not_image.status_code == 400
    assert not_image.json()["error"]["code"] == "invalid_image_format"
    assert post("data:image/png;base64,@@@").json()["error"]["code"] == "invalid_image_url"
    assert post("https://example.com/a.png").status_code == 400
    no_key = post("data:image/png;base64,aGVsbG8=", headers={})
    assert no_key.status_code == 401
    assert "API key" in no_key.json()["error"]["message"]


def test_stringified_image_is_not_seen_and_a_big_one_overflows(base_url: str, grid2: Grid) -> None:
    client = _client(base_url)
    text = f"Here is the picture: data:image/png;base64,{grid2.b64}"
    r = client.chat.completions.create(
        model="gpt-4.1", messages=[{"role": "user", "content": text}]
    )
    data = answer_json(r.choices[0].message.content or "")
    assert data["images"] == []
    huge = text * (4 * 128_000 // len(text) + 1)
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model="gpt-4.1", messages=[{"role": "user", "content": huge}]
        )
    body = info.value.body
    assert isinstance(body, dict)
    assert body["code"] == "context_length_exceeded"
    assert "maximum context length is 128000 tokens" in body["message"]


def test_responses_sees_images_in_user_and_function_output(
    base_url: str, grid2: Grid, grid3: Grid
) -> None:
    client = _client(base_url)
    tools: list[Any] = [{"type": "function", "name": "view", "parameters": {"type": "object"}}]
    first = client.responses.create(
        model="gpt-4.1", input='call view {"path": "g.png"}', tools=tools
    )
    call = next(o for o in first.output if o.type == "function_call")
    assert (call.name, json.loads(call.arguments)) == ("view", {"path": "g.png"})
    second = client.responses.create(
        model="gpt-4.1",
        tools=tools,
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": 'call view {"path": "g.png"}'},
                    {"type": "input_image", "image_url": grid2.data_url, "detail": "auto"},
                ],
            },
            {
                "type": "function_call",
                "call_id": call.call_id,
                "name": "view",
                "arguments": call.arguments,
            },
            {
                "type": "function_call_output",
                "call_id": call.call_id,
                "output": [
                    {"type": "input_text", "text": "g.png"},
                    {"type": "input_image", "image_url": grid3.data_url, "detail": "auto"},
                ],
            },
        ],
    )
    assert_grid_seen(second.output_text, grid2, image_index=1)
    assert_grid_seen(second.output_text, grid3, image_index=2)
    assert second.usage is not None
    assert second.usage.input_tokens > 0


def test_responses_streaming_and_unknown_call_output(base_url: str, grid2: Grid) -> None:
    client = _client(base_url)
    events = list(
        client.responses.create(
            model="gpt-4.1",
            input=[
                {
                    "role": "user",
                    "content": [
                        {"type": "input_image", "image_url": grid2.data_url, "detail": "auto"}
                    ],
                }
            ],
            stream=True,
        )
    )
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert_grid_seen(text, grid2)
    assert events[-1].type == "response.completed"
    with pytest.raises(openai.BadRequestError, match="No tool call found"):
        client.responses.create(
            model="gpt-4.1",
            input=[{"type": "function_call_output", "call_id": "nope", "output": "x"}],
        )


def test_streamed_tool_calls_reassemble(base_url: str) -> None:
    client = _client(base_url)
    ask = 'call view {"path": "a.png"}\ncall view {"path": "b.png"}'
    chunks = list(
        client.chat.completions.create(
            model="gpt-4.1",
            messages=[{"role": "user", "content": ask}],
            tools=TOOLS,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    calls: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        for delta in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            slot = calls.setdefault(delta.index, {"id": "", "name": "", "args": ""})
            slot["id"] += delta.id or ""
            if delta.function is not None:
                slot["name"] += delta.function.name or ""
                slot["args"] += delta.function.arguments or ""
    assert [(c["name"], json.loads(c["args"])) for c in calls.values()] == [
        ("view", {"path": "a.png"}),
        ("view", {"path": "b.png"}),
    ]
    assert all(c["id"] for c in calls.values())
    finish = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finish[-1] == "tool_calls"

    tools: list[Any] = [{"type": "function", "name": "view", "parameters": {"type": "object"}}]
    events = list(client.responses.create(model="gpt-4.1", input=ask, tools=tools, stream=True))
    done = events[-1]
    assert done.type == "response.completed"
    assert [
        (o.name, json.loads(o.arguments)) for o in done.response.output if o.type == "function_call"
    ] == [("view", {"path": "a.png"}), ("view", {"path": "b.png"})]
