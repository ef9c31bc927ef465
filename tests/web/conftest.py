"""Shared pieces of the web chat tests: one reference server for the module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from visus.reference.server import serve_in_background


@pytest.fixture(scope="module")
def reference_url() -> Iterator[str]:
    with serve_in_background() as url:
        yield url
