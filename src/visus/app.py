"""The main job, composed: the tether API, the MCP endpoint and the web chat, each
instance answered by a real :class:`~visus.agent.Agent`.

This module holds no logic of its own beyond wiring: :class:`AgentRunner` adapts
the agent to tether's :class:`~visus.tether.runner.TurnRunner` seam,
:func:`full_registry` gathers every built-in tool (the agent's own, the attachment
tools and ``analyze``'s, which sit above the agent) and :func:`create_main_app` builds
the one FastAPI app ``visus serve`` runs.

Example:
    >>> # app = create_main_app(data=Path(".visus-data"))
    >>> # uvicorn.run(app, host="127.0.0.1", port=8750)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from visus.agent import PastedImage, ToolRegistry, build_agent
from visus.agent.extra_tools import AttachmentsFor, attachment_tools
from visus.agent.mcp_client import McpServerSpec
from visus.attachments import AttachmentStore, SessionAttachments
from visus.config import load_config
from visus.errors import ConfigError
from visus.paths import data_dir
from visus.providers import ProviderSettings
from visus.retention import RetentionPolicy
from visus.store import Store, is_database_url, open_store
from visus.tether.runner import (
    MCP_SERVERS_KEY,
    ImageIn,
    InstanceConfig,
    RunnerFactory,
    TurnOutput,
)
from visus.tether.server import create_app

__all__ = [
    "DEFAULT_INSTANCE_ID",
    "DEFAULT_INSTANCE_KEY",
    "AgentRunner",
    "agent_runner_factory",
    "create_main_app",
    "default_instance",
    "full_registry",
]

#: ``extra`` key marking the instance ``visus serve`` creates for its web chat.
DEFAULT_INSTANCE_KEY = "default"
# The web chat's instance has a fixed id, so replicas of ``visus serve`` that start at
# the same moment on one database create one instance between them, not one each.
DEFAULT_INSTANCE_ID = "i-webchat"


def full_registry(data: Path | str | AttachmentsFor) -> ToolRegistry:
    """Every built-in tool: read, view, edit, send_image, the attachment tools (over
    the sessions under the folder ``data``, or ``data(session_id)``),
    vision_analyze and video_analyze.

    Example:
        >>> "vision_analyze" in full_registry("/tmp/visus-data").names()
        True
    """
    from visus.analyze.tool import VIDEO_ANALYZE, VISION_ANALYZE

    registry = ToolRegistry.builtin()
    for tool in [*attachment_tools(data), VISION_ANALYZE, VIDEO_ANALYZE]:
        registry.add(tool)
    return registry


class AgentRunner:
    """One tether instance's agent: its sessions, their attachments and blobs live in
    the instance folder, or in ``store`` (namespace ``instances/<id>``) when given."""

    def __init__(
        self,
        config: InstanceConfig,
        *,
        settings: ProviderSettings | None = None,
        policy: RetentionPolicy | None = None,
        mcp_servers: Sequence[McpServerSpec] = (),
        store: Store | None = None,
    ) -> None:
        folder = Path(config.data_dir)
        self._folder = folder
        self._store = store
        self._namespace = f"instances/{config.id}"
        roots: list[Path | str] = list(config.roots)
        #: The instance's own files folder when no roots were given; created on the
        #: first turn, because the registry creates the instance folder only after
        #: building this runner. Roots a client names are never created.
        self.files: Path | None = None
        if not roots:
            self.files = folder / "files"
            roots = [self.files]
        registry: ToolRegistry = full_registry(self.attachments)
        if config.tools is not None:
            unknown = sorted(set(config.tools) - set(registry.names()))
            if unknown:
                # An unknown name would silently leave the agent without that tool.
                raise ConfigError(
                    f"tools: no tool named {', '.join(map(repr, unknown))}; "
                    f"the tools are {', '.join(registry.names())}"
                )
            registry = registry.only(config.tools)
        self.config = config
        # The instance's sessions and blobs: in its folder, or in the shared store.
        ns = self._namespace
        self.agent = build_agent(
            config.model,
            data=folder,
            roots=roots,
            settings=settings,
            policy=policy,
            tools=registry,
            mcp_servers=[*mcp_servers, *_requested_mcp(config)],
            sessions=None if store is None else store.sessions(ns),
            blobs=None if store is None else store.blobs(ns),
        )

    def attachments(self, session_id: str) -> SessionAttachments:
        """Session ``session_id``'s attachments, where the agent's tools read them: the
        store's (on PostgreSQL every replica's turn sees an upload any replica took),
        else ``<instance folder>/sessions/<id>/attachments``. The web API uploads here.
        """
        if self._store is not None:
            return self._store.attachments(self._namespace, session_id)
        return AttachmentStore.for_session(self._folder, session_id)

    async def run_turn(
        self,
        *,
        session: str,
        text: str,
        images: Sequence[ImageIn],
        user: Mapping[str, Any] | None,
        emit_delta: Callable[[str], Awaitable[None]],
    ) -> TurnOutput:
        del user  # who spoke is in the frame; the agent answers the session either way
        if self.files is not None:
            self.files.mkdir(parents=True, exist_ok=True)
        pasted = [PastedImage(i.data, i.media_type) for i in images]
        result = await self.agent.run_turn(session, text, pasted, on_delta=emit_delta)
        out = tuple(ImageIn(o.media_type, o.data) for o in result.images)
        return TurnOutput(text=result.answer, images=out, stop_reason=result.stop_reason)

    async def aclose(self) -> None:
        await self.agent.aclose()


def _requested_mcp(config: InstanceConfig) -> list[McpServerSpec]:
    """The MCP servers a create request asked for; stdio commands only when the server's
    ``[mcp] allow_remote_commands`` says a tether client may start programs here, and
    URLs to loopback or private addresses only with ``[mcp] allow_private_urls``."""
    asked = config.extra.get(MCP_SERVERS_KEY) or []
    specs: list[McpServerSpec] = []
    mcp = load_config().mcp if asked else None
    for entry in asked:
        assert mcp is not None
        if entry.get("command") is not None and not mcp.allow_remote_commands:
            raise ConfigError(
                f"mcp_servers: {entry.get('name')!r} is a stdio command; this server lets "
                "create requests start programs only with [mcp] allow_remote_commands = true "
                "(a url works)"
            )
        specs.append(
            McpServerSpec(
                name=str(entry.get("name")),
                command=entry.get("command"),
                args=tuple(entry.get("args") or ()),
                env=dict(entry.get("env") or {}),
                url=entry.get("url"),
                headers=dict(entry.get("headers") or {}),
                public_only=not mcp.allow_private_urls,
            )
        )
    return specs


def agent_runner_factory(
    *,
    settings: ProviderSettings | None = None,
    policy: RetentionPolicy | None = None,
    mcp_servers: Sequence[McpServerSpec] = (),
    store: Store | None = None,
) -> RunnerFactory:
    """A tether :data:`RunnerFactory` building an :class:`AgentRunner` per instance;
    every instance mounts ``mcp_servers`` (``visus serve --mcp``) and the ones its
    create request names; its sessions and blobs live in ``store`` when one is given."""

    def factory(config: InstanceConfig) -> AgentRunner:
        return AgentRunner(
            config, settings=settings, policy=policy, mcp_servers=mcp_servers, store=store
        )

    return factory


def default_instance(app: FastAPI, model: str) -> str:
    """The id of the web chat's instance, created on first start with ``model``."""
    registry = app.state.registry
    for inst in registry:
        if inst.config.extra.get(DEFAULT_INSTANCE_KEY):
            return str(inst.config.id)
    inst = registry.create(
        model=model, extra={DEFAULT_INSTANCE_KEY: True}, instance_id=DEFAULT_INSTANCE_ID
    )
    return str(inst.config.id)


