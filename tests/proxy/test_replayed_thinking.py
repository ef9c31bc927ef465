"""A client that replays Claude's thinking (as Claude Code does) through ``visus proxy
--live-images`` on an Opus-5.5-like model (issue 34): the proxy's evictions edit the
history before later thinking blocks, which the reference server (as Anthropic's API for
an account created from 2026-08-31) refuses with a 400 unless the request opts into
``drop_block`` with its beta. The proxy opts in where it edited, never over the client's
own choice, and counts the reasoning that costs; on Responses the provider drops the
reasoning after an edit without an error, and the proxy counts it."""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from visus import limits
from visus.proxy import ProxyConfig
from visus.proxy.anthropic import MessagesReply
from visus.proxy.replies import ReplyTap
from visus.retention import evicted_images

from .conftest import grid, serve_app, serve_proxy

STEPS = 22
LIVE = 4
BETA = "thinking-binding-controls-2026-08-01"
TOOLS: list[Any] = [
    {"name": "screenshot", "description": "see", "input_schema": {"type": "object"}}
]


@dataclass
class Relay:
    """Between the proxy and the reference server: keeps each forwarded body and its
    ``anthropic-beta`` header, passes everything on as it is."""

    upstream: str
    seen: list[tuple[dict[str, Any], str]] = field(default_factory=list)

    def app(self) -> Starlette:
        async def relay(request: Request) -> Response:
            raw = await request.body()
            self.seen.append((json.loads(raw), request.headers.get("anthropic-beta", "")))
            headers = {
                k: v for k, v in request.headers.items() if k not in ("host", "content-length")
            }
            async with httpx.AsyncClient(timeout=120) as client:
                answer = await client.post(
                    self.upstream + request.url.path, content=raw, headers=headers
                )
            kept = {"content-type": answer.headers.get("content-type", "application/json")}
            return Response(answer.content, status_code=answer.status_code, headers=kept)

        return Starlette(routes=[Route("/v1/{rest:path}", relay, methods=["POST"])])


@pytest.fixture
def relayed(reference_url: str) -> Iterator[tuple[Relay, str]]:
    relay = Relay(reference_url)
    with serve_app(relay.app()) as url:
        yield relay, url


def _shot(n: int) -> dict[str, Any]:
    source = {"type": "base64", "media_type": "image/png", "data": grid(2, 2, seed=n).b64}
    return {"type": "image", "source": source}


def _loop(
    client: anthropic.Anthropic, steps: int, *, stream: bool = False, **extra: Any
) -> tuple[list[dict[str, Any]], list[int]]:
    """The client's loop: each reply sent back exactly as returned, then a screenshot as
    the tool's result. Returns the history and, per request, the thinking blocks its
    reply said were dropped (``input_transformations``)."""
    loop = "each screenshot " + json.dumps([{"n": n} for n in range(steps)])
    messages: list[dict[str, Any]] = [{"role": "user", "content": loop}]
    dropped: list[int] = []
    for n in range(steps):
        args: dict[str, Any] = {
            "model": "claude-opus-5-5",
            "max_tokens": 2000,
            "tools": TOOLS,
            "messages": messages,
            **extra,
        }
        if stream:
            with client.messages.stream(**args) as events:
                reply = events.get_final_message()
        else:
            reply = client.messages.create(**args)
        content = [b.model_dump(exclude_none=True) for b in reply.content]
        assert content[0]["type"] == "thinking", content
        transformations = (reply.model_extra or {}).get("input_transformations") or []
        dropped.append(sum(1 for t in transformations if t.get("type") == "thinking_dropped"))
        messages.append({"role": "assistant", "content": content})  # as returned
        call = next(b for b in content if b["type"] == "tool_use")
        result = {"type": "tool_result", "tool_use_id": call["id"], "content": [_shot(n)]}
        messages.append({"role": "user", "content": [result]})
    return messages, dropped


