"""Every SDK client shares the process's one TLS context: building one loads the CA
store (tens of ms of CPU), which a server building a client per tether instance paid
again on its event loop for each (`python -m benchmarks store` shows the replica's CPU
per turn)."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from typing import Any

import pytest

from visus.providers.anthropic_client import AnthropicClient
from visus.providers.base import ProviderConfig, tls_context
from visus.providers.openai_client import OpenAIClient


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Each time a TLS context loads CA certificates while the test runs (the costly
    part of making one; the HTTP libraries do it through these two methods)."""
    seen: list[str] = []
    for name in ("load_verify_locations", "set_default_verify_paths"):
        real = getattr(ssl.SSLContext, name)

        def counted(self: ssl.SSLContext, *a: object, _real: Any = real, _n: str = name) -> Any:
            seen.append(_n)
            return _real(self, *a)

        monkeypatch.setattr(ssl.SSLContext, name, counted)
    tls_context.cache_clear()
    yield seen
    tls_context.cache_clear()


def test_clients_share_one_tls_context(loads: list[str]) -> None:
    for _ in range(4):
        OpenAIClient(ProviderConfig(api_key="x", base_url="https://api.example.test/v1"))
        AnthropicClient(ProviderConfig(api_key="x"))
    assert len(loads) == 1, f"the CA store was loaded {len(loads)} times for 8 clients"
    assert tls_context().verify_mode == ssl.CERT_REQUIRED
    assert tls_context().check_hostname
