"""Talking to the upstream: patience, content codings, odd bodies, headers (issue 25)."""

from __future__ import annotations

import asyncio
import gzip
import json
import threading
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from typer.testing import CliRunner

from visus import limits
from visus.proxy import ProxyConfig

from .conftest import assert_placed, cli_port, grid, seen, serve_app, serve_proxy
from .test_passthrough import Tap

REPLY = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-6",
    "content": [{"type": "text", "text": "done"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 1, "output_tokens": 1},
}


class Slow:
    """An upstream that takes its time: answers after ``delay`` s, or waits for the
    client to go (``gone`` is set when the proxy drops the request)."""

    def __init__(self, delay: float | None) -> None:
        self.delay = delay
        self.requests = 0
        self.gone = threading.Event()

    def app(self) -> Starlette:
        async def messages(request: Request) -> Response:
            await request.body()
            self.requests += 1
            waited = 0.0
            while self.delay is None or waited < self.delay:
                if await request.is_disconnected():
                    self.gone.set()
                    return Response(status_code=499)
                await asyncio.sleep(0.05)
                waited += 0.05
            return JSONResponse(REPLY)

        return Starlette(routes=[Route("/v1/messages", messages, methods=["POST"])])


def _hello(client: anthropic.Anthropic) -> Any:
    return client.messages.create(
        model="claude-sonnet-4-6", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
    )


def test_a_slow_upstream_is_waited_for_not_turned_into_a_retryable_502(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The proxy used to give up after PROVIDER_TIMEOUT_SECONDS with a 502 the SDK
    # retries: a long reasoning call was cut and billed again. Shortened here so the
    # old behaviour shows in a second; the proxy no longer has a read timeout at all.
    monkeypatch.setattr(limits, "PROVIDER_TIMEOUT_SECONDS", 0.3)
    slow = Slow(delay=1.2)
    with serve_app(slow.app()) as upstream, serve_proxy(ProxyConfig(upstream=upstream)) as url:
        client = anthropic.Anthropic(base_url=url, api_key="sk-test", max_retries=2, timeout=30)
        reply = _hello(client)
    assert reply.content[0].type == "text"
    assert slow.requests == 1  # answered once, never retried


def test_a_client_that_gives_up_cancels_the_upstream_request() -> None:
    slow = Slow(delay=None)
    with serve_app(slow.app()) as upstream, serve_proxy(ProxyConfig(upstream=upstream)) as url:
        client = anthropic.Anthropic(base_url=url, api_key="sk-test", max_retries=0, timeout=0.5)
        with pytest.raises(anthropic.APITimeoutError):
            _hello(client)
        # The client's patience is the proxy's: the upstream sees the request go.
        assert slow.gone.wait(10)
    assert slow.requests == 1


# {"type":"error","error":{"type":"invalid_request_error","message":
#  "messages.0.content.0.source.base64.data: Could not process image"}}, brotli'd
# (node's zlib.brotliCompressSync; no brotli encoder is installed for Python).
BROTLI_REFUSAL = bytes.fromhex(
    "1b8500208cd315f32384750f6a72e437ff052dc8e43949c25287a54f6f98e3feed11ad88839b9e2cb427f3"
    "fd488ac9a7f503ec2650aa66e7129673533a4406c19f42b2a29ea61ab7527eec2379ec22f881920f"
)
REFUSAL = {
    "type": "error",
    "error": {
        "type": "invalid_request_error",
        "message": "messages.0.content.0.source.base64.data: Could not process image",
    },
}


class Compressing:
    """An upstream that refuses every image in the best coding the request accepts
    (``always_br``: in brotli, whatever was asked)."""

    def __init__(self, *, always_br: bool = False) -> None:
        self.always_br = always_br
        self.accepted: list[str] = []

    def app(self) -> Starlette:
        async def messages(request: Request) -> Response:
            await request.body()
            accept = request.headers.get("accept-encoding", "")
            self.accepted.append(accept)
            if self.always_br or "br" in accept:
                body, coding = BROTLI_REFUSAL, "br"
            elif "gzip" in accept:
                body, coding = gzip.compress(json.dumps(REFUSAL).encode()), "gzip"
            else:
                body, coding = json.dumps(REFUSAL).encode(), "identity"
            headers = {"content-encoding": coding, "content-type": "application/json"}
            return Response(body, status_code=400, headers=headers)

        return Starlette(routes=[Route("/v1/messages", messages, methods=["POST"])])


def _image(b64: str) -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64}}


