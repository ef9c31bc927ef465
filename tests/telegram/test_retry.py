"""with_retry: 429 waits retry_after (capped), network errors back off, bad requests
are not retried, and retries are bounded."""

from __future__ import annotations

import pytest
from telegram.error import BadRequest, NetworkError, RetryAfter, TimedOut

from visus import limits
from visus.telegram.retry import with_retry


class Flaky:
    def __init__(self, errors: list[Exception]) -> None:
        self.errors = errors
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "sent"


@pytest.fixture
def waits() -> list[float]:
    return []


def _sleep(waits: list[float]):  # type: ignore[no-untyped-def]
    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    return sleep


async def test_429_waits_what_the_server_asks(
    waits: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PTB_TIMEDELTA", "true")
    call = Flaky([RetryAfter(7), RetryAfter(3)])
    assert await with_retry(call, what="t", sleep=_sleep(waits)) == "sent"
    assert waits == [7.0, 3.0]
    assert call.calls == 3


async def test_429_wait_is_capped(waits: list[float], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PTB_TIMEDELTA", "true")
    call = Flaky([RetryAfter(3600)])
    await with_retry(call, what="t", sleep=_sleep(waits))
    assert waits == [limits.TELEGRAM_MAX_RETRY_AFTER_SECONDS]


async def test_network_errors_back_off_then_give_up(waits: list[float]) -> None:
    call = Flaky([NetworkError("reset"), TimedOut(), NetworkError("reset"), NetworkError("x")])
    with pytest.raises(NetworkError):
        await with_retry(call, what="t", retries=3, sleep=_sleep(waits))
    assert call.calls == 4
    assert waits == sorted(waits)  # growing
    assert waits[0] > 0


async def test_bad_request_is_not_retried(waits: list[float]) -> None:
    call = Flaky([BadRequest("message is not modified")])
    with pytest.raises(BadRequest):
        await with_retry(call, what="t", sleep=_sleep(waits))
    assert call.calls == 1
    assert waits == []
