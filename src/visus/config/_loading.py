"""Finding ``visus.toml``, reading it and building :class:`~visus.config.VisusConfig`
from it and the environment, with where the model and the data folder came from.

Example:
    >>> config_path(env={"VISUS_CONFIG": "/etc/visus.toml"})
    PosixPath('/etc/visus.toml')
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import platformdirs
from pydantic import ValidationError

from visus import paths
from visus.config._problems import describe, key_on_line
from visus.config._settings import VisusConfig
from visus.config._sources import DEFAULT_DATA_ORIGIN, STANDARD_ENV, LoadState, load_state
from visus.errors import ConfigError

__all__ = ["CONFIG_ENV", "config_path", "load_config", "model_rule"]

#: Environment variable naming the configuration file.
CONFIG_ENV = "VISUS_CONFIG"


def config_path(path: Path | str | None = None, *, env: Mapping[str, str] | None = None) -> Path:
    """Where the configuration file is: ``path`` > ``$VISUS_CONFIG`` > user config dir.

    Example:
        >>> config_path(env={"VISUS_CONFIG": "/etc/visus.toml"})
        PosixPath('/etc/visus.toml')
    """
    env = os.environ if env is None else env
    if path is not None and str(path) != "":
        return Path(path).expanduser()
    if env.get(CONFIG_ENV):
        return Path(env[CONFIG_ENV]).expanduser()
    return Path(platformdirs.user_config_dir("visus", appauthor=False)) / "visus.toml"


def load_config(
    path: Path | str | None = None, *, env: Mapping[str, str] | None = None
) -> VisusConfig:
    """Read and validate the configuration (see the module docstring for the layers).

    ``env`` replaces ``os.environ`` (tests, embedding). A file named explicitly or by
    ``$VISUS_CONFIG`` must exist (``/dev/null`` names an empty one); the default one
    may be missing.

    Example:
        >>> load_config(env={"VISUS_RETENTION__LIVE_TURNS": "2"}).retention.live_turns
        2
    """
    env = dict(os.environ) if env is None else env
    explicit = (path is not None and str(path) != "") or bool(env.get(CONFIG_ENV))
    where = config_path(path, env=env)
    text = ""
    data: dict[str, Any] = {}
    # /dev/null is the conventional "no configuration" (VISUS_CONFIG=/dev/null): it
    # exists but is not a regular file, and reads as an empty one.
    if where.is_file() or (explicit and str(where) == os.devnull):
        try:
            text = where.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"{where}: cannot read the configuration file: {e}") from e
        data = _parse_toml(where, text)
    elif explicit:
        raise ConfigError(f"{where}: configuration file not found")
    token = load_state.set(LoadState(data, env))
    try:
        cfg = VisusConfig()
        cfg._model_origin = _model_origin(cfg, data, env, where)
        cfg._data_origin = _data_origin(data, env, where)
        return cfg
    except ValidationError as e:
        raise ConfigError(describe(e, where, text, env, VisusConfig)) from e
    finally:
        load_state.reset(token)


def _data_origin(file_data: Mapping[str, Any], env: Mapping[str, str], where: Path) -> str:
    """Which layer chose ``data_dir`` (the same order as :class:`VisusConfig`'s sources)."""
    nested = next((k for k, v in env.items() if k.upper() == "VISUS_DATA_DIR" and v), None)
    if nested:
        return nested
    if file_data.get("data_dir"):
        return f"data_dir in {where}"
    if env.get(paths.DATA_ENV):
        return paths.DATA_ENV
    return DEFAULT_DATA_ORIGIN


def _model_origin(
    cfg: VisusConfig, file_data: Mapping[str, Any], env: Mapping[str, str], where: Path
) -> str:
    """Which layer chose ``cfg.default_model`` (see :func:`model_rule`)."""
    if env.get("VISUS_DEFAULT_MODEL"):
        return "VISUS_DEFAULT_MODEL"
    if file_data.get("default_model"):
        return f"default_model in {where}"
    from visus.providers.profiles import default_models

    for name, model in default_models():
        if model != cfg.default_model or not cfg.provider(name).api_key:
            continue
        file_key = (file_data.get("providers") or {}).get(name) or {}
        if isinstance(file_key, Mapping) and file_key.get("api_key"):
            return f"[providers.{name}] api_key in {where}"
        nested = f"VISUS_PROVIDERS__{name.upper()}__API_KEY"
        standard = [var for var, path in STANDARD_ENV if path[1:] == (name, "api_key")]
        return next((v for v in (nested, *reversed(standard)) if env.get(v)), nested)
    return "no provider key set"


def model_rule() -> str:
    """The rule that picks the model when ``--model`` is not given, in words: what
    ``--help``, the README and the start-up line say.

    Example:
        >>> model_rule().split("; ")[1]
        'else the first provider key set: ANTHROPIC_API_KEY (anthropic:claude-sonnet-5-5), ...'
    """
    from visus.providers.profiles import default_models

    keys = []
    for name, model in default_models():
        # The last variable of a provider wins (GEMINI_API_KEY over GOOGLE_API_KEY).
        var = [v for v, path in STANDARD_ENV if path[1:] == (name, "api_key")][-1]
        keys.append(f"{var} ({model})")
    return (
        "default_model in visus.toml (or VISUS_DEFAULT_MODEL); else the first provider key "
        f"set: {', '.join(keys)}; else reference, the offline model"
    )


def _parse_toml(where: Path, text: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        match = re.search(r"line (\d+)", str(e))
        if not match:
            raise ConfigError(f"{where}: invalid TOML: {e}") from e
        line = int(match.group(1))
        key = key_on_line(text, line)
        named = f" (key {key})" if key else ""
        raise ConfigError(f"{where} line {line}: invalid TOML{named}: {e}") from e
