"""The docstring examples of visus.telegram run and hold."""

from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize(
    "name",
    [
        "visus.telegram",
        "visus.telegram.split",
        "visus.telegram.markdown",
        "visus.telegram.ingress",
        "visus.telegram.egress",
        "visus.telegram.retry",
        "visus.telegram.gateway",
        "visus.telegram.bot",
    ],
)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
    assert result.attempted > 0
