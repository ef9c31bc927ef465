"""What the proxy leaves alone: bytes, streams, headers, the upstream; and its guards."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from visus.errors import ConfigError
from visus.proxy import ProxyConfig

from .conftest import grid, serve_app, serve_proxy

EVENTS = [b'data: {"n": 1}\n\n', b'data: {"n": 2}\n\n', b"data: [DONE]\n\n"]


class Tap:
    """A loopback upstream that records what reaches it and streams SSE on demand."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, dict[str, str], bytes]] = []
        self.release = threading.Event()

    def app(self) -> Starlette:
        async def any_path(request: Request) -> Response:
            body = await request.body()
            self.seen.append((request.method, request.url.path, dict(request.headers), body))
            if request.url.path.endswith("/chat/completions"):
                return StreamingResponse(self._events(), media_type="text/event-stream")
            return Response(b'{"ok":true}', media_type="application/json")

        return Starlette(routes=[Route("/{p:path}", any_path, methods=["GET", "POST"])])

    async def _events(self) -> Any:
        yield EVENTS[0]
        # The rest only once the client has the first event: proves the proxy streams.
        while not self.release.is_set():
            await asyncio.sleep(0.01)
        for event in EVENTS[1:]:
            yield event


@pytest.fixture
def tap() -> Iterator[tuple[Tap, str]]:
    t = Tap()
    with serve_app(t.app()) as url:
        yield t, url


def test_sse_is_byte_identical_to_a_direct_call(reference_url: str, proxy_url: str) -> None:
    body = {
        "model": "gpt-4.1",
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": "hello there"}],
    }
    headers = {"authorization": "Bearer sk-test"}
    for _ in range(5):  # `created` is in whole seconds: retry if a second ticked between
        direct = httpx.post(f"{reference_url}/v1/chat/completions", json=body, headers=headers)
        proxied = httpx.post(f"{proxy_url}/v1/chat/completions", json=body, headers=headers)
        if direct.content == proxied.content:
            break
    assert proxied.headers["content-type"].startswith("text/event-stream")
    assert proxied.content.count(b"data: ") > 3
    assert proxied.content == direct.content


def test_untouched_request_passes_byte_for_byte_and_streams_as_it_arrives(
    tap: tuple[Tap, str],
) -> None:
    t, upstream = tap
    # Odd spacing, unknown fields, cache_control: nothing to fit, so nothing changes.
    raw = b'{ "model" : "gpt-4.1",  "stream":true, "x_unknown": {"a": [1, 2.50]},\n'
    raw += b'"messages": [{"role":"user","content":"hi","cache_control":{"type":"ephemeral"}}]}'
    with (
        serve_proxy(ProxyConfig(upstream=upstream)) as url,
        httpx.stream(
            "POST",
            f"{url}/v1/chat/completions?trace=1",
            content=raw,
            headers={"authorization": "Bearer sk-secret", "content-type": "application/json"},
        ) as r,
    ):
        chunks = r.iter_raw()
        first = next(chunks)
        t.release.set()  # the upstream holds the rest until the client has the first
        rest = b"".join(chunks)
    assert first == EVENTS[0]
    assert first + rest == b"".join(EVENTS)
    method, path, headers, body = t.seen[0]
    assert (method, path, body) == ("POST", "/v1/chat/completions", raw)
    assert headers["authorization"] == "Bearer sk-secret"


def test_the_upstream_is_fixed_by_configuration(tap: tuple[Tap, str]) -> None:
    t, upstream = tap
    with serve_proxy(ProxyConfig(upstream=upstream + "/v1")) as url:
        r = httpx.get(f"{url}/v1/models")
        assert r.status_code == 200
        # A Host header naming another server is refused, not followed.
        refused = httpx.get(f"{url}/v1/models", headers={"host": "evil.example"})
        assert refused.status_code == 421
    assert [p for _, p, _, _ in t.seen] == ["/v1/models"]


def test_browser_pages_and_missing_tokens_are_refused(tap: tuple[Tap, str]) -> None:
    t, upstream = tap
    with serve_proxy(ProxyConfig(upstream=upstream)) as url:
        cross = httpx.post(
            f"{url}/v1/messages", content=b"{}", headers={"origin": "https://evil.example"}
        )
        assert cross.status_code == 403
    with serve_proxy(ProxyConfig(upstream=upstream, token="tok-proxy-123")) as url:
        assert httpx.get(f"{url}/stats").status_code == 401
        ok = httpx.get(f"{url}/v1/models", headers={"x-visus-token": "tok-proxy-123"})
        assert ok.status_code == 200
    (_, _, headers, _) = t.seen[0]
    assert "x-visus-token" not in headers  # the proxy's own token stays with the proxy
    with pytest.raises(ConfigError, match="upstream"):
        ProxyConfig(upstream="file:///etc/passwd")


