"""The sections of ``visus.toml``, one frozen pydantic model each: ``[providers.*]``,
``[auxiliary.vision]``, ``[retention]``, ``[agent]``, ``[reach]``, ``[server]``,
``[proxy]``, ``[store]``, ``[[mcp.servers]]``, ``[mcp]``, ``[telegram]`` and
``[[models]]``, with what each validates and how a section turns into the value the
library takes (:meth:`RetentionSettings.policy`, :meth:`ModelSettings.to_spec`).

Example:
    >>> RetentionSettings(live_turns=2).policy().live_turns
    2
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from visus import limits
from visus.models.spec import ModelSpec, Provider

if TYPE_CHECKING:
    from visus.retention import RetentionPolicy

__all__ = [
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
]


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
    #: Images that leave together once ``live_images`` is passed (prompt caches); unset:
    #: the whole window but the newest.
    image_chunk: int | None = Field(None, ge=1)
    #: Keep the history append-only (images leave only at a ceiling, in one batch);
    #: unset: the model decides (true for those that bind their reasoning to the prefix).
    append_only: bool | None = None

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
            append_only=self.append_only,
        )


class AgentSettings(_Frozen):
    """``[agent]``: the operator's budget for one turn of the agent."""

    #: Model calls one turn may make before it stops and says so (exit 4 in ``visus run``).
    max_steps: int = Field(limits.AGENT_MAX_STEPS, ge=1)
    #: How hard the model thinks (``low`` .. ``max``; ``visus models --json`` lists each
    #: model's): sent to models that take that level, left out for the others.
    effort: str | None = None


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
