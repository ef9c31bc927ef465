"""``visus proxy``'s model-call spans carry the usage the upstream's reply reported, as
the client received it, captured by the OpenTelemetry SDK's in-memory exporter: a
streamed and a JSON Anthropic Messages call, a streamed Responses call, a streamed
Chat Completions call that asked for usage, and a gzip reply; each span ends once its
reply has passed (or its client left), and no exported span holds base64."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from PIL import Image
from starlette.applications import Starlette
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from tests.proxy.conftest import serve_app, serve_proxy
from tests.telemetry.conftest import Captured
from tests.telemetry.test_traces import BASE64_RUN, CONVENTIONS
from visus.models import get_model
from visus.models.prices import cost_usd
from visus.proxy import ProxyConfig
from visus.reference.server import create_app, serve_in_background
from visus.telemetry import names

ANTHROPIC = {"x-api-key": "k", "anthropic-version": "2023-06-01"}
OPENAI = {"authorization": "Bearer k"}
#: A system prompt long enough for the reference's prompt cache (written, then read).
SYSTEM = [
    {"type": "text", "text": "Answer with care. " * 400, "cache_control": {"type": "ephemeral"}}
]


@pytest.fixture(scope="module")
def proxy_url() -> Iterator[str]:
    with serve_in_background() as upstream, serve_proxy(ProxyConfig(upstream=upstream)) as url:
        yield url


def _png() -> str:
    """A screenshot larger than any model takes: the proxy fits it (base64 both ways)."""
    buf = io.BytesIO()
    shot = Image.new("RGB", (2400, 1600), "white")
    shot.paste(Image.effect_noise((600, 400), 60).convert("RGB"), (100, 100))
    shot.save(buf, "PNG")
    return base64.b64encode(buf.getvalue()).decode()


def _sse(text: str) -> list[dict[str, Any]]:
    """The JSON of each ``data:`` line of a stream, as a client reads it."""
    lines = [ln[5:].strip() for ln in text.splitlines() if ln.startswith("data:")]
    return [json.loads(ln) for ln in lines if ln != "[DONE]"]


def _messages_body(image: str, *, stream: bool) -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-6",
        "max_tokens": 300,
        "stream": stream,
        "system": SYSTEM,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is on this screen?"},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": image},
                    },
                ],
            }
        ],
    }


def _anthropic_expected(usage: dict[str, int], model: str) -> dict[str, Any]:
    """The client's Messages usage as the conventions count it: ``input_tokens`` there
    is what followed the cache; the conventions' input counts every prompt token."""
    read, write = usage["cache_read_input_tokens"], usage["cache_creation_input_tokens"]
    prompt = usage["input_tokens"] + read + write
    return {
        names.INPUT_TOKENS: prompt,
        names.OUTPUT_TOKENS: usage["output_tokens"],
        names.CACHE_READ_TOKENS: read,
        names.CACHE_WRITE_TOKENS: write,
        names.COST_USD: cost_usd(
            get_model(model),
            input_tokens=prompt,
            output_tokens=usage["output_tokens"],
            cache_read_tokens=read,
            cache_write_tokens=write,
        ),
    }


def _span(captured: Captured, count: int, model: str | None = None) -> ReadableSpan:
    """The ``count``-th proxied model call's span (of ``model`` when given), once ended:
    it ends after the reply has passed, which may be a moment after the client read the
    last byte."""
    deadline = time.monotonic() + 60
    while len(calls := _proxied(captured, model)) < count:
        assert time.monotonic() < deadline, [s.name for s in captured.spans]
        time.sleep(0.02)
    return calls[count - 1]


def _proxied(captured: Captured, model: str | None = None) -> list[ReadableSpan]:
    return [
        s
        for s in captured.spans
        if (s.attributes or {}).get(names.SURFACE) == "proxy"
        and (model is None or (s.attributes or {}).get(names.REQUEST_MODEL) == model)
    ]


def _assert_usage(span: ReadableSpan, expected: dict[str, Any]) -> None:
    attributes = dict(span.attributes or {})
    got = {k: attributes.get(k) for k in expected}
    assert got == pytest.approx(expected), attributes
    assert attributes[names.OPERATION] == "chat"
    assert attributes[names.HTTP_STATUS] == 200


