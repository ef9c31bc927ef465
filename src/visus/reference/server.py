"""The reference server: every provider wire on loopback, answered by the reference model.

Routes (each as strict as the real service, with its error shapes):

* OpenAI: ``POST /v1/chat/completions``, ``POST /v1/responses``
* Anthropic: ``POST /v1/messages``
* Gemini: ``POST /v1beta/models/{model}:generateContent`` and ``:streamGenerateContent``
  (also under ``/v1/models/``)
* Ollama: ``POST /api/chat``
* Bedrock: ``POST /model/{modelId}/converse`` and ``/converse-stream``

Example:
    >>> import httpx
    >>> with serve_in_background() as base_url:
    ...     r = httpx.post(f"{base_url}/api/chat", json={"model": "m", "stream": False,
    ...                    "messages": [{"role": "user", "content": "hi"}]})
    >>> r.json()["done"]
    True
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator

import uvicorn
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from visus import limits
from visus.errors import ConfigError
from visus.reference import (
    wire_anthropic,
    wire_bedrock,
    wire_gemini,
    wire_ollama,
    wire_openai,
    wire_openai_responses,
)
from visus.reference.common import Reject, Settings

__all__ = ["JSON_ENV", "create_app", "serve_in_background"]

#: Set to 1 to end every prose answer with the JSON block (tests; ``--json`` of the CLI).
JSON_ENV = "VISUS_REFERENCE_JSON"

Handler = Callable[[Request, Settings], Awaitable[Response]]

_START_TIMEOUT_SECONDS = 15.0


def create_app(
    context_tokens: int = limits.REFERENCE_CONTEXT_TOKENS,
    max_output_tokens: int | None = None,
    *,
    json_block: bool | None = None,
) -> FastAPI:
    """The ASGI app serving every wire with a context window of ``context_tokens``.

    With ``max_output_tokens`` an answer longer than it (or than the request's own
    cap) is cut off and the reply says so with the wire's own signal (``max_tokens``,
    ``length``, ``incomplete``, ``MAX_TOKENS``...). With ``json_block`` every prose
    answer ends in the fenced JSON of what was seen; ``None`` reads
    :data:`JSON_ENV` (``VISUS_REFERENCE_JSON=1``) once, here.

    Example:
        >>> app = create_app(context_tokens=4096)
        >>> "/v1/messages" in {r.path for r in app.routes}
        True
    """
    if context_tokens < 1:
        raise ConfigError(f"context_tokens must be positive, got {context_tokens}")
    if max_output_tokens is not None and max_output_tokens < 1:
        raise ConfigError(f"max_output_tokens must be positive, got {max_output_tokens}")
    if json_block is None:
        json_block = os.environ.get(JSON_ENV, "").strip().lower() in ("1", "true", "yes")
    settings = Settings(
        context_tokens=context_tokens, max_output_tokens=max_output_tokens, json_block=json_block
    )
    app = FastAPI(title="visus reference server", docs_url=None, redoc_url=None, openapi_url=None)

    def route(path: str, handler: Handler) -> None:
        async def endpoint(request: Request) -> Response:
            try:
                return await handler(request, settings)
            except Reject as r:
                return JSONResponse(r.body, status_code=r.status, headers=r.headers)

        app.add_api_route(path, endpoint, methods=["POST"], name=path)

    route("/v1/chat/completions", wire_openai.chat_completions)
    route("/v1/responses", wire_openai_responses.responses)
    route("/v1/messages", wire_anthropic.messages)
    route("/v1beta/models/{target:path}", wire_gemini.generate)
    route("/v1/models/{target:path}", wire_gemini.generate)  # google-genai's default version
    route("/api/chat", wire_ollama.chat)
    route("/model/{model_id:path}/converse", wire_bedrock.converse)
    route("/model/{model_id:path}/converse-stream", wire_bedrock.converse_stream)
    return app


@contextlib.contextmanager
def serve_in_background(
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    context_tokens: int = limits.REFERENCE_CONTEXT_TOKENS,
    max_output_tokens: int | None = None,
    json_block: bool | None = None,
) -> Iterator[str]:
    """Run the server in a thread; yield its base URL (``http://127.0.0.1:PORT``).

    ``port=0`` picks a free port. The server stops (and the thread joins) on exit.

    Example:
        >>> with serve_in_background(context_tokens=8000) as url:
        ...     url.startswith("http://127.0.0.1:")
        True
    """
    # Bind here, before the thread starts, so a busy port is an error in the caller's
    # thread (and the chosen port is known without asking uvicorn).
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as e:
        raise ConfigError(f"the reference server cannot listen on {host}:{port}: {e}") from e
    config = uvicorn.Config(
        create_app(context_tokens, max_output_tokens, json_block=json_block),
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="off",
        # A request still running at exit (a client gave up on `wait 30`) is cancelled
        # after a second, so the caller is not held the whole wait.
        timeout_graceful_shutdown=1,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="visus-reference", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + _START_TIMEOUT_SECONDS
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            thread.join(timeout=5)
            sock.close()
            raise ConfigError(f"the reference server did not start on {host}:{port}")
        time.sleep(0.01)
    bound = sock.getsockname()
    shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
    try:
        yield f"http://{shown}:{bound[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
