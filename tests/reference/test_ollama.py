"""Ollama /api/chat through the ollama client and raw HTTP."""

from __future__ import annotations

import json

import httpx
import ollama
import pytest

from .conftest import Grid, assert_grid_seen

TOOLS = [
    {
        "type": "function",
        "function": {"name": "view", "description": "look", "parameters": {"type": "object"}},
    }
]


def test_client_sees_a_grid_streaming_and_not(base_url: str, grid2: Grid, grid3: Grid) -> None:
    client = ollama.Client(host=base_url)
    r = client.chat(
        model="llama3.2-vision",
        messages=[{"role": "user", "content": "read", "images": [grid3.png]}],
        stream=False,
    )
    assert_grid_seen(r.message.content or "", grid3)
    assert r.done
    assert r.prompt_eval_count is not None
    assert r.prompt_eval_count > 0
    parts = list(
        client.chat(
            model="llama3.2-vision",
            messages=[{"role": "user", "content": "", "images": [grid2.b64]}],
            stream=True,
        )
    )
    assert len(parts) > 2
    assert parts[-1].done
    assert not parts[0].done
    assert_grid_seen("".join(p.message.content or "" for p in parts), grid2)


def test_tool_calls_then_hoisted_images(base_url: str, grid2: Grid) -> None:
    client = ollama.Client(host=base_url)
    ask = {"role": "user", "content": 'call view {"path": "g.png"}'}
    first = client.chat(model="llava", messages=[ask], tools=TOOLS, stream=False)
    calls = first.message.tool_calls or []
    assert [(c.function.name, dict(c.function.arguments)) for c in calls] == [
        ("view", {"path": "g.png"})
    ]
    second = client.chat(
        model="llava",
        tools=TOOLS,
        stream=False,
        messages=[
            ask,
            first.message,
            {"role": "tool", "content": "g.png follows", "tool_name": "view"},
            {"role": "user", "content": "g.png:", "images": [grid2.png]},
        ],
    )
    assert not second.message.tool_calls
    assert_grid_seen(second.message.content or "", grid2)


def test_errors(base_url: str, small_url: str, grid2: Grid) -> None:
    client = ollama.Client(host=base_url)
    with pytest.raises(ollama.ResponseError) as info:
        client.chat(
            model="llava",
            messages=[
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": "y", "images": [grid2.png]},
            ],
        )
    assert info.value.status_code == 400
    bad = httpx.post(
        f"{base_url}/api/chat",
        json={
            "model": "llava",
            "stream": False,
            "messages": [{"role": "user", "content": "x", "images": ["@@not base64"]}],
        },
    )
    assert bad.status_code == 400
    assert "illegal base64" in bad.json()["error"]
    with pytest.raises(ollama.ResponseError, match="exceeds the context length"):
        ollama.Client(host=small_url).chat(
            model="llava", messages=[{"role": "user", "content": "see " + grid2.b64}]
        )
    missing = httpx.post(f"{base_url}/api/chat", json={"messages": []})
    assert missing.status_code == 400
    assert json.loads(missing.text) == {"error": "model is required"}


def test_streamed_tool_calls(base_url: str) -> None:
    parts = list(
        ollama.Client(host=base_url).chat(
            model="llava",
            messages=[
                {"role": "user", "content": 'call view {"path": "a"}\ncall view {"path": "b"}'}
            ],
            tools=TOOLS,
            stream=True,
        )
    )
    calls = [c for p in parts for c in p.message.tool_calls or []]
    assert [dict(c.function.arguments) for c in calls] == [{"path": "a"}, {"path": "b"}]
    assert parts[-1].done
    assert parts[-1].eval_count is not None
