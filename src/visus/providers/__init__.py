"""Provider clients: a model reference in, a client and its catalog entry out.

Refs are ``provider:model``: ``openai:gpt-4.1``, ``anthropic:claude-sonnet-4-6``,
``gemini:gemini-2.5-flash``, ``ollama:llama3.2-vision``, ``bedrock:<model id>``,
``openai-compatible:<model>`` (with a base URL: OpenRouter, vLLM, LM Studio, Ollama's
``/v1``), and ``reference`` or ``reference:<wire>`` (the offline reference server at
``VISUS_REFERENCE_URL``). Keys come from explicit :class:`ProviderSettings` first,
then the providers' usual environment variables. Each SDK is imported only by its
own module, and only when a ref needs it.

This face only re-exports. Where things live: ``profiles`` (one row per provider:
default wire, key and URL variables), ``settings`` (:class:`ProviderSettings`),
``resolution`` (a ref to a client and its catalog entry; the default model),
``clients`` (the client class per provider, SDK imported on first use), ``base`` (the
client protocol and the retrying transport) and one ``<name>_client`` per provider.

Example:
    >>> client, spec = resolve("reference", config=ProviderSettings(
    ...     reference_url="http://127.0.0.1:8760"))  # doctest: +SKIP
    >>> reply = await client.complete(request, model=spec, blobs=store)  # doctest: +SKIP
"""

from __future__ import annotations

from visus.providers.base import (
    BlobReader,
    OnDelta,
    ProviderClient,
    ProviderConfig,
    Wire,
    aclose,
)
from visus.providers.clients import make_client
from visus.providers.profiles import (
    OPENROUTER_BASE_URL,
    PROFILES,
    PROVIDERS,
    ProviderProfile,
    default_models,
    wire_for_provider,
)
from visus.providers.resolution import default_model, resolve
from visus.providers.settings import ProviderSettings

__all__ = [
    "OPENROUTER_BASE_URL",
    "PROFILES",
    "PROVIDERS",
    "BlobReader",
    "OnDelta",
    "ProviderClient",
    "ProviderConfig",
    "ProviderProfile",
    "ProviderSettings",
    "Wire",
    "aclose",
    "default_model",
    "default_models",
    "make_client",
    "resolve",
    "wire_for_provider",
]
