"""Cost at list prices: genai-prices first (cache reads and writes at their own prices),
the catalog for what it does not know."""

from __future__ import annotations

import pytest

from visus.models import get_model
from visus.models.prices import cost_usd
from visus.models.spec import ModelSpec
from visus.record.codec import message_from_dict, message_to_dict
from visus.record.messages import AssistantMessage, Usage
from visus.wire._reply import usage_for


def test_cache_reads_and_writes_are_priced_apart_from_plain_input() -> None:
    claude = get_model("claude-sonnet-4-6")  # $3 in; reads 0.1x, 5-minute writes 1.25x
    plain = cost_usd(claude, input_tokens=100_000, output_tokens=0)
    read = cost_usd(claude, input_tokens=100_000, output_tokens=0, cache_read_tokens=100_000)
    write = cost_usd(claude, input_tokens=100_000, output_tokens=0, cache_write_tokens=100_000)
    assert plain == pytest.approx(0.30)
    assert read == pytest.approx(0.03)
    assert write == pytest.approx(0.375)
    gpt = get_model("gpt-4.1")  # cached input at a quarter of $2
    assert cost_usd(gpt, input_tokens=10**6, output_tokens=0, cache_read_tokens=10**6) == (
        pytest.approx(0.5)
    )


def test_a_model_genai_prices_lacks_is_priced_from_the_catalog() -> None:
    mine = ModelSpec(name="house-model", provider="openai-compatible", input_price_per_mtok=1.0)
    # no cache price in the catalog: cached input at the plain price (the safe side)
    assert cost_usd(mine, input_tokens=10**6, output_tokens=0, cache_read_tokens=10**6) == 1.0
    assert cost_usd(get_model("reference"), input_tokens=10**6, output_tokens=10**6) == 0.0


def test_usage_keeps_cache_tokens_through_the_record() -> None:
    usage = usage_for(get_model("claude-sonnet-4-6"), 1000, 10, cache_read=800, cache_write=150)
    assert (usage.cache_read_tokens, usage.cache_write_tokens) == (800, 150)
    message = AssistantMessage(usage=usage)
    assert message_from_dict(message_to_dict(message)) == message
    # records of uncached steps keep their old shape
    assert set(message_to_dict(AssistantMessage(usage=Usage(5, 1)))["usage"]) == {
        "input_tokens",
        "output_tokens",
        "cost_usd",
    }
