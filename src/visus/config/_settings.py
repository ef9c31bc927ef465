"""The resolved configuration, :class:`VisusConfig`: the sections, the layers they are
read from, and what the library asks of them (a provider's key and URL, the settings a
client is built with, the auxiliary vision model, ``[[models]]`` registered, every
secret masked).

Example:
    >>> from visus.config import load_config
    >>> load_config(env={"VISUS_RETENTION__LIVE_TURNS": "2"}).retention.live_turns
    2
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field, PrivateAttr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from visus import paths
from visus.config._masking import mask_literal, plain
from visus.config._sections import (
    AgentSettings,
    AuxiliarySettings,
    McpSettings,
    ModelSettings,
    ProviderEntry,
    ProxySettings,
    ReachSettings,
    RetentionSettings,
    ServerSettings,
    StoreSettings,
    TelegramSettings,
    VisionTarget,
)
from visus.config._sources import (
    DEFAULT_DATA_ORIGIN,
    EnvSource,
    LoadState,
    StandardEnvSource,
    load_state,
)
from visus.models.spec import ModelSpec

if TYPE_CHECKING:
    from visus.providers import ProviderSettings as ClientSettings

__all__ = ["VisusConfig"]


class VisusConfig(BaseSettings):
    """The resolved configuration. Build it with :func:`load_config`."""

    model_config = SettingsConfigDict(
        env_prefix="VISUS_",
        env_nested_delimiter="__",
        env_ignore_empty=True,
        frozen=True,
        extra="forbid",
    )

    default_model: str = "reference"
    providers: dict[str, ProviderEntry] = Field(default_factory=dict)
    auxiliary: AuxiliarySettings = AuxiliarySettings()
    data_dir: Path = Field(default_factory=lambda: paths.data_dir())
    retention: RetentionSettings = RetentionSettings()
    agent: AgentSettings = AgentSettings()
    reach: ReachSettings = ReachSettings()
    server: ServerSettings = ServerSettings()
    store: StoreSettings = StoreSettings()
    proxy: ProxySettings = ProxySettings()
    mcp: McpSettings = McpSettings()
    telegram: TelegramSettings = TelegramSettings()
    models: tuple[ModelSettings, ...] = ()
    #: Where ``default_model`` came from, in words (set by :func:`load_config`).
    _model_origin: str = PrivateAttr(default="")
    #: Where ``data_dir`` came from, in words (set by :func:`load_config`).
    _data_origin: str = PrivateAttr(default="")

    @property
    def data_origin(self) -> str:
        """Where :attr:`data_dir` came from: ``VISUS_DATA``, ``data_dir in
        /path/visus.toml``, ``VISUS_DATA_DIR`` or ``the user's data folder`` (the default
        of every command alike).

        Example:
            >>> from visus.config import load_config
            >>> load_config(env={"VISUS_DATA": "/tmp/d"}).data_origin
            'VISUS_DATA'
            >>> load_config(env={}).data_origin
            "the user's data folder"
        """
        return self._data_origin or DEFAULT_DATA_ORIGIN

    @property
    def model_origin(self) -> str:
        """Where :attr:`default_model` came from: ``OPENAI_API_KEY``, ``default_model in
        /path/visus.toml``, ``no provider key set``...

        Example:
            >>> from visus.config import load_config
            >>> load_config(env={"ANTHROPIC_API_KEY": "sk-ant-0123456789abcd"}).model_origin
            'ANTHROPIC_API_KEY'
            >>> load_config(env={}).model_origin
            'no provider key set'
        """
        return self._model_origin or "the defaults"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        state = load_state.get(None) or LoadState({}, os.environ)
        return (
            init_settings,
            EnvSource(settings_cls, state.env),
            InitSettingsSource(settings_cls, init_kwargs=state.file_data),
            StandardEnvSource(settings_cls, state.env),
        )

    @field_validator("data_dir")
    @classmethod
    def _expand_data_dir(cls, value: Path) -> Path:
        return value.expanduser()

    @model_validator(mode="before")
    @classmethod
    def _pick_default_model(cls, data: Any) -> Any:
        if isinstance(data, dict) and not data.get("default_model"):
            providers = data.get("providers") or {}
            from visus.providers.profiles import default_models

            for name, model in default_models():
                entry = providers.get(name)
                if isinstance(entry, Mapping) and entry.get("api_key"):
                    return {**data, "default_model": model}
        return data

    def provider(self, name: str) -> ProviderEntry:
        """Settings for a provider named as in a model reference (``openai``, ``gemini``).

        ``openai-compatible`` falls back to ``[providers.openrouter]`` when no
        ``[providers.openai-compatible]`` table exists.

        Example:
            >>> from visus.config import load_config
            >>> cfg = load_config(env={"OPENROUTER_API_KEY": "or-key-0123456789"})
            >>> cfg.provider("openai-compatible").base_url
            'https://openrouter.ai/api/v1'
        """
        if name in self.providers:
            return self.providers[name]
        if name == "openai-compatible" and "openrouter" in self.providers:
            return self.providers["openrouter"]
        return ProviderEntry()

    def provider_settings(self, **knobs: Any) -> ClientSettings:
        """The keys and base URLs as :class:`visus.providers.ProviderSettings` for
        ``visus.providers.resolve``; ``knobs`` are its other fields (``timeout``...).

        Example:
            >>> from visus.config import load_config
            >>> cfg = load_config(env={"ANTHROPIC_API_KEY": "sk-ant-0123456789"})
            >>> cfg.provider_settings().key("anthropic")
            'sk-ant-0123456789'
        """
        from visus.providers import ProviderSettings

        keys = {name: p.key() for name, p in self.providers.items()}
        urls = {name: p.base_url for name, p in self.providers.items()}
        return ProviderSettings(
            api_keys={k: v for k, v in keys.items() if v},
            base_urls={k: v for k, v in urls.items() if v},
            **knobs,
        )

    def register_models(self) -> None:
        """Register every ``[[models]]`` entry with ``visus.models.register_model``."""
        from visus.models.registry import register_model

        for spec in self.model_specs():
            register_model(spec)

    def vision_target(self) -> VisionTarget:
        """The auxiliary vision model with its provider, key and base URL resolved.

        Unset ``auxiliary.vision`` fields default to the main model and its provider.
        """
        from visus.models.registry import parse_model_ref

        aux = self.auxiliary.vision
        model = aux.model or self.default_model
        provider = aux.provider or parse_model_ref(model)[0]
        main = self.provider(provider)
        key = aux.api_key or main.api_key
        return VisionTarget(
            model=model,
            provider=provider,
            api_key=key.get_secret_value() if key else None,
            base_url=aux.base_url or main.base_url,
        )

    def model_specs(self) -> list[ModelSpec]:
        """The ``[[models]]`` entries as specs, for ``visus.models.register_model``."""
        return [m.to_spec() for m in self.models]

    def masked(self) -> dict[str, Any]:
        """The configuration as plain JSON-able data with every secret masked.

        Example:
            >>> from visus.config import load_config
            >>> load_config(env={"VISUS_SERVER__TOKEN": "tok-abcdefghijkl"}).masked()["server"]
            {'host': '127.0.0.1', 'port': 8750, 'token': 'tok…ijkl', 'roots': [], ...}
        """
        result = plain(self.model_dump())
        assert isinstance(result, dict)
        for server in result["mcp"]["servers"]:
            # A stdio server's env and an HTTP server's headers carry its credentials.
            for field in ("env", "headers"):
                server[field] = {k: mask_literal(v) for k, v in server[field].items()}
        return result
