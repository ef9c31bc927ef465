"""The client class for a provider or wire, its SDK imported only when first needed."""

from __future__ import annotations

from typing import get_args

from visus.errors import ConfigError
from visus.providers.base import ProviderClient, ProviderConfig, Wire
from visus.providers.profiles import PROVIDERS, wire_for_provider

__all__ = ["make_client"]

_WIRES: tuple[str, ...] = get_args(Wire)


def make_client(
    provider: str, config: ProviderConfig, *, label: str | None = None
) -> ProviderClient:
    """The client class for ``provider`` (its SDK is imported here, on first use).

    ``provider`` may also be a wire name, which is how ``reference:<wire>`` picks;
    ``label`` is the name errors and the client carry (default: ``provider``).

    Example:
        >>> make_client("anthropic", ProviderConfig(api_key="x")).wire  # doctest: +SKIP
        'anthropic'
    """
    name = label or provider
    if provider in ("openai", "openai-compatible", "openai-chat", "openai-responses"):
        from visus.providers.openai_client import OpenAIClient

        wire = provider if provider in _WIRES else wire_for_provider(provider)
        return OpenAIClient(
            config,
            provider=name,
            wire=wire,  # type: ignore[arg-type]
            official=provider == "openai",
        )
    if provider == "anthropic":
        from visus.providers.anthropic_client import AnthropicClient

        return AnthropicClient(config, provider=name)
    if provider == "gemini":
        from visus.providers.gemini_client import GeminiClient

        return GeminiClient(config, provider=name)
    if provider == "ollama":
        from visus.providers.ollama_client import OllamaClient

        return OllamaClient(config, provider=name)
    if provider == "bedrock":
        from visus.providers.bedrock_client import BedrockClient

        return BedrockClient(config, provider=name)
    raise ConfigError(f"unknown provider {provider!r}; known: {', '.join(PROVIDERS)}")
