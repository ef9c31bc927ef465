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

Everything is a frozen pydantic model; secrets are ``SecretStr`` (their repr never
shows them) and :meth:`VisusConfig.masked` shows them as ``sk-…abcd``. An invalid file
raises :class:`~visus.errors.ConfigError` naming the key and its line.

Example:
    >>> cfg = load_config(env={"OPENAI_API_KEY": "sk-test-0123456789abcd"})
    >>> cfg.default_model, cfg.masked()["providers"]["openai"]["api_key"]
    ('openai:gpt-4.1', 'sk-…abcd')
    >>> load_config(env={}).default_model
    'reference'
"""

from __future__ import annotations

import contextvars
import os
import re
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import platformdirs
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from visus import limits, paths
from visus.errors import ConfigError
from visus.models.spec import ModelSpec, Provider

if TYPE_CHECKING:
    from visus.providers import ProviderSettings as ClientSettings
    from visus.retention import RetentionPolicy

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
    "TelegramSettings",
    "VisionSettings",
    "VisionTarget",
    "VisusConfig",
    "config_path",
    "load_config",
    "mask_secret",
]

#: Environment variable naming the configuration file.
CONFIG_ENV = "VISUS_CONFIG"
#: :attr:`VisusConfig.data_origin` when nothing names the data folder.
DEFAULT_DATA_ORIGIN = "the user's data folder"

#: Standard variables honoured as ambient defaults: name -> path in the config.
_STANDARD_ENV: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("OPENAI_API_KEY", ("providers", "openai", "api_key")),
    ("OPENAI_BASE_URL", ("providers", "openai", "base_url")),
    ("ANTHROPIC_API_KEY", ("providers", "anthropic", "api_key")),
    ("GOOGLE_API_KEY", ("providers", "gemini", "api_key")),
    ("GEMINI_API_KEY", ("providers", "gemini", "api_key")),  # wins over GOOGLE_API_KEY
    ("OPENROUTER_API_KEY", ("providers", "openrouter", "api_key")),
    ("TELEGRAM_BOT_TOKEN", ("telegram", "bot_token")),
)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ProviderEntry(_Frozen):
    """``[providers.<name>]``: credentials and endpoint of one provider."""

    api_key: SecretStr | None = None
    base_url: str | None = None

    def key(self) -> str | None:
        """The API key in clear, for the client that sends it."""
        return self.api_key.get_secret_value() if self.api_key else None


class VisionSettings(_Frozen):
    """``[auxiliary.vision]``: the model vision_analyze uses; unset fields follow the main."""

    model: str | None = None
    provider: str | None = None
    api_key: SecretStr | None = None
    base_url: str | None = None


class AuxiliarySettings(_Frozen):
    vision: VisionSettings = VisionSettings()


class RetentionSettings(_Frozen):
    """``[retention]``: how long pixels stay live (see :mod:`visus.retention`)."""

    live_turns: int = Field(1, ge=1)
    chunk: int = Field(1, ge=1)
    image_token_budget: int | None = Field(None, ge=1)
    #: Turns a pasted image keeps its pixels (then ``view("sha256:...")``); 0: forever.
    attachments_live_turns: int = Field(limits.RETENTION_ATTACHMENTS_LIVE_TURNS, ge=0)
    #: Tool images live at most, however many steps a turn takes; 0: turns alone bound them.
    live_images: int = Field(limits.RETENTION_LIVE_IMAGES, ge=0)
    #: Images that leave together once ``live_images`` is passed (prompt caches).
    image_chunk: int = Field(limits.RETENTION_IMAGE_CHUNK, ge=1)

    @property
    def attachments_window(self) -> int | None:
        """``attachments_live_turns`` as :class:`~visus.retention.RetentionPolicy` takes it."""
        return self.attachments_live_turns or None

    @property
    def images_window(self) -> int | None:
        """``live_images`` as :class:`~visus.retention.RetentionPolicy` takes it."""
        return self.live_images or None

    def policy(self) -> RetentionPolicy:
        """These settings as the policy the agent applies.

        Example:
            >>> RetentionSettings(live_turns=2, live_images=0).policy().live_images is None
            True
        """
        from visus.retention import RetentionPolicy

        return RetentionPolicy(
            live_turns=self.live_turns,
            chunk=self.chunk,
            image_token_budget=self.image_token_budget,
            attachments_live_turns=self.attachments_window,
            live_images=self.images_window,
            image_chunk=self.image_chunk,
        )


class AgentSettings(_Frozen):
    """``[agent]``: the operator's budget for one turn of the agent."""

    #: Model calls one turn may make before it stops and says so (exit 4 in ``visus run``).
    max_steps: int = Field(limits.AGENT_MAX_STEPS, ge=1)


