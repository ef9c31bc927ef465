"""From a model ref to a ready client: the provider, its credentials, its catalog entry.

A ref is ``provider:model``, a bare catalog id (the catalog says whose it is), or
``reference`` / ``reference:<wire>`` (the offline reference server). Credentials come
from the :class:`~visus.providers.settings.ProviderSettings` first, then the
environment; a missing one is an :class:`~visus.errors.AuthError` naming the variable.
"""

from __future__ import annotations

import dataclasses
import os
from typing import get_args
from urllib.parse import urlsplit

from visus.errors import AuthError, ConfigError
from visus.models.spec import ModelSpec
from visus.providers.base import ProviderClient, ProviderConfig, Wire
from visus.providers.clients import make_client
from visus.providers.profiles import OPENROUTER_BASE_URL, PROFILES, PROVIDERS, default_models
from visus.providers.settings import ProviderSettings

__all__ = ["default_model", "resolve"]

_WIRES: tuple[str, ...] = get_args(Wire)
# The offline reference model, and its variant that also reads PDFs natively; both are
# addressed as NAME or NAME:<wire>.
_REFERENCE_MODELS = ("reference", "reference-pdf")


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
        return _reference(settings, provider, wire=name)
    return make_client(provider, _config(settings, provider, model_ref)), _spec(provider, name)


def _reference(
    settings: ProviderSettings, model: str, *, wire: str
) -> tuple[ProviderClient, ModelSpec]:
    """The offline reference server speaking ``wire`` (default: the settings' or Chat)."""
    wire = wire or settings.wire or "openai-chat"
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
    spec = _spec(model, model)
    if wire == "gemini":
        # The reference server's Gemini wire is Gemini 2.x for any id but gemini-3-*:
        # images after the function responses, not inside them.
        spec = dataclasses.replace(spec, images_in_tool_results=False)
    return client, spec


def _config(settings: ProviderSettings, provider: str, model_ref: str) -> ProviderConfig:
    """The transport config of a real provider: its URL and its credentials."""
    cfg = settings.config(base_url=settings.url(provider))
    row = PROFILES[provider]
    if row.key_required:
        key = settings.key(provider)
        if not key:
            raise _missing_key(provider, model_ref)
        return dataclasses.replace(cfg, api_key=key)
    if provider == "ollama":
        return dataclasses.replace(
            cfg, api_key=settings.key("ollama"), base_url=cfg.base_url or row.default_url
        )
    if provider == "bedrock":
        return _bedrock_config(settings, cfg, model_ref)
    return _compatible_config(settings, cfg, model_ref)  # openai-compatible


def _missing_key(provider: str, ref: str) -> AuthError:
    names = " or ".join(PROFILES[provider].key_env)
    return AuthError(
        f"{ref} needs an API key: set {names}, or api_key under [providers.{provider}] "
        "in visus.toml (--model reference runs the offline model)",
        provider=provider,
    )


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
