"""Latency ``visus proxy`` adds to a request, against a direct call in the same run.

The upstream is a minimal loopback server in its own process that reads the whole
body and answers a fixed reply at once (JSON with its usage, or a stream for a body
asking for one), so what is measured is the proxy's own
cost (read, parse, edit, re-serialise, forward, stream back), not a model's. The proxy
runs as ``visus proxy`` in its own process too. For each request kind the same body
is sent N times directly and N times through the proxy (interleaved, after a warm-up);
p50 and p99 of each and the added latency are printed.

1. Text only: a 20-message Chat Completions body (~6 KB) with tools; nothing to edit,
   so the proxy forwards the original bytes.
2. Five images to fit, first time: an Anthropic Messages body with five 3000x2000
   JPEG photos (about 0.6 MB each) the proxy has not seen; each is fitted to
   claude-sonnet-4-6 (1568 px) before forwarding. A fresh set of photos per run.
3. The same request again: what every agent does at its next step (it re-sends its
   history). The proxy's cache knows each image and what it sent for it, so nothing is
   decoded or fitted again and the same bytes go out.
4. A long streamed answer: a Messages stream of ``STREAM_EVENTS`` text deltas (~180 KB,
   in 4 KB chunks) whose usage the proxy reads as it passes (``proxy/replies.py``).

5. Operations (issue 37): the same text-only, image and streamed requests through a
   second proxy with traces on (``OTEL_EXPORTER_OTLP_ENDPOINT`` pointing at the
   upstream, which takes the OTLP posts like any other), interleaved with the first
   (traces off), and what each hook the agent calls costs per call with traces off and
   on (in-process, the SDK's in-memory exporter). ``/metrics`` and the ledger are always
   on, in both. Then what reading a reply's usage costs per reply, in-process: the same
   4 KB chunks through the reply tap and its protocol's reader, against passed on unread.

Run: ``.venv/bin/python -m benchmarks proxy``
"""

from __future__ import annotations

import base64
import io
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from PIL import Image, ImageDraw, ImageFilter

ROOT = Path(__file__).resolve().parent.parent
TEXT_RUNS = 60
IMAGE_RUNS = 8
#: Text deltas in the streamed reply (~54 characters each: about 12,000 output tokens'
#: worth of events, a long answer, ~180 KB).
STREAM_EVENTS = 1000

#: The upstream's replies: a JSON Messages reply and a long Messages stream, with usage
#: (code, so the upstream process and :func:`_tap` build the same bytes).
_REPLIES = (
    """
import json
REPLY = (b'{"id":"x","type":"message","model":"claude-sonnet-4-6","content":[{"type":"text",'
         b'"text":"ok"}],"usage":{"input_tokens":900,"output_tokens":2,'
         b'"cache_read_input_tokens":4000,"cache_creation_input_tokens":0}}')
def sse(kind, data):
    return f"event: {kind}\\ndata: {json.dumps({'type': kind, **data})}\\n\\n".encode()
USAGE = {"input_tokens": 900, "output_tokens": 1, "cache_read_input_tokens": 4000}
STREAM = b"".join([
    sse("message_start", {"message": {"id": "x", "model": "claude-sonnet-4-6", "usage": USAGE}}),
    *[sse("content_block_delta", {"index": 0, "delta": {"type": "text_delta",
                                  "text": "lorem ipsum dolor sit amet " * 2}})
      for _ in range(STREAM_EVENTS)],
    sse("message_delta", {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 12000}}),
    sse("message_stop", {}),
])
"""
).replace("STREAM_EVENTS", str(STREAM_EVENTS))