class ReachSettings(_Frozen):
    """``[reach]``: roots the tools may see (empty: the working directory) and rendering."""

    roots: tuple[Path, ...] = ()
    render: bool = True

    @field_validator("roots")
    @classmethod
    def _expand(cls, value: tuple[Path, ...]) -> tuple[Path, ...]:
        return tuple(p.expanduser() for p in value)


class ServerSettings(_Frozen):
    """``[server]``: ``visus serve``'s address, token and boundary (its options override
    these). ``roots``: the folders its agents may reach, at most (a create request only
    narrows them; empty: the data folder's ``files``). ``write_tools``: whether its
    agents get ``edit``. ``fetch_urls``: whether its tools (the agents', ``/mcp``'s, and
    ``visus mcp``'s) fetch https URLs a client names, through the SSRF gate. ``models``:
    the models a client may name besides the server's own (``"*"``: any)."""

    host: str = "127.0.0.1"
    port: int = Field(8750, ge=1, le=65535)
    token: SecretStr | None = None
    roots: tuple[Path, ...] = ()
    write_tools: bool = False
    fetch_urls: bool = True
    models: tuple[str, ...] = ("reference",)

    @field_validator("roots")
    @classmethod
    def _expand(cls, value: tuple[Path, ...]) -> tuple[Path, ...]:
        return tuple(p.expanduser() for p in value)


class ProxySettings(_Frozen):
    """``[proxy]``: what ``visus proxy`` forwards to and how (its options override these)."""

    upstream: str | None = None
    host: str = "127.0.0.1"
    port: int = Field(8790, ge=1, le=65535)
    live_turns: int | None = Field(None, ge=1)
    live_images: int | None = Field(None, ge=1)
    #: Unset: the turn window moves one turn at a time, the image window leaves whole.
    chunk: int | None = Field(None, ge=1)
    token: SecretStr | None = None


class StoreSettings(_Frozen):
    """``[store]``: where ``visus serve`` keeps instances, sessions, blobs and the tether
    ring. Empty: local files under the data folder. ``postgresql://user@host/db``: one
    database several replicas share (``$VISUS_STORE`` sets it too)."""

    url: SecretStr | None = None
    #: Seconds a replica owns a turn without renewing it; after that (it died) another
    #: replica takes the turn over and finishes it.
    lease_seconds: float = Field(15.0, gt=0, le=3600)
    #: Connections in each of a replica's two pools (sync calls, the async ring); with
    #: the one that LISTENs, a replica opens at most ``2 * pool_size + 1``.
    pool_size: int = Field(4, ge=1, le=100)
    #: Turns one replica runs at once (more wait queued in the database for a free one,
    #: on this replica or another).
    max_turns: int = Field(4 * limits.TETHER_MAX_PENDING_TURNS, ge=1, le=10_000)