def _one_image(client: anthropic.Anthropic) -> Any:
    g = grid(1, 1, 71)
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": g.b64},
    }
    return client.messages.create(
        model="claude-sonnet-4-6", max_tokens=10, messages=[{"role": "user", "content": [image]}]
    )


def test_a_refusal_is_read_when_the_client_accepts_brotli() -> None:
    # Node clients (Claude Code, the AI SDK) accept br; the proxy cannot decode it, so it
    # asks the upstream only for what it reads and the refusal names the image.
    upstream = Compressing()
    with serve_app(upstream.app()) as up, serve_proxy(ProxyConfig(upstream=up)) as url:
        client = anthropic.Anthropic(
            base_url=url,
            api_key="sk-test",
            max_retries=0,
            default_headers={"accept-encoding": "gzip, deflate, br"},
        )
        with pytest.raises(anthropic.BadRequestError) as caught:
            _one_image(client)
    message = caught.value.body["error"]["message"]  # type: ignore[index]
    assert message.startswith("visus proxy: the provider refused image messages.0.content.0")
    assert "Could not process image" in message
    assert upstream.accepted == ["gzip, deflate"]


def test_an_answer_in_a_coding_the_proxy_cannot_read_passes_as_it_came() -> None:
    upstream = Compressing(always_br=True)
    g = grid(1, 1, 72)
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": g.b64},
    }
    body = {"model": "claude-sonnet-4-6", "max_tokens": 10}
    body["messages"] = [{"role": "user", "content": [image]}]
    with (
        serve_app(upstream.app()) as up,
        serve_proxy(ProxyConfig(upstream=up)) as url,
        httpx.stream("POST", f"{url}/v1/messages", json=body) as r,
    ):
        raw = b"".join(r.iter_raw())
    assert r.status_code == 400
    assert r.headers["content-encoding"] == "br"
    assert raw == BROTLI_REFUSAL  # undamaged: a client that reads brotli reads it


