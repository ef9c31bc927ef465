"""The docstring examples of visus.wire (and the record values it lowers) run and hold."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "visus.record.codec",
    "visus.record.messages",
    "visus.wire",
    "visus.wire._display",
    "visus.wire.anthropic",
    "visus.wire.bedrock",
    "visus.wire.gemini",
    "visus.wire.ollama",
    "visus.wire.openai_chat",
    "visus.wire.openai_responses",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
    assert result.attempted > 0
