"""Fixtures for provider tests: a loopback stub server and a priced model spec."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from visus.models.spec import ModelSpec
from visus.providers import aclose

from .stub import OPEN, StubServer, serve


@pytest.fixture(autouse=True)
async def _close_clients() -> AsyncIterator[None]:
    yield
    while OPEN:
        await aclose(OPEN.pop())


@pytest.fixture
def stub() -> Iterator[StubServer]:
    yield from serve()


@pytest.fixture
def spec() -> ModelSpec:
    # $2 in / $8 out per million tokens: 1000 in + 500 out = $0.006.
    return ModelSpec(
        name="test-model",
        provider="openai",
        vision=True,
        input_price_per_mtok=2.0,
        output_price_per_mtok=8.0,
    )
