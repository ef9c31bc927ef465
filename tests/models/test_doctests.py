"""The docstring examples of visus.models and visus.perception run and hold."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "visus.models",
    "visus.models.catalog",
    "visus.models.registry",
    "visus.models.spec",
    "visus.models.tokens",
    "visus.perception",
    "visus.perception.reach",
    "visus.perception.tools",
    "visus.perception.values",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
    assert result.attempted > 0
