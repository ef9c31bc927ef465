"""``--log-format json``: every line a JSON object carrying its request id, and no
secret, token or image bytes in any line, whatever the format."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator

import httpx
import pytest

from tests.proxy.conftest import grid, reference_url, serve_proxy
from visus.proxy import ProxyConfig
from visus.telemetry.logs import register_secret, setup_logging

__all__ = ["reference_url"]  # the proxy tests' upstream fixture, used here too

TOKEN = "proxy-token-that-must-not-leak"
API_KEY = "sk-ant-api-key-that-must-not-leak"
BASE64_RUN = re.compile(r"[A-Za-z0-9+/]{100,}")


@pytest.fixture
def logged() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    handler = setup_logging("json", stream=stream)
    yield stream
    root.removeHandler(handler)
    root.handlers[:] = handlers
    root.setLevel(level)


def test_json_lines_carry_the_request_id_and_nothing_secret(
    reference_url: str, logged: io.StringIO
) -> None:
    register_secret(TOKEN)
    big = grid(1, 2, 51, edge=3000)
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": big.b64},
    }
    body = {
        "model": "claude-sonnet-4-6",
        "max_tokens": 20,
        "messages": [{"role": "user", "content": [image]}],
    }
    headers = {"x-visus-token": TOKEN, "x-api-key": API_KEY, "x-request-id": "req-123"}
    with serve_proxy(ProxyConfig(upstream=reference_url, token=TOKEN)) as url:
        sent = httpx.post(f"{url}/v1/messages", json=body, headers=headers, timeout=300)
        assert sent.headers["x-request-id"] == "req-123"
        # What a careless line could carry: a header dump, a query token, the image.
        log = logging.getLogger("visus.proxy")
        log.warning(
            "upstream said no to x-api-key: %s with Authorization: Bearer %s", API_KEY, TOKEN
        )
        log.warning("GET /?token=%s HTTP/1.1", TOKEN)
        try:
            raise ValueError(f"bad image data:image/png;base64,{big.b64}")
        except ValueError:
            log.exception("could not read the request")
    lines = [json.loads(line) for line in logged.getvalue().splitlines()]
    assert lines
    edited = [line for line in lines if line["message"].startswith("/v1/messages model=")]
    assert edited
    assert edited[0]["request_id"] == "req-123"
    text = logged.getvalue()
    for secret in (TOKEN, API_KEY, big.b64[:60]):
        assert secret not in text
    assert not BASE64_RUN.search(text)
    assert "[redacted]" in text
    assert "[base64 " in text


def test_the_text_format_is_redacted_too(logged: io.StringIO) -> None:
    handler = setup_logging("text", stream=logged)
    register_secret(TOKEN)
    logging.getLogger("visus.x").warning("token %s", TOKEN)
    assert TOKEN not in logged.getvalue()
    logging.getLogger().removeHandler(handler)