class Gzipping(httpx.BaseTransport):
    """A client transport that gzips every request body (as some agents do)."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        body = gzip.compress(request.read())
        headers = [(k, v) for k, v in request.headers.raw if k.lower() != b"content-length"]
        headers += [(b"content-encoding", b"gzip"), (b"content-length", str(len(body)).encode())]
        squeezed = httpx.Request(request.method, request.url, headers=headers, content=body)
        return self.inner.handle_request(squeezed)

    def close(self) -> None:
        self.inner.close()


def test_a_gzipped_request_body_is_fixed_like_a_plain_one(proxy_url: str) -> None:
    g = grid(2, 2, 73)
    call = {"id": "c1", "type": "function", "function": {"name": "shot", "arguments": "{}"}}
    messages: list[Any] = [
        {"role": "user", "content": "look"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": [{"type": "image_url", "image_url": {"url": g.data_url}}],
        },
    ]
    with httpx.Client(transport=Gzipping()) as http:
        client = openai.OpenAI(
            base_url=f"{proxy_url}/v1", api_key="sk-test", max_retries=0, http_client=http
        )
        reply = client.chat.completions.create(model="gpt-4.1", messages=messages)
    (image,) = seen(reply.choices[0].message.content or "")["images"]
    assert_placed(image, g)  # decompressed, hoisted out of the tool message, seen


@pytest.fixture
def tap() -> Iterator[tuple[Tap, str]]:
    t = Tap()
    with serve_app(t.app()) as url:
        yield t, url


def test_an_untouched_gzipped_body_goes_on_compressed_and_a_bomb_is_refused(
    tap: tuple[Tap, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    t, upstream = tap
    squeezed = gzip.compress(
        b'{"model": "gpt-4.1", "messages": [{"role": "user", "content": "hi"}]}'
    )
    headers = {"content-encoding": "gzip", "content-type": "application/json"}
    monkeypatch.setattr(limits, "PROXY_MAX_BODY_BYTES", 100_000)
    bomb = gzip.compress(b'{"pad": "' + b"x" * 1_000_000 + b'"}')
    with serve_proxy(ProxyConfig(upstream=upstream)) as url:
        assert httpx.post(f"{url}/v1/responses", content=squeezed, headers=headers).is_success
        r = httpx.post(f"{url}/v1/responses", content=bomb, headers=headers)
    assert r.status_code == 413  # 1 MB from a 1 KB body: past the proxy's cap
    ((_, path, seen_headers, body),) = t.seen
    assert (path, body, seen_headers["content-encoding"]) == ("/v1/responses", squeezed, "gzip")


def _nested(depth: int) -> bytes:
    return (
        b'{"model": "claude-sonnet-4-6", "max_tokens": 10, "messages": '
        b'[{"role": "user", "content": "hi"}], "metadata": ' + b"[" * depth + b"]" * depth + b"}"
    )


def test_deeply_nested_json_is_forwarded_and_refused_by_the_provider_not_a_500(
    reference_url: str, proxy_url: str
) -> None:
    body = _nested(100_000)
    headers = {"x-api-key": "sk-test", "content-type": "application/json"}
    direct = httpx.post(f"{reference_url}/v1/messages", content=body, headers=headers)
    assert direct.status_code == 400, direct.text  # the reference server crashed too
    assert direct.json()["error"]["type"] == "invalid_request_error"
    through = httpx.post(f"{proxy_url}/v1/messages", content=body, headers=headers)
    assert (through.status_code, through.json()) == (400, direct.json())


def test_a_deeply_nested_stringified_tool_text_is_left_as_text(reference_url: str) -> None:
    # A tool text that looks like JSON media but nests past Python's parser: the rest
    # of the request is still edited (the oversized image is fitted).
    g = grid(2, 2, 74, edge=2600)
    text = '[{"data": ' + "[" * 50_000 + "]" * 50_000 + "}]"
    messages: list[Any] = [
        {"role": "user", "content": "call shot"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "shot", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": text},
                _image(g.b64),
            ],
        },
    ]
    with serve_proxy(ProxyConfig(upstream=reference_url)) as url:
        client = anthropic.Anthropic(base_url=url, api_key="sk-test", max_retries=0)
        reply = client.messages.create(model="claude-sonnet-4-6", max_tokens=500, messages=messages)
        stats = httpx.get(f"{url}/stats").json()
    text_out = "".join(b.text for b in reply.content if b.type == "text")
    assert_placed(seen(text_out)["images"][0], g)
    assert stats["images_fitted"] == 1


def test_one_server_header_and_one_date(tap: tuple[Tap, str]) -> None:
    _, upstream = tap
    with serve_proxy(ProxyConfig(upstream=upstream)) as url:
        r = httpx.get(f"{url}/v1/models")
    assert r.headers.get_list("server") == ["uvicorn"]  # the upstream's own
    assert len(r.headers.get_list("date")) == 1


def test_visus_proxy_serves_without_its_own_server_header(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    import uvicorn

    from visus.cli import app

    ran: dict[str, Any] = {}

    def run(server: uvicorn.Server, *a: Any, **kw: Any) -> None:  # kept, not served
        ran.update(vars(server.config))

    # The proxy runs a uvicorn.Server of its own (tether_server), not uvicorn.run: a patch
    # of uvicorn.run let this test start a real proxy that served for ever.
    monkeypatch.setattr(uvicorn.Server, "run", run)
    port = cli_port(monkeypatch, tmp_path)
    result = CliRunner().invoke(app, ["proxy", "--upstream", "http://127.0.0.1:9", "--port", port])
    assert result.exit_code == 0, result.output
    assert (ran["server_header"], ran["date_header"]) == (False, False)


def test_listening_beyond_loopback_without_a_token_names_the_proxy_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    from visus.cli import app

    monkeypatch.delenv("VISUS_PROXY_TOKEN", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "visus.toml").write_text("")
    monkeypatch.setenv("VISUS_CONFIG", str(tmp_path / "visus.toml"))
    args = ["proxy", "--upstream", "http://127.0.0.1:9", "--host", "0.0.0.0"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code != 0
    assert "VISUS_PROXY_TOKEN" in result.output
    assert "VISUS_TOKEN " not in result.output