_UPSTREAM = (
    _REPLIES
    + """
import sys, uvicorn
from starlette.applications import Starlette
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
async def chunks():
    for i in range(0, len(STREAM), 4096):
        yield STREAM[i:i + 4096]
async def any_path(request):
    body = await request.body()
    if b'"stream":true' in body:
        return StreamingResponse(chunks(), media_type="text/event-stream")
    return Response(REPLY, media_type="application/json")
app = Starlette(routes=[Route("/{p:path}", any_path, methods=["POST"])])
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def _process(args: list[str], port: int, extra: dict[str, str] | None = None) -> Iterator[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), **(extra or {})}
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    try:
        while True:
            try:
                httpx.post(f"{url}/v1/ping", content=b"{}", timeout=1)
                break
            except httpx.HTTPError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{args[:3]} did not start") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _photo(seed: int) -> str:
    """A 3000x2000 photo-like JPEG (gradients, shapes, blur, grain), base64."""
    im = Image.linear_gradient("L").resize((3000, 2000)).convert("RGB")
    draw = ImageDraw.Draw(im)
    for i in range(40):
        x, y = (seed * 97 + i * 211) % 2800, (seed * 53 + i * 157) % 1800
        draw.ellipse((x, y, x + 200, y + 150), fill=((i * 37) % 255, (i * 91) % 255, seed * 40))
    im = im.filter(ImageFilter.GaussianBlur(3))
    noise = Image.effect_noise((3000, 2000), 20).convert("RGB")
    im = Image.blend(im, noise, 0.15)
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=85)
    return base64.b64encode(buf.getvalue()).decode()


def _images_body(first_seed: int) -> bytes:
    content: list[dict[str, Any]] = [{"type": "text", "text": "compare these"}]
    for seed in range(first_seed, first_seed + 5):
        source = {"type": "base64", "media_type": "image/jpeg", "data": _photo(seed)}
        content.append({"type": "image", "source": source})
    images = {
        "model": "claude-sonnet-4-6",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": content}],
    }
    return json.dumps(images).encode()


def _text_body() -> bytes:
    messages: list[dict[str, Any]] = []
    for i in range(10):
        messages.append({"role": "user", "content": f"question {i}: " + "lorem ipsum " * 20})
        messages.append({"role": "assistant", "content": f"answer {i}: " + "dolor sit " * 20})
    tools = [
        {
            "type": "function",
            "function": {
                "name": f"tool_{i}",
                "description": "does a thing",
                "parameters": {"type": "object", "properties": {"x": {"type": "string"}}},
            },
        }
        for i in range(5)
    ]
    return json.dumps({"model": "gpt-4.1", "messages": messages, "tools": tools}).encode()


def _time(client: httpx.Client, url: str, body: bytes) -> float:
    start = time.perf_counter()
    r = client.post(url, content=body)
    r.read()
    elapsed = time.perf_counter() - start
    assert r.status_code == 200, r.text
    return elapsed


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _row(name: str, size: int, direct: list[float], proxied: list[float]) -> float:
    """Print one row; the added p50 in seconds."""
    d50, d99 = statistics.median(direct), _pct(direct, 0.99)
    p50, p99 = statistics.median(proxied), _pct(proxied, 0.99)
    print(
        f"{name:<22} {size / 1e6:>7.2f}MB {d50 * 1e3:>9.1f}ms {d99 * 1e3:>6.1f}ms "
        f"{p50 * 1e3:>8.1f}ms {p99 * 1e3:>6.1f}ms {(p50 - d50) * 1e3:>8.1f}ms "
        f"{(p99 - d99) * 1e3:>8.1f}ms  (x{p50 / d50:.2f} p50, n={len(direct)})"
    )
    return p50 - d50


def _text_rows(client: httpx.Client, upstream: str, proxy: str) -> None:
    path, body = "/v1/chat/completions", _text_body()
    for _ in range(3):  # warm-up: connections, imports
        _time(client, upstream + path, body)
        _time(client, proxy + path, body)
    direct = [_time(client, upstream + path, body) for _ in range(TEXT_RUNS)]
    proxied = [_time(client, proxy + path, body) for _ in range(TEXT_RUNS)]
    _row("text only", len(body), direct, proxied)


def _image_rows(client: httpx.Client, upstream: str, proxy: str) -> None:
    path = "/v1/messages"
    _time(client, proxy + path, _images_body(1000))  # warm-up: the fitting code paths
    direct: list[float] = []
    first: list[float] = []
    again: list[float] = []
    size = 0
    for run in range(IMAGE_RUNS):
        body = _images_body(run * 5)  # photos the proxy has never seen
        size = len(body)
        direct.append(_time(client, upstream + path, body))
        first.append(_time(client, proxy + path, body))
        again.append(_time(client, proxy + path, body))
    added_first = _row("5 images, first time", size, direct, first)
    added_again = _row("same request again", size, direct, again)
    print(f"repeated request: {added_again / added_first:.1%} of the first's added time (p50)")


def _stream_body() -> bytes:
    body = {
        "model": "claude-sonnet-4-6",
        "max_tokens": 16000,
        "stream": True,
        "messages": [{"role": "user", "content": "write at length"}],
    }
    return json.dumps(body, separators=(",", ":")).encode()


def _stream_rows(client: httpx.Client, upstream: str, proxy: str) -> None:
    """A long streamed answer, direct and through the proxy (which reads its usage)."""
    path, body = "/v1/messages", _stream_body()
    for _ in range(3):
        _time(client, upstream + path, body)
        _time(client, proxy + path, body)
    direct: list[float] = []
    proxied: list[float] = []
    for _ in range(TEXT_RUNS):
        direct.append(_time(client, upstream + path, body))
        proxied.append(_time(client, proxy + path, body))
    _row(f"stream, {STREAM_EVENTS} events", len(body), direct, proxied)


def _traces_rows(client: httpx.Client, off: str, on: str) -> None:
    """The same requests through the proxy with traces off and on, interleaved."""
    text = ("/v1/chat/completions", _text_body())
    for _ in range(3):
        _time(client, off + text[0], text[1])
        _time(client, on + text[0], text[1])
    quiet: list[float] = []
    traced: list[float] = []
    for _ in range(TEXT_RUNS):
        quiet.append(_time(client, off + text[0], text[1]))
        traced.append(_time(client, on + text[0], text[1]))
    _row("text, traces on vs off", len(text[1]), quiet, traced)
    quiet, traced = [], []
    size = 0
    for run in range(IMAGE_RUNS):
        body = _images_body(5000 + run * 5)
        size = len(body)
        quiet.append(_time(client, off + "/v1/messages", body))
        traced.append(_time(client, on + "/v1/messages", body))
    _row("5 images, on vs off", size, quiet, traced)
    quiet, traced = [], []
    stream = _stream_body()
    for _ in range(TEXT_RUNS):
        quiet.append(_time(client, off + "/v1/messages", stream))
        traced.append(_time(client, on + "/v1/messages", stream))
    _row("stream, on vs off", len(stream), quiet, traced)


def _tap() -> None:
    """What reading a reply's usage costs per reply, in-process: the reply's 4 KB chunks
    through :class:`~visus.proxy.replies.ReplyTap` and its protocol's reader, against
    the same chunks passed on unread."""
    import asyncio
    import gzip

    from visus.proxy.anthropic import MessagesReply
    from visus.proxy.openai_responses import ResponsesReply
    from visus.proxy.replies import Reader, ReplyTap

    namespace: dict[str, Any] = {}
    code = _UPSTREAM.split("async def chunks")[0].replace(
        "import json, sys, uvicorn", "import json"
    )
    exec(
        compile(code.split("from starlette")[0] + code[code.index("REPLY = ") :], "up", "exec"),
        namespace,
    )
    stream: bytes = namespace["STREAM"]
    done = {"model": "gpt-5", "usage": {"input_tokens": 900, "output_tokens": 5000}}
    responses = stream.replace(b"event: message_stop", b"event: response.completed") + (
        b"event: response.completed\ndata: "
        + json.dumps({"type": "response.completed", "response": done}).encode()
        + b"\n\n"
    )
    reply: bytes = namespace["REPLY"]
    cases: list[tuple[str, str, str | None, bytes, type]] = [
        (
            f"Messages stream, {len(stream) // 1000} KB",
            "text/event-stream",
            None,
            stream,
            MessagesReply,
        ),
        (
            f"Responses stream, {len(responses) // 1000} KB",
            "text/event-stream",
            None,
            responses,
            ResponsesReply,
        ),
        ("Messages JSON", "application/json", None, reply, MessagesReply),
        ("Messages JSON, gzip", "application/json", "gzip", gzip.compress(reply), MessagesReply),
    ]

    async def through(chunks: list[bytes], tap: ReplyTap | None) -> None:
        async def source() -> Any:
            for c in chunks:
                yield c

        body = source() if tap is None else tap.wrap(source())
        async for _ in body:
            pass

    def per_reply(
        chunks: list[bytes], ctype: str, coding: str | None, reader: type, n: int, read: bool
    ) -> float:
        async def run() -> float:
            start = time.perf_counter()
            for _ in range(n):
                r: Reader = reader()
                await through(chunks, ReplyTap(ctype, coding, r, lambda: None) if read else None)
            return (time.perf_counter() - start) / n

        return asyncio.run(run())

    for name, ctype, coding, data, reader in cases:
        chunks = [data[i : i + 4096] for i in range(0, len(data), 4096)]
        n = 200 if len(data) > 10_000 else 5000
        bare = per_reply(chunks, ctype, coding, reader, n, read=False)
        read = per_reply(chunks, ctype, coding, reader, n, read=True)
        print(
            f"tap {name:<26} unread {bare * 1e6:8.1f} us/reply   read {read * 1e6:8.1f} "
            f"us/reply   (+{(read - bare) * 1e6:.1f} us)"
        )


def _hooks() -> None:
    """What one call of each agent hook costs, traces off and on (in-memory export)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from visus.models import get_model
    from visus.telemetry import seams, traces

    model = get_model("claude-sonnet-4-6")
    n = 20_000

    def per_call() -> dict[str, float]:
        costs = {}
        for name, hook in (
            ("turn", lambda: seams.turn(model, "s")),
            ("model_call", lambda: seams.model_call(model)),
            ("tool_call", lambda: seams.tool_call("view", "c1", {"path": "a.png"})),
        ):
            start = time.perf_counter()
            for _ in range(n):
                with hook():
                    pass
            costs[name] = (time.perf_counter() - start) / n
        return costs

    off = per_call()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    traces.use(provider)
    on = per_call()
    traces.use(None)
    for name in off:
        quiet, traced = off[name] * 1e6, on[name] * 1e6
        print(f"hook {name:<11} traces off {quiet:6.1f} us/call   on {traced:6.1f} us/call")


def main() -> None:
    up_port, proxy_port = _free_port(), _free_port()
    headers = {"content-type": "application/json", "authorization": "Bearer k", "x-api-key": "k"}
    proxy_cmd = [
        sys.executable,
        "-c",
        "from visus.cli import app; app()",
        "proxy",
        "--upstream",
        f"http://127.0.0.1:{up_port}",
        "--data",  # the savings ledger goes here, not in the user's data folder
        tempfile.mkdtemp(prefix="visus-bench-proxy-"),
        "--port",
        str(proxy_port),
    ]
    upstream_cmd = [sys.executable, "-c", _UPSTREAM, str(up_port)]
    traced_port = _free_port()
    traced_cmd = [
        sys.executable,
        "-c",
        "from visus.cli import main; main()",  # main() reads the OTEL_* variables
        *proxy_cmd[3:-1],
        str(traced_port),
    ]
    otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{up_port}"}
    with (
        _process(upstream_cmd, up_port) as upstream,
        _process(proxy_cmd, proxy_port) as proxy,
        _process(traced_cmd, traced_port, otel) as traced,
        httpx.Client(headers=headers, timeout=120) as client,
    ):
        print(
            f"{'request':<22} {'body':>9} {'direct p50':>11} {'p99':>8} "
            f"{'proxy p50':>10} {'p99':>8} {'added p50':>10} {'added p99':>10}"
        )
        _text_rows(client, upstream, proxy)
        _image_rows(client, upstream, proxy)
        _stream_rows(client, upstream, proxy)
        stats = client.get(f"{proxy}/stats").json()
        print(
            f"proxy stats: {stats['requests']} requests, {stats['images_fitted']} images fitted "
            f"({stats['images_cached']} from the cache), {stats['bytes_saved'] / 1e6:.1f} MB saved"
        )
        _traces_rows(client, proxy, traced)
    _hooks()
    _tap()
