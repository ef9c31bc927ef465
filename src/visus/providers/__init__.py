"""Provider clients: a model reference in, a client and its catalog entry out.

Refs are ``provider:model``: ``openai:gpt-4.1``, ``anthropic:claude-sonnet-4-6``,
``gemini:gemini-2.5-flash``, ``ollama:llama3.2-vision``, ``bedrock:<model id>``,
``openai-compatible:<model>`` (with a base URL: OpenRouter, vLLM, LM Studio, Ollama's
``/v1``), and ``reference`` or ``reference:<wire>`` (the offline reference server at
``VISUS_REFERENCE_URL``). Keys come from explicit :class:`ProviderSettings` first,
then the providers' usual environment variables. Each SDK is imported only by its
own module, and only when a ref needs it.

Example:
    >>> client, spec = resolve("reference", config=ProviderSettings(
    ...     reference_url="http://127.0.0.1:8760"))  # doctest: +SKIP
    >>> reply = await client.complete(request, model=spec, blobs=store)  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import get_args
from urllib.parse import urlsplit

from visus import limits
from visus.errors import AuthError, ConfigError, WireError
from visus.models.spec import ModelSpec
from visus.providers.base import (
    BlobReader,
    OnDelta,
    ProviderClient,
    ProviderConfig,
    Wire,
    aclose,
)
from visus.providers.profiles import (
    OPENROUTER_BASE_URL,
    PROFILES,
    ProviderProfile,
    default_models,
)

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
    "make_client",
    "resolve",
    "wire_for_provider",
]

#: The prefixes a model ref may start with (``openrouter`` is a key, not a prefix).
PROVIDERS = tuple(name for name in PROFILES if name != "openrouter")
_WIRES: tuple[str, ...] = get_args(Wire)
# The offline reference model, and its variant that also reads PDFs natively; both are
# addressed as NAME or NAME:<wire>.
_REFERENCE_MODELS = ("reference", "reference-pdf")


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


def _missing_key(provider: str, ref: str) -> AuthError:
    names = " or ".join(PROFILES[provider].key_env)
    return AuthError(
        f"{ref} needs an API key: set {names} (or give it in the provider settings)",
        provider=provider,
    )


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


def _split(ref: str) -> tuple[str, str]:
    provider, sep, name = ref.strip().partition(":")
    if provider in _REFERENCE_MODELS:
        return provider, name
    if sep and provider in PROVIDERS:
        if not name:
            raise ConfigError(f"model ref {ref!r} names no model after {provider}:")
        return provider, name
    # A bare catalog id ("gpt-4.1"): let the catalog say whose it is.
    from visus.models import parse_model_ref

    try:
        provider, name = parse_model_ref(ref)
    except Exception as e:
        raise ConfigError(
            f"cannot tell the provider of {ref!r}; write it as provider:model "
            f"({', '.join(PROVIDERS)})"
        ) from e
    if provider not in PROVIDERS:
        raise ConfigError(f"model ref {ref!r}: unknown provider {provider!r}")
    return provider, name


def _spec(provider: str, name: str) -> ModelSpec:
    from visus.models import get_model

    reference = provider in _REFERENCE_MODELS
    spec = get_model(provider if reference else f"{provider}:{name}")
    # The id sent to the provider is the one the user wrote, whatever the catalog calls it.
    wanted = provider if reference else name
    return spec if spec.name == wanted else dataclasses.replace(spec, name=wanted)


def resolve(
    model_ref: str, *, config: ProviderSettings | None = None
) -> tuple[ProviderClient, ModelSpec]:
    """A ready client and the model's catalog entry for ``model_ref``.

    Raises :class:`~visus.errors.AuthError` (naming the env var) when the provider's
    key is missing and :class:`~visus.errors.ConfigError` for a malformed ref or a
    missing base URL.

    Example:
        >>> client, spec = resolve("openai:gpt-4.1",
        ...                        config=ProviderSettings(api_keys={"openai": "sk-x"}))
        >>> client.wire, spec.name
        ('openai-responses', 'gpt-4.1')
    """
    settings = config or ProviderSettings()
    provider, name = _split(model_ref)

    if provider in _REFERENCE_MODELS:
        wire = name or settings.wire or "openai-chat"
        if wire not in _WIRES:
            raise ConfigError(f"reference speaks {', '.join(_WIRES)}; not {wire!r}")
        url = settings.url("reference")
        if not url:
            raise ConfigError(
                "the reference model needs its server's URL: set VISUS_REFERENCE_URL "
                "(start one with `visus reference serve`)"
            )
        url = url.rstrip("/")
        cfg = settings.config(api_key="reference", base_url=url, wire=None)
        if wire.startswith("openai"):
            cfg = dataclasses.replace(cfg, base_url=f"{url}/v1")
        elif wire == "bedrock":
            cfg = dataclasses.replace(
                cfg, aws_secret_access_key="reference", region=cfg.region or "us-east-1"
            )
        client = make_client(wire, cfg, label="reference")
        spec = _spec(provider, provider)
        if wire == "gemini":
            # The reference server's Gemini wire is Gemini 2.x for any id but gemini-3-*:
            # images after the function responses, not inside them.
            spec = dataclasses.replace(spec, images_in_tool_results=False)
        return client, spec

    cfg = settings.config(base_url=settings.url(provider))
    row = PROFILES[provider]
    if row.key_required:
        key = settings.key(provider)
        if not key:
            raise _missing_key(provider, model_ref)
        cfg = dataclasses.replace(cfg, api_key=key)
    elif provider == "ollama":
        cfg = dataclasses.replace(
            cfg, api_key=settings.key("ollama"), base_url=cfg.base_url or row.default_url
        )
    elif provider == "bedrock":
        cfg = _bedrock_config(settings, cfg, model_ref)
    else:  # openai-compatible
        cfg = _compatible_config(settings, cfg, model_ref)
    return make_client(provider, cfg), _spec(provider, name)


def _compatible_config(
    settings: ProviderSettings, cfg: ProviderConfig, model_ref: str
) -> ProviderConfig:
    url = cfg.base_url
    if not url and settings.key("openrouter"):
        url = PROFILES["openrouter"].default_url
    if not url:
        needs = (
            f"{model_ref} needs a base URL: set VISUS_OPENAI_COMPATIBLE_BASE_URL "
            "(or base_urls['openai-compatible']), or OPENROUTER_API_KEY for OpenRouter"
        )
        if not model_ref.strip().startswith("openai-compatible:"):
            # A bare id no catalog knows lands here; most often it is a typo.
            needs = (
                f"visus does not know the model {model_ref!r}; write provider:model "
                "(e.g. openai:gpt-4.1, anthropic:claude-sonnet-4-6, reference). "
                f"Served by an OpenAI-compatible server, {needs}"
            )
        raise ConfigError(needs)
    openrouter = urlsplit(OPENROUTER_BASE_URL).hostname or "openrouter.ai"
    if (urlsplit(url).hostname or "").endswith(openrouter):
        key = settings.api_keys.get("openai-compatible") or settings.key("openrouter")
        if not key:
            raise _missing_key("openrouter", model_ref)
    else:
        # Local servers (vLLM, LM Studio, Ollama /v1) usually take any key.
        key = settings.key("openai-compatible")
    return dataclasses.replace(cfg, base_url=url, api_key=key)


def _bedrock_config(
    settings: ProviderSettings, cfg: ProviderConfig, model_ref: str
) -> ProviderConfig:
    env = settings.env if settings.env is not None else os.environ
    region = settings.region or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    access = settings.api_keys.get("bedrock")
    secret: str | None
    token: str | None
    if access:
        if not settings.aws_secret_access_key:
            raise AuthError(
                f"{model_ref}: an AWS access key id was given without its secret key",
                provider="bedrock",
            )
        secret, token = settings.aws_secret_access_key, settings.aws_session_token
    elif env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        access, secret = env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]
        token = env.get("AWS_SESSION_TOKEN")
    elif not (
        env.get("AWS_PROFILE")
        or env.get("AWS_WEB_IDENTITY_TOKEN_FILE")
        or env.get("AWS_CONTAINER_CREDENTIALS_FULL_URI")
        or env.get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
    ):
        raise AuthError(
            f"{model_ref} needs AWS credentials: set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)",
            provider="bedrock",
        )
    else:
        secret = token = None  # boto3's own chain: profile, web identity, container role
    if not region:
        raise ConfigError(f"{model_ref} needs a region: set AWS_REGION")
    return dataclasses.replace(
        cfg,
        api_key=access,
        aws_secret_access_key=secret,
        aws_session_token=token,
        region=region,
    )


def default_model(config: ProviderSettings | None = None) -> str:
    """The model to use when none is named: the first provider with a key, else ``reference``.

    Example:
        >>> default_model(ProviderSettings(env={}))
        'reference'
    """
    settings = config or ProviderSettings()
    for provider, ref in default_models():
        if settings.key(provider):
            return ref
    return "reference"
