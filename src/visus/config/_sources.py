"""Where the configuration's layers come from besides the file: the standard variables
(``OPENAI_API_KEY``, ``VISUS_DATA``...), honoured below the file as ambient defaults,
and ``VISUS_*`` variables (nested with ``__``) above it, both read from a given mapping
so tests and embedders need not touch ``os.environ``. :func:`visus.config.load_config`
sets :data:`load_state` for the one build of :class:`~visus.config.VisusConfig` it
makes.

Example:
    >>> dict(STANDARD_ENV)["GEMINI_API_KEY"]
    ('providers', 'gemini', 'api_key')
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource

from visus import paths

__all__ = [
    "DEFAULT_DATA_ORIGIN",
    "STANDARD_ENV",
    "EnvSource",
    "LoadState",
    "StandardEnvSource",
    "load_state",
]

#: :attr:`VisusConfig.data_origin` when nothing names the data folder.
DEFAULT_DATA_ORIGIN = "the user's data folder"
#: Standard variables honoured as ambient defaults: name -> path in the config.
STANDARD_ENV: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("OPENAI_API_KEY", ("providers", "openai", "api_key")),
    ("OPENAI_BASE_URL", ("providers", "openai", "base_url")),
    ("ANTHROPIC_API_KEY", ("providers", "anthropic", "api_key")),
    ("GOOGLE_API_KEY", ("providers", "gemini", "api_key")),
    ("GEMINI_API_KEY", ("providers", "gemini", "api_key")),  # wins over GOOGLE_API_KEY
    ("OPENROUTER_API_KEY", ("providers", "openrouter", "api_key")),
    ("TELEGRAM_BOT_TOKEN", ("telegram", "bot_token")),
)


@dataclass(frozen=True, slots=True)
class LoadState:
    """The file's values and the environment one build of the configuration reads."""

    file_data: dict[str, Any]
    env: Mapping[str, str]


load_state: contextvars.ContextVar[LoadState] = contextvars.ContextVar("visus_config_load")


class EnvSource(EnvSettingsSource):
    """``VISUS_*`` variables read from a given mapping instead of ``os.environ``."""

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str]) -> None:
        self._mapping = env
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        # VISUS_STORE names the store's URL (the short form of VISUS_STORE__URL).
        return {
            ("visus_store__url" if k.lower() == "visus_store" else k.lower()): v
            for k, v in self._mapping.items()
            if v != ""
        }


class StandardEnvSource(PydanticBaseSettingsSource):
    """Provider keys and friends from their usual variables, below the file."""

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str]) -> None:
        super().__init__(settings_cls)
        self._env = env

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for var, path in STANDARD_ENV:
            if self._env.get(var):
                set_path(out, path, self._env[var])
        if "openrouter" in out.get("providers", {}):
            from visus.providers.profiles import OPENROUTER_BASE_URL

            out["providers"]["openrouter"].setdefault("base_url", OPENROUTER_BASE_URL)
        out["data_dir"] = str(paths.data_dir(self._env.get(paths.DATA_ENV) or None))
        return out


def set_path(target: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        target = target.setdefault(key, {})
    target[path[-1]] = value