def _images(body: dict[str, Any]) -> int:
    return sum(
        1
        for m in body["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
        for c in b["content"]
        if c.get("type") == "image"
    )


def _changes(bodies: list[dict[str, Any]], *, without_reasoning: bool = False) -> list[int]:
    """The requests whose messages do not start with all of the previous request's."""

    def seen(body: dict[str, Any]) -> list[Any]:
        if not without_reasoning:
            return list(body["messages"])
        return [
            [b for b in m["content"] if b.get("type") != "thinking"]
            if isinstance(m["content"], list)
            else m["content"]
            for m in body["messages"]
        ]

    out = []
    for n in range(1, len(bodies)):
        before, now = seen(bodies[n - 1]), seen(bodies[n])
        if now[: len(before)] != before:
            out.append(n)
    return out


def test_a_client_replaying_thinking_meets_no_400_through_the_proxy(
    relayed: tuple[Relay, str],
) -> None:
    relay, upstream = relayed
    config = ProxyConfig(upstream=upstream, live_images=LIVE)
    with serve_proxy(config) as url:
        client = anthropic.Anthropic(base_url=url, api_key="k", max_retries=0)
        _, dropped = _loop(client, STEPS)  # a 400 raises here
        stats = httpx.get(f"{url}/stats").json()
    bodies = [b for b, _ in relay.seen]
    assert len(bodies) == STEPS
    # Request n carries n screenshots; the oldest leave in whole windows.
    gone = [evicted_images(n, LIVE, LIVE) for n in range(STEPS)]
    evictions = [n for n in range(1, STEPS) if gone[n] != gone[n - 1]]
    assert len(evictions) >= 4
    for n, body in enumerate(bodies):
        assert _images(body) == n - gone[n]
    # The forwarded history is append-only but at those requests.
    # The forwarded history is append-only but at those requests (the prefix a thinking
    # block is bound to: its reasoning left out; the bytes change once more, one request
    # after each, where the reasoning the eviction cost is left out).
    assert _changes(bodies, without_reasoning=True) == evictions
    assert _changes(bodies) == sorted({*evictions, *(n + 1 for n in evictions if n + 1 < STEPS)})
    # From the first eviction on, every request opts into drop_block with its beta; before
    # it the proxy forwarded what the client sent.
    first = evictions[0]
    for n, (body, beta) in enumerate(relay.seen):
        opted = body.get("thinking") == {
            "type": "adaptive",
            "block_binding": {"prefix_mismatch_behavior": "drop_block"},
        }
        assert opted == (n >= first), n
        assert (BETA in beta) == (n >= first), n
    # What it cost is counted: the blocks the upstream dropped, as the client was told,
    # only at the evictions (the blocks they invalidated are left out afterwards).
    assert [n for n, d in enumerate(dropped) if d] == evictions
    assert stats["reasoning_dropped"] == sum(dropped)
    assert stats["reasoning_left_out"] >= sum(dropped) - dropped[-1]
    assert stats["binding_opt_ins"] == STEPS - first
    assert stats["reasoning_after_edits"] >= sum(dropped)
    assert stats["binding_kept"] == 0


def test_a_streaming_client_has_its_dropped_reasoning_counted(reference_url: str) -> None:
    with serve_proxy(ProxyConfig(upstream=reference_url, live_images=2)) as url:
        client = anthropic.Anthropic(base_url=url, api_key="k", max_retries=0)
        _, dropped = _loop(client, 6, stream=True)
        stats = httpx.get(f"{url}/stats").json()
    assert sum(dropped) > 0
    assert stats["reasoning_dropped"] == sum(dropped)


def test_the_clients_own_binding_behaviour_is_kept(reference_url: str) -> None:
    """A client that asks for the 400 (``error``) gets it: never overridden."""
    own = {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "error"}}
    with serve_proxy(ProxyConfig(upstream=reference_url, live_images=2)) as url:
        client = anthropic.Anthropic(
            base_url=url,
            api_key="k",
            max_retries=0,
            default_headers={"anthropic-beta": BETA},
        )
        with pytest.raises(anthropic.BadRequestError, match="bound to a different"):
            _loop(client, 6, thinking=own)
        stats = httpx.get(f"{url}/stats").json()
    assert stats["binding_kept"] >= 1
    assert stats["binding_opt_ins"] == 0


def test_responses_reasoning_after_an_eviction_is_counted(reference_url: str) -> None:
    """On Responses the provider drops the reasoning after a changed point without an
    error; the client's replayed reasoning items go on and the proxy counts them."""
    steps = 8
    with serve_proxy(ProxyConfig(upstream=reference_url, live_images=2)) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0)
        loop = "each screenshot " + json.dumps([{"n": n} for n in range(steps)])
        items: list[Any] = [{"role": "user", "content": loop}]
        tools: list[Any] = [
            {"type": "function", "name": "screenshot", "parameters": {"type": "object"}}
        ]
        for n in range(steps):
            reply = client.responses.create(
                model="gpt-5.6-sol",
                input=items,
                tools=tools,
                store=False,
                include=["reasoning.encrypted_content"],
            )
            out = [o.model_dump(exclude_none=True) for o in reply.output]
            assert out[0]["type"] == "reasoning"
            items.extend(out)
            call = next(o for o in out if o["type"] == "function_call")
            image = {"type": "input_image", "image_url": grid(2, 2, seed=n).data_url}
            items.append(
                {"type": "function_call_output", "call_id": call["call_id"], "output": [image]}
            )
        stats = httpx.get(f"{url}/stats").json()
    assert stats["images_elided"] > 0
    assert stats["reasoning_after_edits"] > 0
    assert stats["binding_opt_ins"] == 0  # nothing to opt into on this wire


