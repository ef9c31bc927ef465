"""The official OpenAI and Anthropic SDKs through the proxy, the reference server upstream.

Each case first shows the failure without the proxy (the reference server refuses it
as the real provider does), then that the same request through the proxy is seen:
the reference model perceives only real image parts, so every word of a grid placed
in its cell proves the pixels arrived as an image.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import zlib
from typing import Any

import anthropic
import openai
import pytest

from .conftest import Grid, assert_placed, grid, seen

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "screenshot",
            "description": "Take a screenshot",
            "parameters": {"type": "object", "properties": {"page": {"type": "string"}}},
        },
    }
]


def _tool_conversation(g: Grid, content: Any) -> list[Any]:
    return [
        {"role": "user", "content": "look at the login page"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "screenshot", "arguments": '{"page": "login"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": content},
    ]


def _function_output(output: str) -> list[Any]:
    """A Responses input whose function call returned ``output``."""
    return [
        {"role": "user", "content": "look"},
        {"type": "function_call", "call_id": "c1", "name": "shot", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": output},
    ]


def test_openai_tool_message_image_is_seen_through_the_proxy(
    reference_url: str, proxy_url: str
) -> None:
    g = grid(2, 2, 11)
    messages = _tool_conversation(
        g,
        [
            {"type": "text", "text": "the login page"},
            {"type": "image_url", "image_url": {"url": g.data_url}},
        ],
    )
    direct = openai.OpenAI(base_url=f"{reference_url}/v1", api_key="sk-test", max_retries=0)
    with pytest.raises(openai.BadRequestError, match="image"):
        direct.chat.completions.create(model="gpt-4.1", messages=messages, tools=TOOLS)

    client = openai.OpenAI(base_url=f"{proxy_url}/v1", api_key="sk-test", max_retries=0)
    reply = client.chat.completions.create(model="gpt-4.1", messages=messages, tools=TOOLS)
    text = reply.choices[0].message.content or ""
    (image,) = seen(text)["images"]
    assert_placed(image, g)


def test_openai_stringified_tool_result_becomes_an_image(proxy_url: str) -> None:
    # The shape @ai-sdk/openai-compatible sends: JSON.stringify of the tool's output.
    g = grid(2, 2, 12)
    stringified = json.dumps(
        [
            {"type": "text", "text": "shot"},
            {"type": "media", "data": g.b64, "mediaType": "image/png"},
        ]
    )
    client = openai.OpenAI(base_url=f"{proxy_url}/v1", api_key="sk-test", max_retries=0)
    reply = client.chat.completions.create(
        model="gpt-4.1", messages=_tool_conversation(g, stringified), tools=TOOLS
    )
    (image,) = seen(reply.choices[0].message.content or "")["images"]
    assert_placed(image, g)


def test_a_tool_result_that_is_one_data_url_becomes_an_image(proxy_url: str) -> None:
    # A hand-written tool's `return f"data:image/png;base64,{b64}"`, on all three wires.
    g = grid(2, 2, 14)
    oai = openai.OpenAI(base_url=f"{proxy_url}/v1", api_key="sk-test", max_retries=0)
    chat = oai.chat.completions.create(
        model="gpt-4.1", messages=_tool_conversation(g, g.data_url + "\n"), tools=TOOLS
    )
    responses = oai.responses.create(
        model="gpt-4.1",
        input=_function_output(g.data_url),
        tools=[{"type": "function", "name": "shot", "parameters": {"type": "object"}}],
    )
    claude = anthropic.Anthropic(base_url=proxy_url, api_key="sk-test", max_retries=0)
    message = claude.messages.create(
        model="claude-sonnet-4-6",
        max_tokens=1000,
        messages=[
            {"role": "user", "content": "look"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "shot", "input": {}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": g.data_url}],
            },
        ],
    )
    block = message.content[0]
    assert block.type == "text"
    for text in (chat.choices[0].message.content or "", responses.output_text, block.text):
        (image,) = seen(text)["images"]
        assert_placed(image, g)


def test_responses_stringified_function_output_becomes_an_image(proxy_url: str) -> None:
    g = grid(2, 2, 13)
    stringified = json.dumps({"type": "image", "data": g.b64, "mimeType": "image/png"})
    client = openai.OpenAI(base_url=f"{proxy_url}/v1", api_key="sk-test", max_retries=0)
    reply = client.responses.create(
        model="gpt-4.1",
        input=_function_output(stringified),
        tools=[{"type": "function", "name": "shot", "parameters": {"type": "object"}}],
    )
    (image,) = seen(reply.output_text)["images"]
    assert_placed(image, g)


def test_an_svg_tool_image_is_drawn_as_a_raster(reference_url: str, proxy_url: str) -> None:
    # A chart tool's SVG: no provider takes image/svg+xml, visus renders it.
    svg = (
        b'<svg xmlns="http://www.w3.org/2000/svg" width="600" height="200">'
        b'<rect width="600" height="200" fill="white"/>'
        b'<text x="40" y="130" font-size="80" font-family="DejaVu Sans">HARBOR</text></svg>'
    )
    image = {
        "type": "image",
        "source": {
            "type": "base64",
            "media_type": "image/svg+xml",
            "data": base64.b64encode(svg).decode(),
        },
    }
    messages: list[Any] = [
        {"role": "user", "content": "chart it"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "chart", "input": {}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [image]}],
        },
    ]
    direct = anthropic.Anthropic(base_url=reference_url, api_key="sk-test", max_retries=0)
    with pytest.raises(anthropic.BadRequestError, match="media_type"):
        direct.messages.create(model="claude-sonnet-4-6", max_tokens=500, messages=messages)

    client = anthropic.Anthropic(base_url=proxy_url, api_key="sk-test", max_retries=0)
    reply = client.messages.create(model="claude-sonnet-4-6", max_tokens=500, messages=messages)
    text = "".join(b.text for b in reply.content if b.type == "text")
    (seen_image,) = seen(text)["images"]
    assert [w["text"] for w in seen_image["words"]] == ["HARBOR"]


def test_anthropic_25_images_of_2500px_are_all_seen(reference_url: str, proxy_url: str) -> None:
    # Five distinct grids, each sent five times (25 images); the reference model OCRs
    # each distinct image once, so the test stays fast while every image is checked.
    grids = [grid(1, 2, 100 + i, edge=2500) for i in range(5)]
    sent = [grids[i % 5] for i in range(25)]
    content: list[Any] = [{"type": "text", "text": "what do these say?"}]
    for g in sent:
        content.append(
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": g.b64},
            }
        )
    messages: list[Any] = [{"role": "user", "content": content}]

    direct = anthropic.Anthropic(base_url=reference_url, api_key="sk-test", max_retries=0)
    with pytest.raises(anthropic.BadRequestError, match="many-image requests"):
        direct.messages.create(model="claude-sonnet-4-6", max_tokens=1024, messages=messages)

    client = anthropic.Anthropic(base_url=proxy_url, api_key="sk-test", max_retries=0)
    reply = client.messages.create(model="claude-sonnet-4-6", max_tokens=1024, messages=messages)
    text = "".join(b.text for b in reply.content if b.type == "text")
    images = seen(text)["images"]
    assert len(images) == 25
    for image, g in zip(images, sent, strict=True):
        assert max(image["width"], image["height"]) <= 1568  # fitted to the model
        assert_placed(image, g)


def test_anthropic_stream_with_an_oversized_image(proxy_url: str) -> None:
    # Over Anthropic's 8000 px: refused outright by the provider; fitted by the proxy,
    # and the answer still streams back through it.
    g = grid(1, 2, 14, edge=8200)
    source = {"type": "base64", "media_type": "image/png", "data": g.b64}
    client = anthropic.Anthropic(base_url=proxy_url, api_key="sk-test", max_retries=0)
    with client.messages.stream(
        model="claude-haiku-4-5",
        max_tokens=1024,
        messages=[{"role": "user", "content": [{"type": "image", "source": source}]}],
    ) as stream:
        text = "".join(stream.text_stream)
    (image,) = seen(text)["images"]
    assert max(image["width"], image["height"]) <= 1568
    assert_placed(image, g)


def test_openai_chat_streams_through_the_proxy_after_a_fix(proxy_url: str) -> None:
    # A tool message's image (refused upstream) hoisted by the proxy; the answer streams.
    g = grid(2, 2, 15)
    messages = _tool_conversation(g, [{"type": "image_url", "image_url": {"url": g.data_url}}])
    client = openai.OpenAI(base_url=f"{proxy_url}/v1", api_key="sk-test", max_retries=0)
    chunks = list(
        client.chat.completions.create(model="gpt-4.1", messages=messages, tools=TOOLS, stream=True)
    )
    assert len(chunks) > 2  # streamed in pieces, not one body
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    (image,) = seen(text)["images"]
    assert_placed(image, g)


def test_responses_streams_through_the_proxy_after_a_fix(proxy_url: str) -> None:
    g = grid(2, 2, 16)
    stringified = json.dumps({"type": "image", "data": g.b64, "mimeType": "image/png"})
    client = openai.OpenAI(base_url=f"{proxy_url}/v1", api_key="sk-test", max_retries=0)
    with client.responses.stream(
        model="gpt-4.1",
        input=_function_output(stringified),
        tools=[{"type": "function", "name": "shot", "parameters": {"type": "object"}}],
    ) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
    assert len(deltas) > 1
    (image,) = seen("".join(deltas))["images"]
    assert_placed(image, g)


def test_a_png_with_a_damaged_ancillary_chunk_is_repaired_on_its_way(
    reference_url: str, proxy_url: str
) -> None:
    # An image that fits the model but holds a tEXt chunk with a wrong CRC: a strict
    # decoder (the reference server's, Pillow's) refuses the file; the proxy forwards
    # it without that chunk.
    g = grid(2, 2, 17)
    chunk = b"tEXt" + b"Comment\0hello"
    crc = (zlib.crc32(chunk) ^ 0xFF).to_bytes(4, "big")
    damaged = g.png[:33] + (len(chunk) - 4).to_bytes(4, "big") + chunk + crc + g.png[33:]
    g = dataclasses.replace(g, png=damaged)
    messages: list[Any] = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what does it say?"},
                {"type": "image_url", "image_url": {"url": g.data_url}},
            ],
        }
    ]
    direct = openai.OpenAI(base_url=f"{reference_url}/v1", api_key="sk-test", max_retries=0)
    with pytest.raises(openai.BadRequestError):
        direct.chat.completions.create(model="gpt-4.1", messages=messages)
    client = openai.OpenAI(base_url=f"{proxy_url}/v1", api_key="sk-test", max_retries=0)
    reply = client.chat.completions.create(model="gpt-4.1", messages=messages)
    (image,) = seen(reply.choices[0].message.content or "")["images"]
    assert_placed(image, g)
