"""One row per provider: its default wire, key and URL variables, default URL.

Adding a provider is one codec (``visus.wire.<name>``), one transport
(``visus.providers.<name>_client``) and one row here. Nothing else in visus keeps a
table of provider names, variables or URLs.

Example:
    >>> PROFILES["gemini"].key_env
    ('GEMINI_API_KEY', 'GOOGLE_API_KEY')
    >>> profile("openrouter").default_url
    'https://openrouter.ai/api/v1'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from visus.errors import ConfigError, WireError
from visus.wire import Wire

__all__ = [
    "OPENROUTER_BASE_URL",
    "PROFILES",
    "PROVIDERS",
    "ProviderProfile",
    "default_models",
    "profile",
    "wire_for_provider",
]

OPENROUTER_BASE_URL = "https://openrouter.ai/api/v1"


@dataclass(frozen=True, slots=True)
class ProviderProfile:
    """What visus knows of one provider besides its codec and transport.

    ``key_env`` and ``url_env`` are read in order, first set one wins. ``default_url``
    applies when neither settings nor env give one. ``default_model`` is the model
    chosen when this provider's key is the first one set (rows are in order of
    preference). ``key_required``: resolving a ref fails without a key.
    """

    name: str
    default_wire: Wire
    key_env: tuple[str, ...] = ()
    url_env: tuple[str, ...] = ()
    default_url: str | None = None
    default_model: str | None = None
    key_required: bool = False


_ROWS = (
    ProviderProfile(
        "anthropic",
        "anthropic",
        ("ANTHROPIC_API_KEY",),
        ("ANTHROPIC_BASE_URL",),
        default_model="anthropic:claude-sonnet-5-5",
        key_required=True,
    ),
    # OpenAI's own API speaks Responses by default; ``wire`` picks Chat Completions.
    ProviderProfile(
        "openai",
        "openai-responses",
        ("OPENAI_API_KEY",),
        ("OPENAI_BASE_URL",),
        default_model="openai:gpt-6.1-sol",
        key_required=True,
    ),
    ProviderProfile(
        "gemini",
        "gemini",
        ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
        ("GOOGLE_GEMINI_BASE_URL",),
        default_model="gemini:gemini-3.5-flash",
        key_required=True,
    ),
    # OpenRouter is not a ref prefix: it is an openai-compatible server with a key.
    ProviderProfile(
        "openrouter",
        "openai-chat",
        ("OPENROUTER_API_KEY",),
        default_url=OPENROUTER_BASE_URL,
        default_model="openai-compatible:openai/gpt-6.1-sol",
        key_required=True,
    ),
    ProviderProfile(
        "ollama",
        "ollama",
        ("OLLAMA_API_KEY",),
        ("OLLAMA_HOST",),
        default_url="http://127.0.0.1:11434",
    ),
    ProviderProfile("bedrock", "bedrock", (), ("VISUS_BEDROCK_ENDPOINT_URL",)),
    ProviderProfile(
        "openai-compatible",
        "openai-chat",
        ("VISUS_OPENAI_COMPATIBLE_API_KEY",),
        ("VISUS_OPENAI_COMPATIBLE_BASE_URL",),
    ),
    ProviderProfile("reference", "openai-chat", (), ("VISUS_REFERENCE_URL",)),
)

#: Every provider's row, by name, in order of preference for the default model.
PROFILES: Mapping[str, ProviderProfile] = MappingProxyType({p.name: p for p in _ROWS})
#: The prefixes a model ref may start with (``openrouter`` is a key, not a prefix).
PROVIDERS = tuple(name for name in PROFILES if name != "openrouter")


def profile(name: str) -> ProviderProfile:
    """The row of provider ``name`` (ConfigError naming the known ones otherwise)."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ConfigError(f"unknown provider {name!r}; known: {', '.join(PROFILES)}") from None


def default_models() -> tuple[tuple[str, str], ...]:
    """``(provider, model ref)`` in order of preference: the first with a key wins.

    Example:
        >>> default_models()[0]
        ('anthropic', 'anthropic:claude-sonnet-5-5')
    """
    return tuple((p.name, p.default_model) for p in _ROWS if p.default_model)


def wire_for_provider(provider: str) -> Wire:
    """The wire a provider speaks by default (its profile row).

    Example:
        >>> wire_for_provider("openai"), wire_for_provider("openai-compatible")
        ('openai-responses', 'openai-chat')
    """
    row = PROFILES.get(provider)
    if row is None:
        raise WireError(f"no default wire for provider {provider!r}")
    return row.default_wire
