"""Server lifecycle and the rules every wire shares: context window, image counts, limits."""

from __future__ import annotations

import base64
import io
import socket
from typing import Any
from urllib.parse import urlparse

import httpx
import pytest
from PIL import Image

from visus.errors import ConfigError
from visus.reference.server import create_app, serve_in_background

from .conftest import Grid


def _tiny_png() -> str:
    buf = io.BytesIO()
    Image.new("RGB", (4, 4), "white").save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def test_serve_in_background_binds_loopback_and_stops_cleanly() -> None:
    with serve_in_background(context_tokens=5000) as url:
        parsed = urlparse(url)
        assert parsed.hostname == "127.0.0.1"
        assert parsed.port
        r = httpx.post(
            f"{url}/api/chat",
            json={"model": "m", "stream": False, "messages": [{"role": "user", "content": "hi"}]},
        )
        assert r.status_code == 200
        assert "no images" in r.json()["message"]["content"]
    with socket.socket() as s:
        s.settimeout(1)
        with pytest.raises(ConnectionRefusedError):
            s.connect(("127.0.0.1", parsed.port))


def test_create_app_rejects_a_non_positive_window() -> None:
    with pytest.raises(ConfigError):
        create_app(context_tokens=0)


def _requests(text: str) -> list[tuple[str, dict[str, str], dict[str, Any]]]:
    return [
        (
            "/v1/chat/completions",
            {"authorization": "Bearer k"},
            {"model": "gpt-4.1", "messages": [{"role": "user", "content": text}]},
        ),
        ("/v1/responses", {"authorization": "Bearer k"}, {"model": "gpt-4.1", "input": text}),
        (
            "/v1/messages",
            {"x-api-key": "k"},
            {
                "model": "claude-sonnet-4-6",
                "max_tokens": 5,
                "messages": [{"role": "user", "content": text}],
            },
        ),
        (
            "/v1beta/models/gemini-2.5-flash:generateContent",
            {"x-goog-api-key": "k"},
            {"contents": [{"role": "user", "parts": [{"text": text}]}]},
        ),
        (
            "/api/chat",
            {},
            {"model": "llava", "stream": False, "messages": [{"role": "user", "content": text}]},
        ),
        (
            "/model/m/converse",
            {"authorization": "AWS4-HMAC-SHA256 Credential=x"},
            {"messages": [{"role": "user", "content": [{"text": text}]}]},
        ),
    ]


CONTEXT_ERRORS = [
    lambda j: j["error"]["code"] == "context_length_exceeded",
    lambda j: j["error"]["code"] == "context_length_exceeded",
    lambda j: j["error"]["message"] == "prompt is too long: 2001 tokens > 2000 maximum",
    lambda j: j["error"]["status"] == "INVALID_ARGUMENT" and "(2001)" in j["error"]["message"],
    lambda j: "2001 tokens > 2000" in j["error"],
    lambda j: j["message"].startswith("Input is too long for requested model."),
]


@pytest.mark.parametrize("index", range(6))
def test_every_wire_has_its_context_error_at_the_same_bound(small_url: str, index: int) -> None:
    fits_path, headers, fits = _requests("x" * 4000)[index]  # 1000 tokens
    assert httpx.post(small_url + fits_path, headers=headers, json=fits).status_code == 200
    path, headers, body = _requests("x" * 8004)[index]  # 2001 tokens: one over the window
    r = httpx.post(small_url + path, headers=headers, json=body)
    assert r.status_code == 400
    assert CONTEXT_ERRORS[index](r.json()), r.text


def test_image_count_limits(base_url: str) -> None:
    tiny = _tiny_png()
    openai_parts = [{"type": "image_url", "image_url": {"url": f"data:image/png;base64,{tiny}"}}]
    r = httpx.post(
        f"{base_url}/v1/chat/completions",
        headers={"authorization": "Bearer k"},
        json={"model": "gpt-4.1", "messages": [{"role": "user", "content": openai_parts * 501}]},
    )
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "too_many_images"
    block = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": tiny}}
    r = httpx.post(
        f"{base_url}/v1/messages",
        headers={"x-api-key": "k"},
        json={
            "model": "m",
            "max_tokens": 5,
            "messages": [{"role": "user", "content": [block] * 101}],
        },
    )
    assert r.status_code == 400
    assert "101 > 100" in r.json()["error"]["message"]


def test_anthropic_base64_cap_and_openai_edges(base_url: str, grid2: Grid) -> None:
    big = "A" * (5 * 1024 * 1024 + 4)
    block = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": big}}
    r = httpx.post(
        f"{base_url}/v1/messages",
        headers={"x-api-key": "k"},
        json={"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [block]}]},
    )
    assert r.status_code == 400
    assert "image exceeds 5 MB maximum" in r.json()["error"]["message"]
    # An image in a system message is refused like one in a tool message.
    r = httpx.post(
        f"{base_url}/v1/chat/completions",
        headers={"authorization": "Bearer k"},
        json={
            "model": "gpt-4.1",
            "messages": [
                {
                    "role": "system",
                    "content": [{"type": "image_url", "image_url": {"url": grid2.data_url}}],
                },
                {"role": "user", "content": "hi"},
            ],
        },
    )
    assert r.status_code == 400
    assert "message with role 'system' contains an image URL" in r.json()["error"]["message"]


def test_bedrock_refuses_images_from_the_assistant(base_url: str, grid2: Grid) -> None:
    image = {"image": {"format": "png", "source": {"bytes": grid2.b64}}}
    r = httpx.post(
        f"{base_url}/model/m/converse",
        headers={"authorization": "AWS4-HMAC-SHA256 Credential=x"},
        json={
            "messages": [
                {"role": "user", "content": [{"text": "x"}]},
                {"role": "assistant", "content": [image]},
            ]
        },
    )
    assert r.status_code == 400
    assert r.headers["x-amzn-errortype"] == "ValidationException"


def test_a_busy_port_is_a_config_error() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ConfigError, match="cannot listen"), serve_in_background(port=port):
            pass