class McpServerEntry(_Frozen):
    """One ``[[mcp.servers]]`` entry: an MCP server the agent mounts as tools
    ``NAME__TOOL``. Either ``command`` (with ``args``, ``env``: a stdio server) or
    ``url`` (with ``headers``: streamable HTTP)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    #: Seconds one tool call may take before it becomes a tool error.
    timeout_seconds: float = Field(limits.MCP_CLIENT_CALL_SECONDS, gt=0)

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerEntry:
        if (self.command is None) == (self.url is None):
            raise ValueError(f"mcp server {self.name!r}: give exactly one of command or url")
        if "__" in self.name:
            raise ValueError(f"mcp server {self.name!r}: a name may not contain '__'")
        return self


class McpSettings(_Frozen):
    """``[mcp]``: the MCP servers every agent mounts (``[[mcp.servers]]``; a tether
    create request may name some of them, never give a command), whether a create
    request may name an https URL of its own (``allow_client_urls``, off), and whether
    such URLs may name loopback or private addresses (``allow_private_urls``, off: public
    addresses only, so a remote client cannot make this server call its own network)."""

    servers: tuple[McpServerEntry, ...] = ()
    allow_client_urls: bool = False
    allow_private_urls: bool = False

    @model_validator(mode="before")
    @classmethod
    def _removed(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "allow_remote_commands" in data:
            raise ValueError(
                "allow_remote_commands was removed: a create request can no longer start "
                "programs; configure the server as [[mcp.servers]] (or visus serve --mcp) "
                "and have the request name it"
            )
        return data


class TelegramSettings(_Frozen):
    bot_token: SecretStr | None = None
    allowed_chats: tuple[int, ...] = ()
    allowed_users: tuple[int | str, ...] = ()
    server_url: str | None = None
    server_token: SecretStr | None = None


class ModelSettings(_Frozen):
    """``[[models]]``: a model the built-in catalog lacks, or a correction to one.

    An entry named like a catalog model (``claude-opus-4-7``) changes only the fields it
    sets; any other needs ``provider`` and starts from ``ModelSpec``'s defaults (text
    only unless ``vision = true``). ``tokens`` is a token formula table such as
    ``{ kind = "anthropic", native_edge = 2576, native_tokens = 4784 }`` (the kinds and
    their fields are ``catalog.toml``'s).
    """

    name: str = Field(min_length=1)
    provider: Provider | None = None
    vision: bool | None = None
    pdf: bool | None = None
    video: bool | None = None
    images_in_tool_results: bool | None = None
    reasoning: bool | None = None
    max_edge: int | None = Field(None, ge=1)
    max_pixels: int | None = Field(None, ge=1)
    accept_edge: int | None = Field(None, ge=1)
    accept_pixels: int | None = Field(None, ge=1)
    max_image_bytes: int | None = Field(None, ge=1)
    max_images: int | None = Field(None, ge=0)
    media_types: tuple[str, ...] | None = None
    tokens: dict[str, Any] | None = None
    context_tokens: int | None = Field(None, ge=1)
    input_price_per_mtok: float | None = Field(None, ge=0)
    output_price_per_mtok: float | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _builds(self) -> ModelSettings:
        self.to_spec()  # a bad token table or a model without a provider fails at load
        return self

    def to_spec(self) -> ModelSpec:
        """The :class:`ModelSpec` to hand to ``visus.models.register_model``."""
        from visus.errors import InvalidInputError
        from visus.models.catalog import CATALOG, spec_from_fields

        base = CATALOG.get(self.name)
        if base is None and self.provider is None:
            raise ValueError(f"[[models]] {self.name!r} is not in the catalog: give its provider")
        try:
            return spec_from_fields(self.model_dump(exclude_none=True), base=base)
        except InvalidInputError as e:
            raise ValueError(f"[[models]] {self.name!r}: {e}") from e


@dataclass(frozen=True, slots=True)
class VisionTarget:
    """The resolved auxiliary vision model: every field filled from the main config."""

    model: str
    provider: str
    api_key: str | None
    base_url: str | None


@dataclass(frozen=True, slots=True)
class _LoadState:
    file_data: dict[str, Any]
    env: Mapping[str, str]


_state: contextvars.ContextVar[_LoadState] = contextvars.ContextVar("visus_config_load")


class _EnvSource(EnvSettingsSource):
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


class _StandardEnvSource(PydanticBaseSettingsSource):
    """Provider keys and friends from their usual variables, below the file."""

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str]) -> None:
        super().__init__(settings_cls)
        self._env = env

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for var, path in _STANDARD_ENV:
            if self._env.get(var):
                _set_path(out, path, self._env[var])
        if "openrouter" in out.get("providers", {}):
            from visus.providers.profiles import OPENROUTER_BASE_URL

            out["providers"]["openrouter"].setdefault("base_url", OPENROUTER_BASE_URL)
        out["data_dir"] = str(paths.data_dir(self._env.get(paths.DATA_ENV) or None))
        return out


def _set_path(target: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        target = target.setdefault(key, {})
    target[path[-1]] = value


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
        state = _state.get(None) or _LoadState({}, os.environ)
        return (
            init_settings,
            _EnvSource(settings_cls, state.env),
            InitSettingsSource(settings_cls, init_kwargs=state.file_data),
            _StandardEnvSource(settings_cls, state.env),
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
            >>> load_config(env={"VISUS_SERVER__TOKEN": "tok-abcdefghijkl"}).masked()["server"]
            {'host': '127.0.0.1', 'port': 8750, 'token': 'tok…ijkl', 'roots': [], ...}
        """
        result = _plain(self.model_dump())
        assert isinstance(result, dict)
        for server in result["mcp"]["servers"]:
            # A stdio server's env and an HTTP server's headers carry its credentials.
            for field in ("env", "headers"):
                server[field] = {k: _mask_literal(v) for k, v in server[field].items()}
        return result


#: ``${NAME}``: a ``[[mcp.servers]]`` header or env value read from the environment.
_ENV_REFERENCE = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}")


