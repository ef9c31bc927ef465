"""Configuration: one ``visus.toml``, overridable by ``VISUS_*`` environment variables.

The file is found from an explicit path (``--config``), else ``$VISUS_CONFIG``, else
``visus.toml`` in the user's config dir (platformdirs); a missing default file just
means defaults. Values are layered, lowest first:

1. defaults (``default_model`` is ``reference`` when no provider key is set, else a
   sensible model of the first provider with a key: anthropic, openai, gemini,
   openrouter);
2. the standard variables ``OPENAI_API_KEY``, ``OPENAI_BASE_URL``,
   ``ANTHROPIC_API_KEY``, ``GEMINI_API_KEY`` / ``GOOGLE_API_KEY``,
   ``OPENROUTER_API_KEY``, ``TELEGRAM_BOT_TOKEN`` and ``VISUS_DATA`` (ambient
   defaults: a key written in the file wins over one lying around in the shell);
3. the file;
4. ``VISUS_*`` variables, nested with ``__``: ``VISUS_SERVER__PORT=9000``,
   ``VISUS_AUXILIARY__VISION__MODEL=gpt-4.1``.

The package's modules, each one job: ``_sections`` (one model per section of the file),
``_settings`` (:class:`VisusConfig`, the whole), ``_sources`` (the environment's
layers), ``_loading`` (finding and reading the file), ``_problems`` (an error said with
its line, a misspelt key with the one meant), ``_masking`` (secrets shown as a tail).

Everything is a frozen pydantic model; secrets are ``SecretStr`` (their repr never
shows them) and :meth:`VisusConfig.masked` shows them as ``sk-…abcd``. An invalid file
raises :class:`~visus.errors.ConfigError` naming the key and its line.

Example:
    >>> cfg = load_config(env={"OPENAI_API_KEY": "sk-test-0123456789abcd"})
    >>> cfg.default_model, cfg.masked()["providers"]["openai"]["api_key"]
    ('openai:gpt-6.1-sol', 'sk-…abcd')
    >>> load_config(env={}).default_model
    'reference'
"""

from __future__ import annotations

from visus.config._loading import CONFIG_ENV, config_path, load_config, model_rule
from visus.config._masking import mask_secret
from visus.config._sections import (
    AgentSettings,
    AuxiliarySettings,
    McpServerEntry,
    McpSettings,
    ModelSettings,
    ProviderEntry,
    ProxySettings,
    ReachSettings,
    RetentionSettings,
    ServerSettings,
    StoreSettings,
    TelegramSettings,
    VisionSettings,
    VisionTarget,
)
from visus.config._settings import VisusConfig
from visus.config._sources import DEFAULT_DATA_ORIGIN

__all__ = [
    "CONFIG_ENV",
    "DEFAULT_DATA_ORIGIN",
    "AgentSettings",
    "AuxiliarySettings",
    "McpServerEntry",
    "McpSettings",
    "ModelSettings",
    "ProviderEntry",
    "ProxySettings",
    "ReachSettings",
    "RetentionSettings",
    "ServerSettings",
    "StoreSettings",
    "TelegramSettings",
    "VisionSettings",
    "VisionTarget",
    "VisusConfig",
    "config_path",
    "load_config",
    "mask_secret",
    "model_rule",
]
