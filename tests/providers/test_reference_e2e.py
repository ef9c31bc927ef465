"""End to end through the reference server on every wire, with the same clients users use.

The reference model perceives only real image parts (OCR), so a reply that puts every
word of a freshly drawn grid in its cell proves the pixels crossed the wire as an
image: in a user message, and inside (or hoisted after) a tool result.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from visus.errors import ContextLengthError, ImageRejectedError
from visus.models.spec import ModelSpec
from visus.providers import ProviderClient, ProviderSettings, resolve
from visus.record.blobs import MemoryBlobStore
from visus.record.messages import (
    AssistantMessage,
    AttachmentOrigin,
    ImagePart,
    ModelRequest,
    PerceptionOrigin,
    TextPart,
    ToolResult,
    ToolSpec,
    UserMessage,
)
from visus.reference.grid import make_grid, score_grid
from visus.reference.server import serve_in_background

from .stub import track

WIRES = ["openai-chat", "openai-responses", "anthropic", "gemini", "ollama", "bedrock"]
VIEW = ToolSpec(
    "view",
    "Look at an image file.",
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)


@pytest.fixture(scope="module")
def reference_url() -> Iterator[str]:
    with serve_in_background() as url:
        yield url


@pytest.fixture(scope="module")
def grid() -> tuple[bytes, list[tuple[str, int, int, str]]]:
    return make_grid(2, 2, seed=4242)


def _client(url: str, wire: str) -> tuple[ProviderClient, ModelSpec]:
    client, spec = resolve(
        f"reference:{wire}",
        config=ProviderSettings(reference_url=url, env={}, max_retries=0),
    )
    return track(client), spec


def _seen_words(text: str) -> list[dict[str, Any]]:
    match = re.search(r"```json\n(.*?)\n```", text, re.DOTALL)
    assert match, f"no JSON block in the reply: {text[:300]!r}"
    images = json.loads(match.group(1))["images"]
    return [w for image in images for w in image["words"]]


def _image_part(store: MemoryBlobStore, png: bytes, origin: Any) -> ImagePart:
    import io

    from PIL import Image

    w, h = Image.open(io.BytesIO(png)).size
    return ImagePart(store.put(png, "image/png"), "image/png", len(png), w, h, origin)


@pytest.mark.parametrize("wire", WIRES)
async def test_pasted_image_is_perceived(
    reference_url: str, grid: tuple[bytes, list[tuple[str, int, int, str]]], wire: str
) -> None:
    png, expected = grid
    store = MemoryBlobStore()
    request = ModelRequest(
        messages=(
            UserMessage(
                (
                    TextPart("What words are in this grid?"),
                    _image_part(store, png, AttachmentOrigin("grid.png")),
                )
            ),
        ),
        max_tokens=2000,
    )
    client, spec = _client(reference_url, wire)
    reply = await client.complete(request, model=spec, blobs=store)
    placed, _ = score_grid(expected, _seen_words(reply.text), 2, 2)
    assert placed == len(expected), reply.text
    assert reply.usage is not None
    assert reply.usage.input_tokens > 0
    assert reply.usage.output_tokens > 0
    assert reply.model == "reference"


@pytest.mark.parametrize("wire", WIRES)
async def test_tool_call_then_tool_result_image_is_perceived(
    reference_url: str, grid: tuple[bytes, list[tuple[str, int, int, str]]], wire: str
) -> None:
    png, expected = grid
    store = MemoryBlobStore()
    client, spec = _client(reference_url, wire)
    first = UserMessage((TextPart('call view {"path": "grid.png"}'),))
    step1 = await client.complete(
        ModelRequest(messages=(first,), tools=(VIEW,), max_tokens=500), model=spec, blobs=store
    )
    assert [(c.name, dict(c.arguments)) for c in step1.tool_calls] == [
        ("view", {"path": "grid.png"})
    ]
    call = step1.tool_calls[0]
    result = ToolResult(
        call.id,
        "view",
        (TextPart("grid.png"), _image_part(store, png, PerceptionOrigin("grid.png"))),
    )
    step2 = await client.complete(
        ModelRequest(messages=(first, step1, result), tools=(VIEW,), max_tokens=2000),
        model=spec,
        blobs=store,
    )
    assert not step2.tool_calls
    placed, _ = score_grid(expected, _seen_words(step2.text), 2, 2)
    assert placed == len(expected), step2.text


@pytest.mark.parametrize("wire", WIRES)
async def test_streaming_deltas_add_up_to_the_answer(
    reference_url: str, grid: tuple[bytes, list[tuple[str, int, int, str]]], wire: str
) -> None:
    png, expected = grid
    store = MemoryBlobStore()
    request = ModelRequest(
        messages=(UserMessage((_image_part(store, png, AttachmentOrigin("g.png")),)),),
        max_tokens=2000,
    )
    client, spec = _client(reference_url, wire)
    deltas: list[str] = []

    async def on_delta(text: str) -> None:
        deltas.append(text)

    reply = await client.complete(request, model=spec, blobs=store, on_delta=on_delta)
    assert deltas
    assert "".join(deltas) == reply.text
    placed, _ = score_grid(expected, _seen_words(reply.text), 2, 2)
    assert placed == len(expected)


async def test_context_overflow_maps_to_context_length_error() -> None:
    with serve_in_background(context_tokens=200) as url:
        for wire in WIRES:
            client, spec = _client(url, wire)
            request = ModelRequest(
                messages=(UserMessage((TextPart("word " * 2000),)),), max_tokens=100
            )
            with pytest.raises(ContextLengthError):
                await client.complete(request, model=spec, blobs=MemoryBlobStore())


async def test_assistant_history_round_trips(reference_url: str) -> None:
    # A plain text exchange with history on every wire: roles, alternation and shapes hold.
    for wire in WIRES:
        client, spec = _client(reference_url, wire)
        request = ModelRequest(
            messages=(
                UserMessage((TextPart("hello"),), turn=1),
                AssistantMessage(parts=(TextPart("hi there"),), turn=1),
                UserMessage((TextPart("anything to see?"),), turn=2),
            ),
            system="You are a test.",
            max_tokens=500,
        )
        reply = await client.complete(request, model=spec, blobs=MemoryBlobStore())
        assert reply.turn == 2
        assert _seen_words(reply.text) == []


_NOT_AN_IMAGE = base64.b64encode(b"this is not an image at all, only words").decode()
_BAD_IMAGE_PAYLOADS: dict[str, dict[str, Any]] = {
    "openai-chat": {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "hi"},
                    {
                        "type": "image_url",
                        "image_url": {"url": f"data:image/png;base64,{_NOT_AN_IMAGE}"},
                    },
                ],
            }
        ]
    },
    "openai-responses": {
        "input": [
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "hi"},
                    {"type": "input_image", "image_url": f"data:image/png;base64,{_NOT_AN_IMAGE}"},
                ],
            }
        ]
    },
    "anthropic": {
        "max_tokens": 100,
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {
                            "type": "base64",
                            "media_type": "image/png",
                            "data": _NOT_AN_IMAGE,
                        },
                    }
                ],
            }
        ],
    },
    "gemini": {
        "contents": [
            {
                "role": "user",
                "parts": [{"inlineData": {"mimeType": "image/png", "data": _NOT_AN_IMAGE}}],
            }
        ]
    },
    "ollama": {"messages": [{"role": "user", "content": "hi", "images": [_NOT_AN_IMAGE]}]},
    "bedrock": {
        "messages": [
            {
                "role": "user",
                "content": [{"image": {"format": "png", "source": {"bytes": _NOT_AN_IMAGE}}}],
            }
        ]
    },
}


@pytest.mark.parametrize("wire", WIRES)
async def test_refused_image_maps_to_image_rejected(reference_url: str, wire: str) -> None:
    # The server answers as each provider does for bytes that are not an image; the agent
    # relies on this arriving as ImageRejectedError to re-fit or elide and retry.
    client, spec = _client(reference_url, wire)
    with pytest.raises(ImageRejectedError) as info:
        await client.send(_BAD_IMAGE_PAYLOADS[wire], model=spec)  # type: ignore[attr-defined]
    assert info.value.status == 400
    assert info.value.provider == "reference"


async def test_image_in_a_chat_tool_message_is_rejected_as_an_image(reference_url: str) -> None:
    client, spec = _client(reference_url, "openai-chat")
    payload = {
        "messages": [
            {"role": "user", "content": "look"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "view", "arguments": '{"path": "a.png"}'},
                    }
                ],
            },
            {
                "role": "tool",
                "tool_call_id": "c1",
                "content": [
                    {
                        "type": "image_url",
                        "image_url": {"url": f"data:image/png;base64,{_NOT_AN_IMAGE}"},
                    }
                ],
            },
        ]
    }
    with pytest.raises(ImageRejectedError, match="only allowed for messages with role 'user'"):
        await client.send(payload, model=spec)  # type: ignore[attr-defined]