def test_anthropic_calls_carry_the_usage_the_client_received(
    proxy_url: str, captured: Captured
) -> None:
    captured.on(content=True)  # even so: no base64 anywhere
    image = _png()
    # Streamed: message_start says the input and the cache, message_delta the output.
    body = _messages_body(image, stream=True)
    r = httpx.post(f"{proxy_url}/v1/messages", json=body, headers=ANTHROPIC, timeout=120)
    assert r.status_code == 200, r.text
    events = _sse(r.text)
    start = next(e for e in events if e["type"] == "message_start")["message"]["usage"]
    delta = [e for e in events if e["type"] == "message_delta"][-1]["usage"]
    streamed = {**start, **delta}
    assert streamed["output_tokens"] > start["output_tokens"]  # the delta's count is the one
    assert streamed["cache_creation_input_tokens"] > 0
    call = _span(captured, 1)
    _assert_usage(call, _anthropic_expected(streamed, "claude-sonnet-4-6"))
    assert call.attributes is not None
    assert call.attributes[names.PROVIDER] == "anthropic"
    assert call.attributes[names.RESPONSE_MODEL] == "claude-sonnet-4-6"
    assert call.attributes[names.FITTED] == 1  # the edits are still on it
    # JSON: the body's usage, the cached prefix read this time.
    r = httpx.post(
        f"{proxy_url}/v1/messages",
        json=_messages_body(image, stream=False),
        headers=ANTHROPIC,
        timeout=120,
    )
    assert r.status_code == 200, r.text
    usage = r.json()["usage"]
    assert usage["cache_read_input_tokens"] > 0
    _assert_usage(_span(captured, 2), _anthropic_expected(usage, "claude-sonnet-4-6"))
    _assert_no_base64(captured, image)


def test_openai_calls_carry_the_usage_the_client_received(
    proxy_url: str, captured: Captured
) -> None:
    image = _png()
    # Responses, streamed: response.completed's response.usage, reasoning tokens too.
    body = {
        "model": "gpt-5",
        "stream": True,
        "input": [
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "what is on this screen? " * 200},
                    {"type": "input_image", "image_url": f"data:image/png;base64,{image}"},
                ],
            }
        ],
    }
    usages = []
    for count in (1, 2):  # the second reads OpenAI's automatic prompt cache
        r = httpx.post(f"{proxy_url}/v1/responses", json=body, headers=OPENAI, timeout=120)
        assert r.status_code == 200, r.text
        done = [e for e in _sse(r.text) if e["type"] == "response.completed"]
        usage = done[0]["response"]["usage"]
        usages.append(usage)
        _assert_usage(_span(captured, count), _openai_expected(usage, "gpt-5"))
    assert usages[0]["output_tokens_details"]["reasoning_tokens"] > 0
    assert usages[1]["input_tokens_details"]["cached_tokens"] > 0
    # Chat Completions, streamed with the usage the client asked for (its last chunk).
    chat = {
        "model": "gpt-4.1",
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is on this screen?"},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image}"}},
                ],
            }
        ],
    }
    r = httpx.post(f"{proxy_url}/v1/chat/completions", json=chat, headers=OPENAI, timeout=120)
    assert r.status_code == 200, r.text
    usage = _sse(r.text)[-1]["usage"]
    expected = {
        "input_tokens": usage["prompt_tokens"],
        "output_tokens": usage["completion_tokens"],
        "input_tokens_details": usage["prompt_tokens_details"],
        "output_tokens_details": {"reasoning_tokens": 0},
    }
    _assert_usage(_span(captured, 3), _openai_expected(expected, "gpt-4.1"))
    _assert_no_base64(captured, image)


def _openai_expected(usage: dict[str, Any], model: str) -> dict[str, Any]:
    read = usage["input_tokens_details"]["cached_tokens"]
    return {
        names.INPUT_TOKENS: usage["input_tokens"],
        names.OUTPUT_TOKENS: usage["output_tokens"],
        names.CACHE_READ_TOKENS: read,
        names.CACHE_WRITE_TOKENS: 0,
        names.REASONING_TOKENS: usage["output_tokens_details"]["reasoning_tokens"],
        names.COST_USD: cost_usd(
            get_model(model),
            input_tokens=usage["input_tokens"],
            output_tokens=usage["output_tokens"],
            cache_read_tokens=read,
        ),
    }