def _through(content_type: str, coding: str | None, chunks: list[bytes]) -> MessagesReply:
    """``chunks`` through the reply tap as the proxy passes them on: every byte goes on,
    in its chunks; what it read is returned."""
    reader = MessagesReply()
    ended: list[bool] = []
    tap = ReplyTap(content_type, coding, reader, lambda: ended.append(True))

    async def source() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    async def run() -> list[bytes]:
        return [c async for c in tap.wrap(source())]

    assert asyncio.run(run()) == chunks
    assert ended == [True]
    return reader


_DROPS = [{"type": "thinking_dropped", "path": f"messages.{n}.content.0"} for n in (1, 3)]


def _stream(start: dict[str, Any], *, crlf: bool) -> bytes:
    nl = "\r\n" if crlf else "\n"
    events = [
        ("message_start", start),
        ("ping", {"type": "ping"}),
        ("content_block_delta", {"type": "content_block_delta", "delta": {"text": "x" * 5000}}),
        ("message_delta", {"type": "message_delta", "usage": {"output_tokens": 77}}),
        ("message_stop", {"type": "message_stop"}),
    ]
    return "".join(f"event: {k}{nl}data: {json.dumps(d)}{nl}{nl}" for k, d in events).encode()


def test_the_reply_tap_reads_a_stream_split_anywhere_and_passes_every_byte() -> None:
    usage = {"input_tokens": 5, "cache_read_input_tokens": 20, "output_tokens": 1}
    start = {"type": "message_start", "message": {"input_transformations": _DROPS, "usage": usage}}
    for crlf in (True, False):
        stream = _stream(start, crlf=crlf)
        for size in (1, 7, 4096):
            pieces = [stream[i : i + size] for i in range(0, len(stream), size)]
            reader = _through("text/event-stream; charset=utf-8", None, pieces)
            assert reader.dropped == 2
            assert (reader.usage.input_tokens, reader.usage.output_tokens) == (25, 77)
    # Compressed as it streams (gzip): inflated as it passes.
    packed = gzip.compress(_stream(start, crlf=False))
    reader = _through("text/event-stream", "gzip", [packed[:50], packed[50:]])
    assert (reader.dropped, reader.usage.output_tokens) == (2, 77)


def test_the_reply_tap_reads_a_compressed_reply_and_gives_up_past_its_bound() -> None:
    reply = json.dumps({"content": [], "input_transformations": _DROPS}).encode()
    packed = gzip.compress(reply)
    assert _through("application/json", "gzip", [packed]).dropped == 2
    # A reply past PROXY_REPLY_TAP_BYTES, or not JSON, goes on unread and uncounted.
    big = json.dumps({"pad": "x" * limits.PROXY_REPLY_TAP_BYTES, "input_transformations": _DROPS})
    for body in (big.encode(), b"{not json", b"[" * 100_000):
        assert _through("application/json", None, [body[:4096], body[4096:]]).dropped == 0
    # So is a stream event past it, and a coding the proxy did not ask for.
    start = {"type": "message_start", "message": {"input_transformations": _DROPS}}
    huge = b"event: message_start\ndata: " + b" " * limits.PROXY_REPLY_TAP_BYTES
    event = f"event: message_start\ndata: {json.dumps(start)}\n\n".encode()
    assert _through("text/event-stream", None, [huge, b"\n\n" + event]).dropped == 0
    assert _through("application/json", "br", [reply]).dropped == 0


def test_a_compressed_stream_is_read_only_to_the_body_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """A gzip stream inflating past PROXY_MAX_BODY_BYTES is passed on, unread from there
    (a small one, as a compressed bomb would be, with the cap made small here)."""
    monkeypatch.setattr(limits, "PROXY_MAX_BODY_BYTES", 64 * 1024)
    start = {"type": "message_start", "message": {"input_transformations": _DROPS}}
    late = f"event: message_start\ndata: {json.dumps(start)}\n\n".encode()
    pings = b'event: ping\ndata: {"type": "ping"}\n\n' * 4000  # ~150 KB inflated
    packed = gzip.compress(pings + late)
    assert len(packed) < 64 * 1024
    assert _through("text/event-stream", "gzip", [packed]).dropped == 0
    assert _through("text/event-stream", "gzip", [gzip.compress(late + pings)]).dropped == 2