def _mask_literal(value: str) -> str:
    """A header or env value masked, unless it names its secret by ``${NAME}``.

    Example:
        >>> _mask_literal("Bearer ${DOCS_TOKEN}"), _mask_literal("Bearer sk-live-0123456789")
        ('Bearer ${DOCS_TOKEN}', 'Bea…6789')
    """
    return value if _ENV_REFERENCE.search(value) else mask_secret(value)


def _plain(value: Any) -> Any:
    if isinstance(value, SecretStr):
        return mask_secret(value.get_secret_value())
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | frozenset | set):
        items = sorted(value) if isinstance(value, frozenset | set) else value
        return [_plain(v) for v in items]
    if isinstance(value, Path):
        return str(value)
    return value


def mask_secret(secret: str) -> str:
    """Show a secret's kind and tail only: ``sk-…abcd``; short secrets are hidden whole.

    Example:
        >>> mask_secret("sk-proj-0123456789abcd"), mask_secret("short")
        ('sk-…abcd', '****')
    """
    if len(secret) < 12:
        return "****"
    return f"{secret[:3]}…{secret[-4:]}"


# --- finding and reading the file -------------------------------------------------


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
    token = _state.set(_LoadState(data, env))
    try:
        cfg = VisusConfig()
        cfg._model_origin = _model_origin(cfg, data, env, where)
        cfg._data_origin = _data_origin(data, env, where)
        return cfg
    except ValidationError as e:
        raise ConfigError(_describe(e, where, text, env)) from e
    finally:
        _state.reset(token)


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
        standard = [var for var, path in _STANDARD_ENV if path[1:] == (name, "api_key")]
        return next((v for v in (nested, *reversed(standard)) if env.get(v)), nested)
    return "no provider key set"


