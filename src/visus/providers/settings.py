"""Explicit provider keys, URLs and transport knobs, falling back to the environment.

A :class:`ProviderSettings` is what a surface or ``visus.toml`` hands to
:func:`visus.providers.resolve`; it knows where each provider's key and URL come from
(its :data:`~visus.providers.profiles.PROFILES` row) and turns its transport knobs into
a client's :class:`~visus.providers.base.ProviderConfig`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from visus import limits
from visus.providers.base import ProviderConfig, Wire
from visus.providers.profiles import PROFILES

__all__ = ["ProviderSettings"]


@dataclass(frozen=True, slots=True)
class ProviderSettings:
    """Explicit keys, URLs and transport knobs; anything unset falls back to the env.

    ``api_keys`` and ``base_urls`` are keyed by provider name (``openai``,
    ``anthropic``, ``gemini``, ``ollama``, ``bedrock``, ``openai-compatible``,
    ``openrouter``, ``reference``). ``wire`` picks the wire where a provider speaks
    several (OpenAI: ``openai-chat`` or ``openai-responses``). ``env`` replaces
    ``os.environ`` (tests, embedding).

    Example:
        >>> s = ProviderSettings(api_keys={"openai": "sk-x"}, max_retries=1)
        >>> s.key("openai")
        'sk-x'
    """

    api_keys: Mapping[str, str] = field(default_factory=dict)
    base_urls: Mapping[str, str] = field(default_factory=dict)
    reference_url: str | None = None
    wire: Wire | None = None
    timeout: float = limits.PROVIDER_TIMEOUT_SECONDS
    max_retries: int = limits.PROVIDER_MAX_RETRIES
    backoff_base: float = 0.5
    headers: Mapping[str, str] = field(default_factory=dict)
    region: str | None = None
    aws_secret_access_key: str | None = None
    aws_session_token: str | None = None
    env: Mapping[str, str] | None = None

    def _env(self) -> Mapping[str, str]:
        return os.environ if self.env is None else self.env

    def key(self, provider: str) -> str | None:
        """The key for ``provider``: explicit, else its env vars, else None."""
        if self.api_keys.get(provider):
            return self.api_keys[provider]
        env = self._env()
        names = PROFILES[provider].key_env if provider in PROFILES else ()
        return next((env[v] for v in names if env.get(v)), None)

    def url(self, provider: str) -> str | None:
        """The base URL for ``provider``: explicit, else its env var, else None."""
        if provider == "reference" and self.reference_url:
            return self.reference_url
        if self.base_urls.get(provider):
            return self.base_urls[provider]
        env = self._env()
        names = PROFILES[provider].url_env if provider in PROFILES else ()
        return next((env[v] for v in names if env.get(v)), None)

    def config(self, **overrides: object) -> ProviderConfig:
        """A :class:`ProviderConfig` with these transport knobs and ``overrides``."""
        base = ProviderConfig(
            timeout=self.timeout,
            max_retries=self.max_retries,
            backoff_base=self.backoff_base,
            wire=self.wire,
            headers=dict(self.headers),
            region=self.region,
            aws_secret_access_key=self.aws_secret_access_key,
            aws_session_token=self.aws_session_token,
        )
        return dataclasses.replace(base, **overrides)  # type: ignore[arg-type]
