"""Build a ready :class:`~visus.agent.loop.Agent` from a model ref and a data folder.

This is where the embedded defaults live: the ``reference`` model (started in this
process on loopback when no ``VISUS_REFERENCE_URL`` is set), stores under the data
folder, and the reach rooted where the caller says.

Example:
    >>> # agent = build_agent("reference", data=Path(".visus-data"), roots=[Path(".")])
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from visus.agent.loop import Agent
from visus.agent.mcp_client import McpMounts, McpServerSpec
from visus.agent.policy import guarded_reach
from visus.agent.tools import MemoryResultCache, ToolRegistry
from visus.config import McpServerEntry, VisusConfig, load_config
from visus.errors import InvalidInputError
from visus.models import ModelSpec
from visus.models.allowed import AllowedModels
from visus.paths import blobs_dir, data_dir, refit_index, sessions_dir
from visus.perception import Reach
from visus.providers import ProviderSettings, resolve
from visus.record.blobs import BlobStore, FileBlobStore
from visus.record.sessions import SessionLog, SessionStore
from visus.retention import RetentionPolicy
from visus.wire import RefitCache

__all__ = ["build_agent", "ensure_reference_server", "reference_embedded"]

_lock = threading.Lock()
_reference_url: str | None = None
_stack = contextlib.ExitStack()
atexit.register(_stack.close)


def ensure_reference_server() -> str:
    """The URL of a reference server: ``VISUS_REFERENCE_URL``, else one started here.

    The embedded server runs on a loopback port in a background thread for the life
    of the process.
    """
    global _reference_url
    env_url = os.environ.get("VISUS_REFERENCE_URL")
    if env_url:
        return env_url
    with _lock:
        if _reference_url is None:
            from visus.reference.server import serve_in_background

            _reference_url = _stack.enter_context(serve_in_background())
        return _reference_url


def reference_embedded() -> bool:
    """Whether this process runs the reference server (so its OCR loads here)."""
    return _reference_url is not None and not os.environ.get("VISUS_REFERENCE_URL")


def build_agent(
    model: str | None = None,
    *,
    data: Path | str | None = None,
    roots: Sequence[Path | str] = (),
    render: bool | None = None,
    settings: ProviderSettings | None = None,
    policy: RetentionPolicy | None = None,
    tools: ToolRegistry | None = None,
    system: str | None = None,
    config: VisusConfig | None = None,
    sessions: SessionLog | None = None,
    blobs: BlobStore | None = None,
    mcp_servers: Sequence[McpServerSpec] = (),
    max_steps: int | None = None,
    config_mcp_servers: bool = True,
    reach: Reach | None = None,
    models: AllowedModels | None = None,
    effort: str | None = None,
) -> Agent:
    """An agent for ``model``; whatever is not given comes from ``visus.toml``.

    ``config`` defaults to :func:`visus.config.load_config` (``VISUS_CONFIG``, the
    user's config dir, ``VISUS_*`` env vars): its default model (``reference`` when no
    provider key is set), provider keys and URLs, data folder, reach and retention.
    ``sessions`` and ``blobs`` replace the data folder's files (a database store
    gives them: :mod:`visus.store`). ``mcp_servers`` are mounted after the
    configuration's ``[[mcp.servers]]`` (a same-named one replaces it; with
    ``config_mcp_servers=False`` they are the only ones); their stdio servers log to
    ``<data>/logs``. ``max_steps`` (default ``[agent] max_steps``) is the operator's
    budget of model calls per turn. ``reach`` replaces the one made from ``roots``
    (default: ``[reach] roots``, else the working directory), which never reaches
    visus's own files (:func:`visus.agent.policy.guarded_reach`: the configuration, the
    data folder but its ``files``). ``models``: the models its tools may be asked for
    (a served agent's: the operator's list; None: any). ``effort`` (default ``[agent]
    effort``) is how hard the model thinks: a level the model does not take is an error
    when given here, and left out when it comes from the configuration (which serves
    every model).
    """
    cfg = config if config is not None else load_config()
    cfg.register_models()
    ref = model or cfg.default_model
    client, spec = resolve(ref, config=_with_reference(ref, settings or cfg.provider_settings()))
    root = data_dir(data if data is not None else cfg.data_dir)
    if reach is None:
        reach = _reach(cfg, roots, render, data=root)
    base = tools or ToolRegistry.builtin()
    configured = cfg.mcp.servers if config_mcp_servers else ()
    agent = Agent(
        client=client,
        model=spec,
        sessions=sessions if sessions is not None else SessionStore(sessions_dir(root)),
        blobs=blobs if blobs is not None else FileBlobStore(blobs_dir(root)),
        reach=reach,
        tools=base.only(base.names()),  # mounted MCP tools join a copy, never a shared one
        policy=policy or cfg.retention.policy(),
        refit_cache=RefitCache(refit_index(root)),
        model_ref=ref,
        mcp=_mounts(configured, mcp_servers, log_dir=root / "logs"),
        config=cfg,
        result_cache=MemoryResultCache(),
        max_steps=max_steps if max_steps is not None else cfg.agent.max_steps,
        models=models,
        effort=_effort(spec, effort, cfg.agent.effort),
    )
    if system is not None:
        agent.system = system
    return agent


def _effort(spec: ModelSpec, given: str | None, configured: str | None) -> str | None:
    """The effort to send: ``given`` when the model takes it (else an error naming the
    levels it takes), else ``configured`` when the model takes that."""
    if given is None:
        return configured if configured in spec.efforts else None
    if given not in spec.efforts:
        takes = ", ".join(spec.efforts) if spec.efforts else "none"
        raise InvalidInputError(
            f"{spec.ref} takes no effort {given!r} (its levels: {takes}; visus models --json)"
        )
    return given


def _with_reference(ref: str, settings: ProviderSettings) -> ProviderSettings:
    """``settings``, with the in-process reference server's URL when ``ref`` is the
    offline reference model and no reference server is configured."""
    is_reference = ref.split(":", 1)[0] in ("reference", "reference-pdf")
    if is_reference and not settings.url("reference"):
        return replace(settings, reference_url=ensure_reference_server())
    return settings


def _reach(
    cfg: VisusConfig, roots: Sequence[Path | str], render: bool | None, *, data: Path
) -> Reach:
    """``roots`` (default: ``[reach] roots``, else the working directory), never
    reaching visus's own files under ``data``."""
    return guarded_reach(
        list(roots or cfg.reach.roots or [Path.cwd()]),
        render=cfg.reach.render if render is None else render,
        data=[data],
    )


def _mounts(
    configured: Sequence[McpServerEntry], given: Sequence[McpServerSpec], *, log_dir: Path
) -> McpMounts | None:
    """The MCP servers to mount: the configuration's, then ``given`` (a same-named one
    replaces the configured); ``None`` when there are none."""
    servers = {s.name: McpServerSpec.from_settings(s) for s in configured}
    servers.update((s.name, s) for s in given)
    return McpMounts(servers.values(), log_dir=log_dir) if servers else None
