"""Shared provider machinery: error classification, retries, backoff, arguments, usage."""

from __future__ import annotations

import email.utils
import time

import pytest

from visus import limits
from visus.errors import (
    AuthError,
    ContextLengthError,
    ImageRejectedError,
    ProviderError,
    RateLimitError,
)
from visus.models.spec import ModelSpec
from visus.providers.base import (
    DeltaGate,
    MappedError,
    ProviderConfig,
    backoff_delay,
    classify_http,
    decode_arguments,
    parse_retry_after,
    usage_for,
    with_retries,
)


class Boom(Exception):
    def __init__(self, status: int | None, message: str = "boom", retry_after: float | None = None):
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


def _map(e: Exception) -> MappedError | None:
    if isinstance(e, Boom):
        return classify_http(e.status, str(e), provider="test", retry_after=e.retry_after)
    return None


@pytest.mark.parametrize(
    ("status", "message", "expected", "retryable"),
    [
        (401, "bad key", AuthError, False),
        (403, "forbidden", AuthError, False),
        (429, "slow down", RateLimitError, True),
        (429, "Request too large for gpt-4.1: context_length_exceeded", ContextLengthError, False),
        (500, "internal", ProviderError, True),
        (503, "unavailable", ProviderError, True),
        (None, "connection refused", ProviderError, True),
        (400, "This model's maximum context length is 8192 tokens", ContextLengthError, False),
        (400, "prompt is too long: 300000 tokens > 200000 maximum", ContextLengthError, False),
        (400, "Invalid image_url: unsupported", ImageRejectedError, False),
        (400, "Image dimensions exceed max allowed size", ImageRejectedError, False),
        (400, "Unsupported media type", ImageRejectedError, False),
        (413, "Request too large", ImageRejectedError, False),
        (400, "Invalid value for 'temperature'", ProviderError, False),
        (404, "model not found", ProviderError, False),
    ],
)
def test_classify_http(status: int | None, message: str, expected: type, retryable: bool) -> None:
    mapped = classify_http(status, message, provider="p", retry_after=1.5)
    assert type(mapped.error) is expected
    assert mapped.retryable is retryable
    assert mapped.error.status == status
    assert mapped.error.provider == "p"
    assert message in str(mapped.error)


def test_parse_retry_after_forms() -> None:
    assert parse_retry_after({"Retry-After": "3"}) == 3.0
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    soon = email.utils.formatdate(time.time() + 20, usegmt=True)
    assert 15 < (parse_retry_after({"retry-after": soon}) or 0) <= 20
    assert parse_retry_after({"retry-after": "not a date"}) is None
    assert parse_retry_after(None) is None


def test_backoff_doubles_from_base_and_is_capped() -> None:
    cfg = ProviderConfig(backoff_base=0.5)
    assert [backoff_delay(cfg, attempt=n, retry_after=None) for n in (1, 2, 3)] == [0.5, 1.0, 2.0]
    assert backoff_delay(cfg, attempt=1, retry_after=7.0) == 7.0
    cap = limits.PROVIDER_MAX_BACKOFF_SECONDS
    assert backoff_delay(cfg, attempt=30, retry_after=None) == cap
    assert backoff_delay(cfg, attempt=1, retry_after=10 * cap) == cap


async def test_with_retries_counts_attempts_and_sleeps_per_backoff() -> None:
    calls: list[int] = []
    slept: list[float] = []

    async def attempt() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise Boom(429, retry_after=4.0)
        if len(calls) == 2:
            raise Boom(502)
        return "ok"

    async def sleep(s: float) -> None:
        slept.append(s)

    cfg = ProviderConfig(max_retries=3, backoff_base=0.25)
    assert await with_retries(attempt, config=cfg, map_error=_map, sleep=sleep) == "ok"
    assert len(calls) == 3
    assert slept == [4.0, 0.5]  # Retry-After first, then the doubled base for retry 2


async def test_with_retries_gives_up_after_max_retries() -> None:
    calls = 0

    async def attempt() -> None:
        nonlocal calls
        calls += 1
        raise Boom(429)

    async def sleep(s: float) -> None:
        pass

    with pytest.raises(RateLimitError) as info:
        await with_retries(
            attempt, config=ProviderConfig(max_retries=2), map_error=_map, sleep=sleep
        )
    assert calls == 3
    assert isinstance(info.value.__cause__, Boom)


async def test_no_retry_once_text_has_streamed() -> None:
    seen: list[str] = []
    gate = DeltaGate(seen.append)
    calls = 0

    async def attempt() -> None:
        nonlocal calls
        calls += 1
        await gate("partial ")
        raise Boom(503)

    with pytest.raises(ProviderError):
        await with_retries(attempt, config=ProviderConfig(max_retries=5), map_error=_map, gate=gate)
    assert calls == 1
    assert seen == ["partial "]


async def test_foreign_exceptions_pass_through_unmapped() -> None:
    async def attempt() -> None:
        raise KeyError("bug")

    with pytest.raises(KeyError):
        await with_retries(attempt, config=ProviderConfig(), map_error=_map)


def test_decode_arguments() -> None:
    assert decode_arguments('{"a": 1}') == {"a": 1}
    assert decode_arguments({"a": 1}) == {"a": 1}
    assert decode_arguments(None) == {}
    assert decode_arguments("") == {}
    assert decode_arguments("{not json") == {"_raw": "{not json"}
    assert decode_arguments("[1, 2]") == {"_raw": "[1, 2]"}


def test_usage_cost_from_spec_prices() -> None:
    spec = ModelSpec(
        name="m", provider="anthropic", input_price_per_mtok=3.0, output_price_per_mtok=15.0
    )
    u = usage_for(spec, 2000, 1000)
    assert (u.input_tokens, u.output_tokens) == (2000, 1000)
    assert u.cost_usd == pytest.approx(0.006 + 0.015)
    free = ModelSpec(name="r", provider="reference")
    assert usage_for(free, 10, 10).cost_usd == 0.0
