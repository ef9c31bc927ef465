"""Decode bombs in requests do not hold the proxy (issue 23): three progressive JPEGs of
many scans held it for 30 s while it fitted them. Now one past the scan limit is refused
at once (and forwarded as it came, for the provider to judge), and one under it is
stopped in the render worker at its budget; a plain request meanwhile goes straight
through."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.media.bombs import progressive_jpeg, scan_bomb_past_any_budget
from tests.proxy.conftest import serve_app, serve_proxy
from tests.timing import within
from visus import limits
from visus.proxy import ProxyConfig


async def _messages(request: Request) -> JSONResponse:
    body = await request.body()
    reply = {"type": "message", "role": "assistant", "content": [], "received": len(body)}
    return JSONResponse(reply)


@pytest.fixture(scope="module")
def fast_proxy() -> Iterator[str]:
    """The proxy in front of an upstream that answers at once: time spent is the proxy's."""
    upstream = Starlette(routes=[Route("/v1/messages", _messages, methods=["POST"])])
    with (
        serve_app(upstream) as upstream_url,
        serve_proxy(ProxyConfig(upstream=upstream_url)) as url,
    ):
        yield url


def _post(url: str, image: bytes | None) -> tuple[float, int]:
    content: list[dict[str, object]] = [{"type": "text", "text": "what is this?"}]
    if image is not None:
        source = {
            "type": "base64",
            "media_type": "image/jpeg",
            "data": base64.b64encode(image).decode(),
        }
        content.insert(0, {"type": "image", "source": source})
    body = {
        "model": "claude-sonnet-4-6",
        "max_tokens": 8,
        "messages": [{"role": "user", "content": content}],
    }
    start = time.monotonic()
    r = httpx.post(f"{url}/v1/messages", json=body, headers={"x-api-key": "k"}, timeout=120)
    return time.monotonic() - start, r.status_code


@pytest.mark.parametrize("scans", [600, None], ids=["past the scan limit", "stopped in the worker"])
def test_three_scan_bombs_do_not_hold_the_proxy(
    fast_proxy: str, monkeypatch: pytest.MonkeyPatch, scans: int | None
) -> None:
    # The proxy runs in this process: the lowered bounds are its own.
    monkeypatch.setattr(limits, "RENDER_TIME_BUDGET_SECONDS", 1.0)
    monkeypatch.setattr(limits, "RENDER_QUEUE_WAIT_SECONDS", 3.0)
    # Under the limit: a bomb whose decode certainly outlasts the 1 s budget (99 scans
    # decoded inside it on a quiet machine).
    bomb = (
        progressive_jpeg(10000, 10000, scans) if scans else scan_bomb_past_any_budget(monkeypatch)
    )
    with ThreadPoolExecutor(4) as pool:
        bombs = [pool.submit(_post, fast_proxy, bomb) for _ in range(3)]
        plain = pool.submit(_post, fast_proxy, None)
        plain_took, plain_status = plain.result()
        results = [f.result() for f in bombs]
    assert plain_status == 200
    assert plain_took < within(2.0)
    # Each bomb forwarded as it came (the provider refuses it), within the budgets: not
    # the ~30 s each took to decode before.
    assert all(status == 200 for _, status in results), results
    assert max(took for took, _ in results) < 1.0 + 3.0 + within(3.0), results
