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

import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from visus.agent import PastedImage, StatusCallback, ToolCallback, ToolRegistry, build_agent
from visus.agent.extra_tools import AttachmentsFor, attachment_tools
from visus.agent.loop import ResumeRefusedError, TurnResult
from visus.agent.mcp_client import McpServerSpec
from visus.agent.phases import tool_phase
from visus.agent.policy import OperatorPolicy
from visus.attachments import AttachmentStore, SessionAttachments
from visus.config import VisusConfig, load_config
from visus.errors import ConfigError
from visus.paths import data_dir, files_dir, private_dir
from visus.providers import ProviderSettings
from visus.record.messages import ToolCall
from visus.retention import RetentionPolicy
from visus.store import Store, is_database_url, open_store
from visus.telemetry.logs import register_secret, requested
from visus.tether.instance import EmitStatus, TurnNotResumedError
from visus.tether.runner import (
    MCP_SERVERS_KEY,
    ImageIn,
    InstanceConfig,
    RunnerFactory,
    TurnOutput,
)
from visus.tether.server import create_app, is_loopback

__all__ = [
    "DEFAULT_INSTANCE_ID",
    "DEFAULT_INSTANCE_KEY",
    "AgentRunner",
    "agent_runner_factory",
    "create_main_app",
    "default_instance",
    "full_registry",
    "serve_token",
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
    the instance folder, or in ``store`` (namespace ``instances/<id>``) when given.

    What the agent may reach is ``policy`` narrowed by the instance's config (its roots,
    tools and MCP servers): a config asking for more is refused here, so neither a
    create request nor a stored instance (another replica's, an older version's) widens
    the operator's boundary.
    """

    #: Tether passes ``emit_status``: each phase and tool call becomes a frame.
    reports_status = True

    def __init__(
        self,
        config: InstanceConfig,
        *,
        policy: OperatorPolicy,
        visus_config: VisusConfig | None = None,
        settings: ProviderSettings | None = None,
        retention: RetentionPolicy | None = None,
        store: Store | None = None,
    ) -> None:
        folder = Path(config.data_dir)
        self._folder = folder
        self._store = store
        self._namespace = f"instances/{config.id}"
        policy.models.check(config.model)  # a client's pick, paid with the operator's keys
        roots = policy.narrow_roots(config.roots)
        registry = policy.narrow_tools(
            _tools(full_registry(self.attachments), config), config.tools
        )
        mcp = policy.narrow_mcp(config.extra.get(MCP_SERVERS_KEY))
        self.config = config
        #: The folders this instance's tools reach.
        self.roots = roots
        # The instance's sessions and blobs: in its folder, or in the shared store.
        ns = self._namespace
        self.agent = build_agent(
            config.model,
            data=folder,
            settings=settings,
            policy=retention,
            tools=registry,
            config=visus_config,
            mcp_servers=mcp,
            config_mcp_servers=False,  # the policy holds the operator's servers
            reach=policy.reach(list(roots)),
            models=policy.models,
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
        request_id: str | None = None,
        emit_status: EmitStatus | None = None,
    ) -> TurnOutput:
        del user  # who spoke is in the frame; the agent answers the session either way
        pasted = [PastedImage(i.data, i.media_type) for i in images]
        on_tool, on_status = _status_callbacks(emit_status)
        with requested(request_id):  # the turn's log lines and spans name its request
            result = await self.agent.run_turn(
                session,
                text,
                pasted,
                on_delta=emit_delta,
                on_tool=on_tool,
                on_status=on_status,
                request_id=request_id,
            )
        return _output(result)

    async def resume_turn(
        self,
        *,
        session: str,
        text: str,
        images: Sequence[ImageIn],
        user: Mapping[str, Any] | None,
        emit_delta: Callable[[str], Awaitable[None]],
        request_id: str,
        emit_status: EmitStatus | None = None,
    ) -> TurnOutput:
        """Finish the turn answering ``request_id`` that another replica began."""
        del user
        pasted = [PastedImage(i.data, i.media_type) for i in images]
        on_tool, on_status = _status_callbacks(emit_status)
        try:
            with requested(request_id):
                result = await self.agent.run_turn(
                    session,
                    text,
                    pasted,
                    on_delta=emit_delta,
                    on_tool=on_tool,
                    on_status=on_status,
                    request_id=request_id,
                    resume=True,
                )
        except ResumeRefusedError as e:
            raise TurnNotResumedError(str(e)) from e
        return _output(result)

    async def aclose(self) -> None:
        await self.agent.aclose()


def _status_callbacks(
    emit: EmitStatus | None,
) -> tuple[ToolCallback | None, StatusCallback | None]:
    """The agent's progress callbacks as ``assistant.status`` frames: each phase in
    words, and each tool call as it starts (the web chat shows both while it waits)."""
    if emit is None:
        return None, None

    async def on_tool(call: ToolCall) -> None:
        tool = {"id": call.id, "name": call.name, "arguments": dict(call.arguments)}
        await emit(tool_phase(call.name, call.arguments), tool)

    async def on_status(label: str) -> None:
        await emit(label, None)

    return on_tool, on_status


def _output(result: TurnResult) -> TurnOutput:
    out = tuple(ImageIn(o.media_type, o.data) for o in result.images)
    return TurnOutput(
        text=result.answer,
        images=out,
        stop_reason=result.stop_reason,
        usage=result.usage.as_json(),
    )


def _tools(registry: ToolRegistry, config: InstanceConfig) -> ToolRegistry:
    """``registry`` narrowed to the tools the instance names (unknown names refused)."""
    if config.tools is None:
        return registry
    unknown = sorted(set(config.tools) - set(registry.names()))
    if unknown:
        # An unknown name would silently leave the agent without that tool.
        raise ConfigError(
            f"tools: no tool named {', '.join(map(repr, unknown))}; "
            f"the tools are {', '.join(registry.names())}"
        )
    return registry.only(config.tools)


def agent_runner_factory(
    *,
    policy: OperatorPolicy,
    config: VisusConfig | None = None,
    settings: ProviderSettings | None = None,
    retention: RetentionPolicy | None = None,
    store: Store | None = None,
) -> RunnerFactory:
    """A tether :data:`RunnerFactory` building an :class:`AgentRunner` per instance
    within the operator's ``policy`` (read once, at start, like ``config``); its
    sessions and blobs live in ``store`` when one is given."""
    cfg = config if config is not None else load_config()

    def factory(instance: InstanceConfig) -> AgentRunner:
        return AgentRunner(
            instance,
            policy=policy,
            visus_config=cfg,
            settings=settings,
            retention=retention,
            store=store,
        )

    return factory


def default_instance(app: FastAPI, model: str) -> str:
    """The id of the web chat's instance, created on first start; ``model`` is its model
    from this start on."""
    registry = app.state.registry
    for inst in registry:
        if inst.config.extra.get(DEFAULT_INSTANCE_KEY):
            # The model chosen at this start, not the one of the start that created it.
            return str(registry.set_model(inst.config.id, model).config.id)
    inst = registry.create(
        model=model, extra={DEFAULT_INSTANCE_KEY: True}, instance_id=DEFAULT_INSTANCE_ID
    )
    return str(inst.config.id)


def serve_token(token: str | None, *, no_token: bool, host: str) -> str | None:
    """The token a server asks for: ``token``, else a random one, or None when the
    operator opted out (``no_token``, allowed on a loopback ``host`` only).

    Example:
        >>> len(serve_token(None, no_token=False, host="127.0.0.1")) >= 32
        True
        >>> serve_token(None, no_token=True, host="0.0.0.0")
        Traceback (most recent call last):
        ...
        visus.errors.ConfigError: --no-token is allowed on loopback only, not on '0.0.0.0'...
    """
    if no_token:
        if token:
            raise ConfigError("give a token or --no-token, not both")
        if not is_loopback(host):
            raise ConfigError(
                f"--no-token is allowed on loopback only, not on {host!r}: anyone who can "
                "reach the port would drive the agents"
            )
        return None
    return token or secrets.token_urlsafe(32)


def create_main_app(
    *,
    data: Path | str | None = None,
    token: str | None = None,
    no_token: bool = False,
    model: str | None = None,
    settings: ProviderSettings | None = None,
    retention: RetentionPolicy | None = None,
    mcp: bool = True,
    web: bool = True,
    host: str = "127.0.0.1",
    roots: Sequence[Path | str] | None = None,
    mcp_servers: Sequence[McpServerSpec] = (),
    write_tools: bool | None = None,
    store: str | None = None,
    config: VisusConfig | None = None,
    fetch_urls: bool | None = None,
    open_metrics: bool = False,
) -> FastAPI:
    """The app ``visus serve`` runs: ``/v1`` (tether), ``/mcp`` and ``/`` (web chat).

    Every route but the web chat's page needs ``token`` (the bearer token, which the
    page keeps in its origin's storage; :class:`~visus.tether.gate.TokenGate`); none
    given, a random one is made (``app.state.token``), as Jupyter does.
    ``no_token=True`` opts out, on a loopback ``host`` only (then only loopback names
    and the server's own origin are served).
    ``config`` (default: ``visus.toml``, read here, once) and the operator's choices
    make the :class:`~visus.agent.policy.OperatorPolicy` every instance lives within
    (``app.state.policy``): ``roots`` the folders agents may reach at most (default
    ``[server] roots``, else ``<data>/files``, created here), ``mcp_servers`` mounted
    besides ``[[mcp.servers]]``, ``write_tools`` whether agents get ``edit`` (default
    ``[server] write_tools``, off), ``fetch_urls`` whether the agents' tools and
    ``/mcp``'s fetch https URLs a client names (default ``[server] fetch_urls``, on).
    ``store``: a ``postgresql://`` URL puts instances, sessions, blobs and the tether
    ring in that database (any number of replicas may share it); ``None`` takes
    ``[store] url`` / ``$VISUS_STORE``; empty: local files under the data folder.
    ``/healthz`` and ``/readyz`` need no token, ``/metrics`` neither when
    ``open_metrics`` (docs/operations.md).
    """
    cfg = config if config is not None else load_config()
    token = serve_token(token, no_token=no_token, host=host)
    base = data_dir(data if data is not None else cfg.data_dir)
    folder = base / "serve"
    policy = OperatorPolicy.at_start(
        cfg,
        data=base,
        roots=roots,
        mcp_servers=mcp_servers,
        write_tools=write_tools,
        fetch_urls=fetch_urls,
        model=model,
    )
    files = files_dir(base).resolve()
    if files in policy.roots:  # the default root: where the operator puts files for agents
        private_dir(files)
    shared = _shared_store(cfg, store, folder)
    app = create_app(
        data_dir=folder,
        runner_factory=agent_runner_factory(
            policy=policy, config=cfg, settings=settings, retention=retention, store=shared
        ),
        token=token,
        store=shared,
        open_metrics=open_metrics,
    )
    register_secret(token)  # never in a log line
    app.state.policy = policy
    app.state.default_model = model or cfg.default_model
    app.state.default_instance = default_instance(app, app.state.default_model)
    _mount_surfaces(app, policy, cfg, mcp=mcp, web=web, host=host)
    return app


def _shared_store(cfg: VisusConfig, store: str | None, folder: Path) -> Store | None:
    """The database every replica shares, when ``store`` (else ``[store] url`` /
    ``$VISUS_STORE``) is a ``postgresql://`` URL; None: local files under ``folder``."""
    if store is None:
        configured = cfg.store.url
        store = configured.get_secret_value() if configured is not None else ""
    if not is_database_url(store):
        return None
    return open_store(
        store,
        folder,
        lease_seconds=cfg.store.lease_seconds,
        pool_size=cfg.store.pool_size,
        max_turns=cfg.store.max_turns,
    )


def _mount_surfaces(
    app: FastAPI, policy: OperatorPolicy, cfg: VisusConfig, *, mcp: bool, web: bool, host: str
) -> None:
    """``/mcp`` and the web chat on the tether app, within the operator's policy and the
    configuration read at start (``/mcp``'s ``vision_analyze`` resolves models with it:
    nothing an agent writes to visus.toml later changes it)."""
    if web:
        # Deleting it over the API would leave the open page talking to nothing.
        app.state.protected_instances[app.state.default_instance] = "the web chat's instance"
    if mcp:
        from visus.mcp_server import mount_mcp

        # MCP's view tool reaches what agents do; ``host`` feeds the SDK's
        # DNS-rebinding check.
        mount_mcp(app, roots=policy.reach(), host=host, config=cfg, models=policy.models)
    if web:
        from visus.web import mount_web

        mount_web(app)