def model_rule() -> str:
    """The rule that picks the model when ``--model`` is not given, in words: what
    ``--help``, the README and the start-up line say.

    Example:
        >>> model_rule().split("; ")[1]
        'else the first provider key set: ANTHROPIC_API_KEY (anthropic:claude-sonnet-4-6), ...'
    """
    from visus.providers.profiles import default_models

    keys = []
    for name, model in default_models():
        # The last variable of a provider wins (GEMINI_API_KEY over GOOGLE_API_KEY).
        var = [v for v, path in _STANDARD_ENV if path[1:] == (name, "api_key")][-1]
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
        key = _key_on_line(text, line)
        named = f" (key {key})" if key else ""
        raise ConfigError(f"{where} line {line}: invalid TOML{named}: {e}") from e


# --- mapping an error back to its line ----------------------------------------------

_BARE_OR_QUOTED = r'(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|\'[^\']*\')'
_DOTTED = rf"{_BARE_OR_QUOTED}(?:\s*\.\s*{_BARE_OR_QUOTED})*"
_ARRAY_HEADER = re.compile(rf"^\s*\[\[\s*({_DOTTED})\s*\]\]")
_TABLE_HEADER = re.compile(rf"^\s*\[\s*({_DOTTED})\s*\]")
_ASSIGNMENT = re.compile(rf"^\s*({_DOTTED})\s*=")


def _split_key(dotted: str) -> tuple[str, ...]:
    parts = re.findall(_BARE_OR_QUOTED, dotted)
    return tuple(p[1:-1] if p[:1] in "\"'" else p for p in parts)


def _key_lines(text: str) -> Iterator[tuple[tuple[str | int, ...], int]]:
    """Yield (key path, line number) for every table header and assignment."""
    table: tuple[str | int, ...] = ()
    counts: dict[tuple[str, ...], int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if m := _ARRAY_HEADER.match(line):
            name = _split_key(m.group(1))
            counts[name] = counts.get(name, -1) + 1
            table = (*name, counts[name])
            yield table, number
        elif m := _TABLE_HEADER.match(line):
            table = _split_key(m.group(1))
            yield table, number
        elif m := _ASSIGNMENT.match(line):
            yield (*table, *_split_key(m.group(1))), number


def _key_on_line(text: str, line: int) -> str | None:
    found = [key for key, number in _key_lines(text) if number == line]
    return ".".join(map(str, found[-1])) if found else None


def _line_of(text: str, loc: tuple[str | int, ...]) -> tuple[str, int] | None:
    lines = dict(_key_lines(text))
    for end in range(len(loc), 0, -1):
        if loc[:end] in lines:
            return ".".join(map(str, loc[:end])), lines[loc[:end]]
    return None


def _env_name(loc: tuple[str | int, ...], env: Mapping[str, str]) -> str | None:
    for end in range(len(loc), 0, -1):
        wanted = ("VISUS_" + "__".join(map(str, loc[:end]))).upper()
        for name in env:
            if name.upper() == wanted and env[name] != "":
                return name
    return None


def _describe(error: ValidationError, where: Path, text: str, env: Mapping[str, str]) -> str:
    problems: list[str] = []
    for item in error.errors():
        loc = tuple(p for p in item["loc"] if isinstance(p, str | int))
        key = ".".join(map(str, loc)) or "(top level)"
        what = _what(item)
        if env_var := _env_name(loc, env):
            problems.append(f"{env_var}: invalid value for {key}: {what}")
        elif text and (found := _line_of(text, loc)):
            problems.append(f"{where} line {found[1]}: invalid value for {key}: {what}")
        else:
            problems.append(f"invalid value for {key}: {what}")
    return "invalid configuration:\n  " + "\n  ".join(problems)


def _what(item: Mapping[str, Any]) -> str:
    message = str(item.get("msg", "invalid"))
    if item.get("type") == "extra_forbidden":
        return "unknown key"
    value = item.get("input")
    if isinstance(value, str | int | float | bool):
        return f"{message} (got {value!r})"
    return message
