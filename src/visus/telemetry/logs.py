"""Logs: one line per event, as text or JSON, carrying the request it belongs to, and
never a secret, a token or an image's bytes.

``visus serve`` and ``visus proxy`` take ``--log-format json``: every line is a JSON
object (``time``, ``level``, ``logger``, ``message``, ``request_id``, and with traces on
the ``trace_id``/``span_id`` of the span it was written in). The request id is the
client's ``X-Request-ID`` when it sends a sane one, else one made here; it is answered
in ``X-Request-ID``, put on every span of the request (``visus.request_id``) and, for a
tether turn, is the turn's own request (``<seq>:<msg_id>``). Whatever the format, a
filter on the handler rewrites each line before it is written: a value registered as
secret (the server's token, provider keys) becomes ``[redacted]``, and so do bearer
tokens, ``token=`` query values and ``x-api-key``-style headers; a ``data:`` URL or
any run of base64 long enough to be an image becomes ``[base64 N chars]``.

Example:
    >>> redact("GET /?token=s3cret HTTP/1.1")
    'GET /?token=[redacted] HTTP/1.1'
    >>> redact("sent data:image/png;base64," + "A" * 300)
    'sent [base64 322 chars]'
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import IO, Literal

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "JsonFormatter",
    "LogFormat",
    "RedactingFilter",
    "RequestIds",
    "redact",
    "register_environment_secrets",
    "register_secret",
    "request_id",
    "requested",
    "setup_logging",
]

LogFormat = Literal["text", "json"]

_REQUEST_ID: ContextVar[str | None] = ContextVar("visus_request_id", default=None)
_SECRETS: set[str] = set()
#: A secret shorter than this is not worth a substitution (it would match words).
_MIN_SECRET = 8

_PATTERNS = (
    # data: URLs and long base64 runs: images (a 200-character run is 150 bytes).
    (re.compile(r"data:[\w.+-]+/[\w.+-]+;base64,[A-Za-z0-9+/=_-]*"), None),
    (re.compile(r"[A-Za-z0-9+/_-]{200,}={0,2}"), None),
    (re.compile(r"(?i)(bearer\s+)[^\s\"',;]+"), r"\1[redacted]"),
    (re.compile(r"(?i)([?&](?:token|key|api_key|access_token)=)[^&\s\"']+"), r"\1[redacted]"),
    (
        re.compile(
            r"(?i)((?:x-api-key|x-goog-api-key|api-key|x-visus-token|authorization)"
            r"[\"']?\s*[:=]\s*[\"']?)[^\s\"',;]+"
        ),
        r"\1[redacted]",
    ),
)


def register_secret(value: str | None) -> None:
    """Keep ``value`` (a token, an API key) out of every log line from now on."""
    if value and len(value) >= _MIN_SECRET:
        _SECRETS.add(value)


def redact(text: str) -> str:
    """``text`` without secrets, tokens or image bytes (see the module docstring)."""
    for secret in _SECRETS:
        if secret in text:
            text = text.replace(secret, "[redacted]")
    for pattern, repl in _PATTERNS:
        if repl is None:
            text = pattern.sub(lambda m: f"[base64 {len(m.group(0))} chars]", text)
        else:
            text = pattern.sub(repl, text)
    return text


def request_id() -> str | None:
    """The id of the request (or tether turn) the current code runs for, if any."""
    return _REQUEST_ID.get()


@contextmanager
def requested(rid: str | None) -> Iterator[None]:
    """Run the ``with`` block as part of request ``rid``."""
    token = _REQUEST_ID.set(rid)
    try:
        yield
    finally:
        _REQUEST_ID.reset(token)


_SANE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")


class RequestIds:
    """ASGI middleware: every HTTP request runs under a request id (the client's sane
    ``X-Request-ID``, else a new one), answered in ``X-Request-ID``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = next((v for k, v in scope["headers"] if k == b"x-request-id"), b"")
        text = given.decode("latin-1")
        rid = text if _SANE_ID.match(text) else secrets.token_hex(8)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [*message.get("headers", []), (b"x-request-id", rid.encode())]
                message = {**message, "headers": headers}
            await send(message)

        with requested(rid):
            await self.app(scope, receive, send_with_id)


class RedactingFilter(logging.Filter):
    """Rewrites each record's message through :func:`redact` (both formats)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        record.msg, record.args = redact(message), None
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        record.request_id = request_id()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        rid = getattr(record, "request_id", None) or request_id()
        if rid:
            line["request_id"] = rid
        line.update(_trace_ids())
        if record.exc_text:
            line["error"] = record.exc_text
        return json.dumps(line, ensure_ascii=False)


def _trace_ids() -> dict[str, str]:
    # Only once something imported the API (traces on): a log line never imports it.
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return {}
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return {}
    return {"trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}"}


class _Handler(logging.StreamHandler):  # type: ignore[type-arg]
    """visus's one handler (a second setup replaces it)."""


def register_environment_secrets(environ: Mapping[str, str] | None = None) -> None:
    """Every ``*_API_KEY``, ``*_TOKEN``, ``*_SECRET`` or ``*_PASSWORD`` variable's value
    (provider keys read from the environment), kept out of log lines."""
    env = os.environ if environ is None else environ
    for name, value in env.items():
        if name.upper().endswith(("_API_KEY", "_TOKEN", "_SECRET", "_PASSWORD", "_KEY")):
            register_secret(value)


def setup_logging(
    fmt: LogFormat = "text", *, level: int = logging.INFO, stream: IO[str] | None = None
) -> logging.Handler:
    """One handler on the root logger for the whole process (uvicorn's loggers too):
    ``fmt`` lines, redacted, to ``stream`` (default stderr). The environment's keys are
    registered as secrets. Returns the handler."""
    register_environment_secrets()
    handler = _Handler(stream)
    handler.addFilter(RedactingFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter("%(message)s"))
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _Handler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    for name in ("visus", "uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers.clear()  # uvicorn's own would write each line a second time
        logger.propagate = True
    logging.getLogger("visus").setLevel(level)
    return handler