def test_a_gzip_reply_is_read_and_the_stats_count_what_was_used(captured: Captured) -> None:
    """An upstream that compresses its JSON: the client gets the gzip bytes (and reads
    them), the span and ``/stats`` get the usage."""
    zipped = GZipMiddleware(create_app(), minimum_size=10)
    with serve_app(zipped) as upstream, serve_proxy(ProxyConfig(upstream=upstream)) as url:
        r = httpx.post(
            f"{url}/v1/messages",
            json=_messages_body(_png(), stream=False),
            headers={**ANTHROPIC, "accept-encoding": "gzip"},
            timeout=120,
        )
        assert r.status_code == 200, r.text
        assert r.headers["content-encoding"] == "gzip"
        usage = r.json()["usage"]
        _assert_usage(_span(captured, 1), _anthropic_expected(usage, "claude-sonnet-4-6"))
        stats = httpx.get(f"{url}/stats").json()
    expected = _anthropic_expected(usage, "claude-sonnet-4-6")
    assert stats["input_tokens"] == expected[names.INPUT_TOKENS]
    assert stats["output_tokens"] == usage["output_tokens"]
    assert stats["cache_write_tokens"] == usage["cache_creation_input_tokens"]


def _assert_no_base64(captured: Captured, image: str) -> None:
    dumped = "\n".join(s.to_json() for s in captured.spans)
    assert not BASE64_RUN.search(dumped)
    assert image[1000:1060] not in dumped
    used = {k for s in _proxied(captured) for k in (s.attributes or {})}
    ours = {k for k in used if k.startswith(("gen_ai.", "error."))}
    assert ours <= CONVENTIONS, sorted(ours - CONVENTIONS)


def test_a_client_that_leaves_mid_stream_ends_the_span_with_what_came(
    captured: Captured,
) -> None:
    """The span ends when the client leaves, not when the reply starts, with the usage
    read so far (message_start's input and cache)."""
    start_usage = {
        "input_tokens": 12,
        "cache_read_input_tokens": 300,
        "cache_creation_input_tokens": 0,
        "output_tokens": 1,
    }

    async def hanging(request: Request) -> StreamingResponse:
        async def events() -> AsyncIterator[bytes]:
            start = {
                "type": "message_start",
                "message": {"model": "claude-x", "usage": start_usage},
            }
            yield f"event: message_start\ndata: {json.dumps(start)}\n\n".encode()
            await asyncio.sleep(3600)  # the rest never comes: the client gives up first
            yield b""

        return StreamingResponse(events(), media_type="text/event-stream")

    upstream_app = Starlette(routes=[Route("/v1/messages", hanging, methods=["POST"])])
    # A model id of this test's own (a dated snapshot of a listed one): only its spans
    # count, whatever else a proxy of this process traces meanwhile.
    model = "claude-sonnet-4-6-20991231"
    body = {"model": model, "max_tokens": 10, "stream": True, "messages": []}
    with serve_app(upstream_app) as upstream, serve_proxy(ProxyConfig(upstream=upstream)) as url:
        with httpx.stream(
            "POST", f"{url}/v1/messages", json=body, headers=ANTHROPIC, timeout=60
        ) as r:
            # Held: a line iterator let go is closed, and httpcore closes the
            # connection with it (the client would have left already).
            lines = r.iter_lines()
            assert next(lines) == "event: message_start"
            time.sleep(0.5)  # time for a proxy that ends it early to do so
            ended = _proxied(captured, model)
            assert not ended, [dict(s.attributes or {}) for s in ended]  # still open
        call = _span(captured, 1, model)  # the client left: it ended
    assert call.attributes is not None
    assert call.attributes[names.INPUT_TOKENS] == 312
    assert call.attributes[names.CACHE_READ_TOKENS] == 300
    assert call.attributes[names.OUTPUT_TOKENS] == 1
    assert call.attributes[names.RESPONSE_MODEL] == "claude-x"
