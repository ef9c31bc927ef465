"""The process-wide memory budget (visus.budget): reservations wait with a deadline or
are refused, from threads and the event loop alike; request bodies count from their
first byte until the response is sent (BodyBudget)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.timing import within
from visus import limits
from visus.budget import BodyBudget, MemoryBudget
from visus.errors import BusyError, TooLargeError


def test_a_thread_waits_for_room_and_gets_it_when_bytes_come_back() -> None:
    budget = MemoryBudget(total=100)
    held = budget.reserve(80, what="a decode")
    threading.Timer(0.1, held.release).start()
    start = time.monotonic()
    with budget.reserve(50, what="another decode", wait=60.0):
        assert budget.in_use == 50
    assert 0.05 < time.monotonic() - start < min(within(2.0), 30)  # woken, not timed out
    assert budget.in_use == 0
    assert budget.peak == 80


def test_past_the_wait_a_caller_is_refused_busy_and_past_the_total_at_once() -> None:
    budget = MemoryBudget(total=100)
    with budget.reserve(80, what="a decode"):
        start = time.monotonic()
        with pytest.raises(BusyError, match=r"waited 0\.2 s.*try again"):
            budget.reserve(50, what="another decode", wait=0.2)
        assert time.monotonic() - start >= 0.2
        start = time.monotonic()
        with pytest.raises(TooLargeError, match="whole memory budget") as refused:
            budget.reserve(101, what="a body", wait=60.0)
        assert not isinstance(refused.value, BusyError)
        assert time.monotonic() - start < within(0.1)
    assert budget.in_use == 0


async def test_the_event_loop_waits_without_holding_a_thread() -> None:
    budget = MemoryBudget(total=100)
    held = budget.reserve(100, what="a decode")
    waiter = asyncio.ensure_future(budget.reserve_async(10, what="a body", wait=60.0))
    await asyncio.sleep(0.05)
    assert not waiter.done()
    # Released from a thread (as a decode in to_thread would): the loop wakes.
    await asyncio.to_thread(held.release)
    reservation = await asyncio.wait_for(waiter, min(within(2.0), 30))
    assert budget.in_use == 10
    reservation.release()
    with pytest.raises(BusyError), budget.reserve(100, what="a decode"):
        await budget.reserve_async(1, what="a body", wait=0.1)


# --- BodyBudget ----------------------------------------------------------------------


async def _echo_size(request: Request) -> JSONResponse:
    body = await request.body()
    return JSONResponse({"size": len(body)})


def _app(budget: MemoryBudget) -> Starlette:
    app = Starlette(routes=[Route("/upload", _echo_size, methods=["POST"])])
    app.add_middleware(BodyBudget, budget=budget)
    return app


async def _chunks(n: int, size: int) -> AsyncIterator[bytes]:
    for _ in range(n):
        yield b"x" * size


async def test_a_body_counts_until_the_response_and_is_refused_when_the_budget_is_full(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(limits, "MEMORY_BUDGET_WAIT_SECONDS", 0.2)
    budget = MemoryBudget(total=10_000)
    transport = httpx.ASGITransport(app=_app(budget))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        ok = await client.post("/upload", content=b"x" * 4000)
        assert ok.json() == {"size": 4000}
        assert budget.peak == 4000
        assert budget.in_use == 0  # given back with the response
        # One body past the whole budget: 413 before a byte is read.
        big = await client.post("/upload", content=b"x" * 10_001)
        assert big.status_code == 413
        assert big.json()["error"]["code"] == "too_large"
        assert "MEMORY_BUDGET_BYTES" in big.json()["error"]["message"]
        with budget.reserve(8000, what="pixels being decoded"):
            busy = await client.post("/upload", content=b"x" * 4000)
            assert busy.status_code == 503
            assert busy.headers["retry-after"]
            assert busy.json()["error"]["code"] == "busy"
            # A body that declares no length grows its share as it arrives.
            cut = await client.post("/upload", content=_chunks(10, 1000))
            assert cut.status_code == 503
        assert budget.in_use == 0
        whole = await client.post("/upload", content=_chunks(10, 1000))
        assert whole.json() == {"size": 10_000}
    assert budget.in_use == 0


async def test_the_proxy_refuses_a_body_past_the_budget_in_its_own_error_shape(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from visus.proxy import ProxyConfig, create_proxy_app

    monkeypatch.setattr(limits, "MEMORY_BUDGET_BYTES", 1000)
    app = create_proxy_app(ProxyConfig(upstream="http://127.0.0.1:9"))
    transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 5000))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        r = await client.post("/v1/messages", content=b"x" * 2000)
    assert r.status_code == 413
    error = r.json()
    assert error["type"] == "error"
    assert error["error"]["type"] == "request_too_large"
    assert "MEMORY_BUDGET_BYTES" in error["error"]["message"]
