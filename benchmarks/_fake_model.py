"""A loopback model that takes a fixed time to answer, for the store benchmark.

OpenAI Chat Completions on ``/v1/chat/completions`` (what the ``reference`` provider
speaks when ``VISUS_REFERENCE_URL`` names a server): the last user message says how
long to wait and how many words to answer, ``[wait 1.5 words 12]``; the answer is
streamed one word per chunk (``gap`` seconds apart) when the client asks for a stream.
It reads nothing else of the request: the benchmark measures visus, not a model.

    python -m benchmarks._fake_model PORT
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

_ASK = re.compile(r"\[wait ([0-9.]+) words (\d+)(?: gap ([0-9.]+))?\]")


def _ask(body: dict[str, Any]) -> tuple[float, int, float]:
    for message in reversed(body.get("messages") or []):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        text = content if isinstance(content, str) else json.dumps(content)
        found = _ASK.search(text)
        if found:
            return float(found[1]), int(found[2]), float(found[3] or 0.0)
    return 0.0, 3, 0.0


def _chunk(model: str, delta: dict[str, Any], finish: str | None = None) -> bytes:
    event = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(event).encode() + b"\n\n"


async def _stream(model: str, words: int, gap: float) -> AsyncIterator[bytes]:
    yield _chunk(model, {"role": "assistant", "content": ""})
    for i in range(words):
        if gap and i:
            await asyncio.sleep(gap)
        yield _chunk(model, {"content": f"word{i} "})
    yield _chunk(model, {}, "stop")
    usage = {"prompt_tokens": 10, "completion_tokens": words, "total_tokens": 10 + words}
    tail = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0}
    yield b"data: " + json.dumps({**tail, "model": model, "choices": [], "usage": usage}).encode()
    yield b"\n\ndata: [DONE]\n\n"


async def completions(request: Request) -> Response:
    body = await request.json()
    wait, words, gap = _ask(body)
    await asyncio.sleep(wait)
    model = str(body.get("model", "reference"))
    if body.get("stream"):
        return StreamingResponse(_stream(model, words, gap), media_type="text/event-stream")
    text = "".join(f"word{i} " for i in range(words))
    return JSONResponse(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 0,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": words, "total_tokens": 10 + words},
        }
    )


app = Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])


def main(port: int) -> None:
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main(int(sys.argv[1]))