@pytest.mark.parametrize("token", [None, "tok-proxy-123"])
def test_only_the_proxys_own_origin_is_served_and_sdk_clients_keep_working(
    tap: tuple[Tap, str], token: str | None
) -> None:
    """Issue 23: any loopback origin was accepted, so another local web app (a dev server
    on :3000, a page served by anything on the machine) could drive the proxy from the
    user's browser. Only the proxy's own origin counts now, as for `visus serve`."""
    t, upstream = tap
    keyed = {"x-visus-token": token} if token else {}
    with serve_proxy(ProxyConfig(upstream=upstream, token=token)) as url:
        port = url.rsplit(":", 1)[1]
        pages = ["http://127.0.0.1:3000", "http://localhost:5173", f"https://127.0.0.1:{port}"]
        pages += [f"http://localhost:{port}", "null"]
        for origin in pages:
            for kind in ("text/plain", "application/json"):
                r = httpx.post(
                    f"{url}/v1/messages",
                    content=b'{"model": "claude-sonnet-4-6", "max_tokens": 5, "messages": []}',
                    headers={"origin": origin, "content-type": kind, **keyed},
                )
                assert r.status_code == 403, (origin, r.status_code, r.text)
                assert r.json()["error"]["code"] == "cross_origin"
        # A browser's preflight from another origin gets no CORS answer from upstream.
        pre = httpx.options(
            f"{url}/v1/messages",
            headers={"origin": "http://127.0.0.1:3000", "access-control-request-method": "POST"},
        )
        assert pre.status_code in {401, 403}
        assert t.seen == []  # nothing reached the upstream
        # The proxy's own origin, and SDK clients (no Origin at all), pass.
        own = httpx.get(f"{url}/v1/models", headers={"origin": url, **keyed})
        assert own.status_code == 200, own.text
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test", default_headers=keyed)
        assert client.models.with_raw_response.retrieve("gpt-4.1").status_code == 200
        sdk = anthropic.Anthropic(base_url=url, api_key="sk-ant-test", default_headers=keyed)
        raw = sdk.messages.with_raw_response.create(
            model="claude-sonnet-4-6", max_tokens=5, messages=[{"role": "user", "content": "hi"}]
        )
        assert raw.status_code == 200
    paths = [p for _, p, _, _ in t.seen]
    assert paths == ["/v1/models", "/v1/models/gpt-4.1", "/v1/messages"]


def test_a_refused_image_is_named_and_counted(reference_url: str) -> None:
    g = grid(2, 2, 31)
    garbage = base64.b64encode(b"\x89PNG\r\n\x1a\n not really a png").decode()
    body = {
        "model": "claude-sonnet-4-6",
        "max_tokens": 100,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look"},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": g.b64},
                    },
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": garbage},
                    },
                ],
            }
        ],
    }
    with serve_proxy(ProxyConfig(upstream=reference_url)) as url:
        r = httpx.post(
            f"{url}/v1/messages", json=body, headers={"x-api-key": "sk-test"}, timeout=120
        )
        stats = httpx.get(f"{url}/stats").json()
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error"  # the provider's error shape is kept
    assert error["message"].startswith(
        "visus proxy: the provider refused image messages.0.content.2"
    )
    assert "Could not process image" in error["message"]
    assert stats["image_rejections"] == 1
    assert stats["requests"] == 1


def test_stats_count_what_was_done(reference_url: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="visus.proxy")
    big = grid(1, 2, 41, edge=3000)  # over claude's 1568 px: fitted
    shot = grid(2, 2, 42)
    calls = [{"id": "c1", "type": "function", "function": {"name": "shot", "arguments": "{}"}}]
    chat = {
        "model": "gpt-4.1",
        "messages": [
            {"role": "user", "content": "look"},
            {"role": "assistant", "content": None, "tool_calls": calls},
            {
                "role": "tool",
                "tool_call_id": "c1",
                "content": json.dumps(
                    [{"type": "media", "data": shot.b64, "mediaType": "image/png"}]
                ),
            },
        ],
    }
    messages = {
        "model": "claude-sonnet-4-6",
        "max_tokens": 100,
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": big.b64},
                    }
                ],
            }
        ],
    }
    with serve_proxy(ProxyConfig(upstream=reference_url)) as url:
        a = httpx.post(
            f"{url}/v1/chat/completions",
            json=chat,
            headers={"authorization": "Bearer k"},
            timeout=300,
        )
        b = httpx.post(f"{url}/v1/messages", json=messages, headers={"x-api-key": "k"}, timeout=300)
        plain = {"model": "gpt-4.1", "messages": [{"role": "user", "content": "hi"}]}
        c = httpx.post(
            f"{url}/v1/chat/completions", json=plain, headers={"authorization": "Bearer k"}
        )
        stats = httpx.get(f"{url}/stats").json()
    assert (a.status_code, b.status_code, c.status_code) == (200, 200, 200)
    assert stats["requests"] == 3
    assert stats["requests_changed"] == 2
    assert stats["images"] == 2
    assert (stats["images_repaired"], stats["images_hoisted"], stats["images_fitted"]) == (1, 1, 1)
    assert stats["images_elided"] == 0
    assert stats["bytes_saved"] > 0
    # Claude shrinks an image to its native 1568 px itself, so fitting saves bytes
    # (and the request), not tokens; elision is what saves tokens (test_retention).
    assert stats["image_tokens_saved"] == 0
    # One log line per request that changed something; never a key, never the body.
    lines = [r.getMessage() for r in caplog.records if r.name == "visus.proxy"]
    assert len(lines) == 2, lines
    assert "hoisted=1 repaired=1" in lines[0]
    assert "fitted=1" in lines[1]
    assert not any("Bearer" in line or big.b64[:40] in line for line in lines)


def test_a_body_over_the_cap_is_refused_naming_the_cap_on_every_route(
    reference_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from visus import limits

    monkeypatch.setattr(limits, "PROXY_MAX_BODY_BYTES", 1000)
    big = json.dumps({"model": "claude-sonnet-4-6", "pad": "x" * 2000})
    with serve_proxy(ProxyConfig(upstream=reference_url)) as url:
        for path in ("/v1/messages", "/v1/some/other/route"):
            r = httpx.post(f"{url}{path}", content=big, headers={"x-api-key": "sk-test"})
            assert r.status_code == 413, (path, r.text)
            error = r.json()["error"]
            assert error["type"] == "request_too_large"
            assert "over 1000 bytes (PROXY_MAX_BODY_BYTES)" in error["message"]
