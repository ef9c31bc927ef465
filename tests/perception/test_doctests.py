"""The docstring examples of visus.perception's values run and hold."""

from __future__ import annotations

import doctest

from visus.perception import values


def test_docstring_examples() -> None:
    result = doctest.testmod(values, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
    assert result.attempted > 0
