"""What a model step costs: list prices from ``genai-prices``, the catalog as fallback.

`genai-prices <https://github.com/pydantic/genai-prices>`_ (pydantic's maintained price
data, the one pydantic-ai uses) knows each provider's input, output, cache-read and
cache-write prices, price tiers included. A model it does not know (the reference model,
a local one, a ``[[models]]`` entry of your own) is priced from the catalog: its input
and output prices, and its cache prices where it names them, else cached input at the
plain input price (the safe side). Nothing is fetched: the price data ships in the package.

Token counts follow the providers' usage fields: ``input_tokens`` is every prompt token,
``cache_read_tokens`` and ``cache_write_tokens`` the part of them read from and written
to the prompt cache.

Example:
    >>> from visus.models import get_model
    >>> cost_usd(get_model("claude-sonnet-4-6"), input_tokens=1_000_000, output_tokens=0)
    3.0
    >>> cost_usd(get_model("claude-sonnet-4-6"), input_tokens=1_000_000, output_tokens=0,
    ...          cache_read_tokens=1_000_000)  # a tenth of the input price
    0.3
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from visus.models.spec import ModelSpec

if TYPE_CHECKING:
    from genai_prices.types import ModelPrice

__all__ = ["cost_usd", "relative_prices"]

#: The catalog's providers as genai-prices names them (others are priced from the catalog).
_PROVIDER_IDS = {"anthropic": "anthropic", "openai": "openai", "gemini": "google", "bedrock": "aws"}


@functools.lru_cache(maxsize=256)
def _list_price(provider: str, name: str) -> ModelPrice | None:
    """genai-prices' entry for a model (None when it does not know it)."""
    provider_id = _PROVIDER_IDS.get(provider)
    if provider_id is None:
        return None
    from genai_prices import Usage, calc_price

    try:
        found = calc_price(Usage(input_tokens=1), model_ref=name, provider_id=provider_id)
    except LookupError:
        return None
    return found.model_price


def cost_usd(
    model: ModelSpec,
    *,
    input_tokens: int,
    output_tokens: int,
    cache_read_tokens: int = 0,
    cache_write_tokens: int = 0,
) -> float:
    """USD at list prices for one step's tokens (``input_tokens`` includes cached ones).

    Example:
        >>> spec = ModelSpec(name="mine", provider="openai-compatible",
        ...                  input_price_per_mtok=2.0, output_price_per_mtok=8.0,
        ...                  cache_read_price_per_mtok=0.5)
        >>> cost_usd(spec, input_tokens=1_000_000, output_tokens=500_000,
        ...          cache_read_tokens=500_000)
        5.25
    """
    listed = _list_price(model.provider, model.name)
    if listed is not None:
        from genai_prices import Usage

        usage = Usage(
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cache_read_tokens=cache_read_tokens or None,
            cache_write_tokens=cache_write_tokens or None,
        )
        return float(listed.calc_price(usage)["total_price"])
    plain = max(0, input_tokens - cache_read_tokens - cache_write_tokens)
    read = model.cache_read_price_per_mtok
    write = model.cache_write_price_per_mtok
    inp = model.input_price_per_mtok
    return (
        plain * inp
        + cache_read_tokens * (inp if read is None else read)
        + cache_write_tokens * (inp if write is None else write)
        + output_tokens * model.output_price_per_mtok
    ) / 1_000_000


@functools.lru_cache(maxsize=256)
def relative_prices(model: ModelSpec) -> tuple[float, float]:
    """A cache read's and an output token's price, each as a share of an input token's
    (what weighing reads saved against reasoning redone needs; ``(1.0, 1.0)`` for a
    model priced at nothing).

    Example:
        >>> from visus.models import get_model
        >>> relative_prices(get_model("claude-opus-5-5"))
        (0.05, 5.0)
    """
    unit = cost_usd(model, input_tokens=1_000_000, output_tokens=0)
    if unit <= 0:
        return 1.0, 1.0
    read = cost_usd(model, input_tokens=1_000_000, output_tokens=0, cache_read_tokens=1_000_000)
    out = cost_usd(model, input_tokens=0, output_tokens=1_000_000)
    return round(read / unit, 6), round(out / unit, 6)