def create_main_app(
    *,
    data: Path | str | None = None,
    token: str | None = None,
    model: str | None = None,
    settings: ProviderSettings | None = None,
    policy: RetentionPolicy | None = None,
    mcp: bool = True,
    web: bool = True,
    host: str = "127.0.0.1",
    roots: Sequence[Path | str] | None = None,
    mcp_servers: Sequence[McpServerSpec] = (),
    store: str | None = None,
) -> FastAPI:
    """The app ``visus serve`` runs: ``/v1`` (tether), ``/mcp`` and ``/`` (web chat).

    ``store``: a ``postgresql://`` URL puts instances, sessions, blobs and the tether
    ring in that database (any number of replicas may share it); ``None`` takes
    ``[store] url`` / ``$VISUS_STORE``; empty: local files under the data folder.
    """
    folder = data_dir(data if data is not None else load_config().data_dir) / "serve"
    settings_store = load_config().store
    if store is None:
        configured = settings_store.url
        store = configured.get_secret_value() if configured is not None else ""
    shared = (
        open_store(store, folder, lease_seconds=settings_store.lease_seconds)
        if is_database_url(store)
        else None
    )
    app = create_app(
        data_dir=folder,
        runner_factory=agent_runner_factory(
            settings=settings, policy=policy, mcp_servers=mcp_servers, store=shared
        ),
        token=token,
        store=shared,
    )
    app.state.default_model = model or load_config().default_model
    app.state.default_instance = default_instance(app, app.state.default_model)
    if web:
        # Deleting it over the API would leave the open page talking to nothing.
        app.state.protected_instances[app.state.default_instance] = "the web chat's instance"
    if mcp:
        from visus.mcp_server import mount_mcp

        # MCP's view tool sees ``roots`` (default: the working directory); ``host`` feeds
        # the SDK's DNS-rebinding check.
        mount_mcp(app, roots=roots, host=host)
    if web:
        from visus.web import mount_web

        mount_web(app)
    return app
