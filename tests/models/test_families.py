"""An id of a known provider the catalog does not list is never refused nor blind: it
takes its family's nearest listed model's profile, says so once, and genai-prices still
prices the id itself where it knows it."""

from __future__ import annotations

import logging

import pytest

from visus.models import get_model
from visus.models.catalog import CATALOG
from visus.models.prices import cost_usd


@pytest.mark.parametrize(
    ("ref", "nearest"),
    [
        ("anthropic:claude-sonnet-7-1", "claude-sonnet-5-5"),
        ("anthropic:claude-opus-6", "claude-opus-5-5"),
        ("anthropic:claude-haiku-5-6", "claude-haiku-5-5"),
        ("openai:gpt-7", "gpt-6.1-sol"),
        ("openai:gpt-7-mini", "gpt-5.4-mini"),
        ("openai:ft:gpt-4.1-mini-2025-04-14:acme::abc123", "gpt-4.1-mini"),
        ("gemini:gemini-3.8-flash", "gemini-3.5-flash"),
        ("bedrock:global.anthropic.claude-sonnet-7-1-v1:0", "claude-sonnet-5-5"),
    ],
)
def test_tomorrows_model_takes_its_familys_nearest_profile(ref: str, nearest: str) -> None:
    spec = get_model(ref)
    listed = CATALOG[nearest]
    assert spec.assumed_from == nearest
    assert spec.vision
    assert spec.name == ref.split(":", 1)[1]
    assert spec.tokens == listed.tokens
    assert spec.thinking == listed.thinking
    assert spec.preserved_thinking == listed.preserved_thinking
    assert not spec.legacy


def test_an_unknown_claude_family_gets_a_profile_every_claude_takes() -> None:
    spec = get_model("anthropic:claude-lyric-1")
    assert spec.vision
    assert spec.max_edge == 1568  # every Claude model takes 1568 px images
    assert spec.thinking == "none"  # no thinking settings a model could refuse
    assert spec.assumed_from == "any anthropic model"


def test_it_is_said_once_with_the_override(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="visus.models.families"):
        get_model("anthropic:claude-sonnet-9-9")
        get_model("anthropic:claude-sonnet-9-9")
    said = [r.getMessage() for r in caplog.records if "claude-sonnet-9-9" in r.getMessage()]
    assert len(said) == 1
    assert "the profile of claude-sonnet-5-5" in said[0]
    assert "[[models]]" in said[0]


def test_a_listed_snapshot_is_that_model_and_says_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="visus.models.families"):
        spec = get_model("anthropic:claude-sonnet-4-5@20250929")  # a Vertex id
    assert spec.assumed_from is None
    assert spec.tokens == CATALOG["claude-sonnet-4-5"].tokens
    assert not caplog.records


def test_genai_prices_prices_the_id_where_it_knows_it() -> None:
    # gpt-5.6-cyber is in genai-prices but not in the catalog: its own price, not the
    # nearest listed model's.
    spec = get_model("openai:gpt-5.6-cyber")
    assert spec.assumed_from is not None
    assert cost_usd(spec, input_tokens=1_000_000, output_tokens=0) == pytest.approx(12.5)
