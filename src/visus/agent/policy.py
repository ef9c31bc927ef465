"""The operator's policy: what served agents may reach, decided once, when a server starts.

``visus serve`` builds one :class:`OperatorPolicy` from its command line and
``visus.toml`` at start and hands the frozen value to everything that runs an agent for
a client (tether instances, the web chat, the Telegram gateway, ``/mcp``'s ``view``).
A client's request may narrow it, never widen it:

- **roots**: each root a create request names must resolve, after symlinks, inside an
  allowed root (else :class:`~visus.errors.ReachError`, ``outside_reach``); none named:
  all the allowed roots (``--root``, ``[server] roots``; default the data folder's
  ``files`` folder).
- **MCP servers**: a request names servers the operator configured (``--mcp``,
  ``[[mcp.servers]]``); none named: every one. It never supplies a command or headers.
  An https URL of its own only when the operator opted in (``[mcp] allow_client_urls``),
  then through the SSRF gate, connected to the address that was checked.
- **tools**: write tools (``edit``) only when the operator turned them on
  (``--allow-write``, ``[server] write_tools``).
- **models**: the models a client may name (an instance's ``model``, ``vision_analyze``'s
  and ``video_analyze``'s ``model`` on ``/mcp`` and in the agents' tools), each paid
  with the operator's keys: the server's own (its web chat's, ``--model`` or
  ``default_model``, and ``[auxiliary.vision] model``) and ``[server] models``
  (default ``["reference"]``, the offline model that spends nothing; ``"*"``: any).
- **URLs**: whether tools fetch an https URL a client (or its agent) names
  (``view("https://...")``, ``vision_analyze``'s ``file_url``; ``--no-fetch-urls``,
  ``[server] fetch_urls``, on by default: every fetch goes through the SSRF gate of
  :mod:`visus.net`, public addresses only, so it reaches what the client could fetch
  itself; an operator whose egress address someone trusts turns it off).

Whatever the roots, visus's own places stay out of every agent's reach
(:func:`own_places`: the configuration file and folder, the data folder with its blobs,
session records, logs and attachments), except the ``files`` folder visus hands its
agents inside a data folder. Nothing re-reads the configuration per request, and
nothing an agent writes changes a gate.

Example:
    >>> import tempfile
    >>> from visus.config import load_config
    >>> data = Path(tempfile.mkdtemp())
    >>> policy = OperatorPolicy.at_start(load_config(env={}), data=data)
    >>> policy.roots == ((data / "files").resolve(),), policy.write_tools
    (True, False)
    >>> policy.narrow_roots(["/"])
    Traceback (most recent call last):
    ...
    visus.errors.ReachError: roots: '/' is outside the roots this server allows; ...
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from visus.agent.mcp_client import McpServerSpec
from visus.agent.tools import ToolRegistry
from visus.config import VisusConfig, config_path
from visus.errors import ConfigError, PolicyError, ReachError
from visus.models.allowed import AllowedModels
from visus.paths import data_dir, files_dir
from visus.perception import Reach

__all__ = ["WRITE_TOOLS", "OperatorPolicy", "guarded_reach", "own_places"]

#: Built-in tools that change files; served agents get them only when the operator says.
WRITE_TOOLS = frozenset({"edit"})


def own_places(*data: Path | str) -> tuple[Path, ...]:
    """visus's own files, out of every agent's reach: the data folders ``data`` (their
    blobs, session records, logs, attachments, instance files), ``$VISUS_DATA`` or the
    user's data folder, the configuration file in force (``--config``,
    ``$VISUS_CONFIG``) and the user's visus configuration folder.

    Example:
        >>> Path("/srv/visus-data") in own_places("/srv/visus-data")
        True
    """
    places = [*map(Path, data), data_dir(), config_path(), config_path(env={}).parent]
    return tuple(dict.fromkeys(p.expanduser() for p in places))


def guarded_reach(
    roots: Sequence[Path | str],
    *,
    render: bool = True,
    data: Sequence[Path | str] = (),
    urls: bool = True,
) -> Reach:
    """A :class:`Reach` over ``roots`` that never reaches :func:`own_places` (of the data
    folders ``data`` too), except each data folder's ``files`` folder; ``urls``: whether
    its tools fetch https URLs.

    Example:
        >>> reach = guarded_reach(["/"], data=["/srv/visus-data"])
        >>> reach.contains(Path("/srv/visus-data/sessions/s1.jsonl"))
        False
        >>> reach.contains(Path("/srv/visus-data/files/chart.png"))
        True
    """
    return Reach(
        list(roots),
        render=render,
        deny=own_places(*data),
        deny_except=[files_dir(d) for d in data],
        urls=urls,
    )


def _inside(path: Path, roots: Sequence[Path]) -> bool:
    return any(path == root or path.is_relative_to(root) for root in roots)


@dataclass(frozen=True, slots=True)
class OperatorPolicy:
    """The boundary a server's clients live within (see the module docstring).

    ``roots`` are resolved after symlinks when the policy is made; ``data`` are the data
    folders whose contents (but their ``files`` folders) no agent reaches.
    """

    roots: tuple[Path, ...]
    mcp_servers: tuple[McpServerSpec, ...] = ()
    write_tools: bool = False
    #: A create request may name an https MCP URL of its own (through the SSRF gate).
    client_mcp_urls: bool = False
    #: ... and that URL may name loopback or private addresses.
    private_mcp_urls: bool = False
    render: bool = True
    data: tuple[Path, ...] = field(default=())
    #: Tools fetch https URLs a client or its agent names (through the SSRF gate).
    fetch_urls: bool = True
    #: The models a client may name (an instance's, an analyze call's).
    models: AllowedModels = field(default_factory=lambda: AllowedModels(("reference",)))

    def __post_init__(self) -> None:
        object.__setattr__(self, "roots", tuple(Path(r).expanduser().resolve() for r in self.roots))
        object.__setattr__(self, "data", tuple(Path(d).expanduser() for d in self.data))
        names = [s.name for s in self.mcp_servers]
        if len(set(names)) != len(names):
            raise ConfigError(f"MCP server names must be unique: {names}")

    @classmethod
    def at_start(
        cls,
        config: VisusConfig,
        *,
        data: Path | str,
        roots: Sequence[Path | str] | None = None,
        mcp_servers: Sequence[McpServerSpec] = (),
        write_tools: bool | None = None,
        fetch_urls: bool | None = None,
        model: str | None = None,
    ) -> OperatorPolicy:
        """The policy of a server over the data folder ``data``: the command line's
        values (``roots``, ``mcp_servers``, ``write_tools``, ``fetch_urls``) over
        ``config``'s (``[server] roots``/``write_tools``/``fetch_urls``,
        ``[[mcp.servers]]``, ``[mcp]``, ``[reach] render``). A ``--mcp`` server replaces
        a configured one of the same name. ``model`` is the server's own (its web chat's;
        default ``default_model``): clients may name it and ``[server] models``."""
        servers = {s.name: McpServerSpec.from_settings(s) for s in config.mcp.servers}
        servers.update((s.name, s) for s in mcp_servers)
        chosen = list(roots or config.server.roots or [files_dir(data)])
        return cls(
            roots=tuple(map(Path, chosen)),
            mcp_servers=tuple(servers.values()),
            write_tools=config.server.write_tools if write_tools is None else write_tools,
            client_mcp_urls=config.mcp.allow_client_urls,
            private_mcp_urls=config.mcp.allow_private_urls,
            render=config.reach.render,
            data=(Path(data),),
            fetch_urls=config.server.fetch_urls if fetch_urls is None else fetch_urls,
            models=AllowedModels.of(
                config.server.models,
                model or config.default_model,
                config.auxiliary.vision.model,
            ),
        )

    def reach(self, roots: Sequence[Path] | None = None) -> Reach:
        """The agent's reach over ``roots`` (default: every allowed root), never over
        visus's own places."""
        return guarded_reach(
            list(roots or self.roots), render=self.render, data=self.data, urls=self.fetch_urls
        )

    def narrow_roots(self, requested: Sequence[str] | None) -> tuple[Path, ...]:
        """The roots an instance gets: ``requested`` (each inside an allowed root after
        symlinks), or every allowed root when none are named."""
        if not requested:
            return self.roots
        out: list[Path] = []
        for raw in requested:
            path = Path(raw).expanduser()
            if not path.is_absolute():
                raise ReachError(f"roots: {raw!r} is not an absolute path")
            resolved = path.resolve()
            if not _inside(resolved, self.roots):
                # The allowed folders are the operator's layout: not said to a client.
                raise ReachError(
                    f"roots: {raw!r} is outside the roots this server allows; a create "
                    "request may only narrow them to folders inside those (an instance "
                    "created without roots has them all; visus serve --root sets them)"
                )
            out.append(resolved)
        return tuple(out)

    def narrow_tools(self, registry: ToolRegistry, requested: Sequence[str] | None) -> ToolRegistry:
        """``registry`` without the write tools unless the operator turned them on;
        naming one while they are off is refused (:class:`PolicyError`)."""
        if self.write_tools:
            return registry
        named = sorted(WRITE_TOOLS & set(requested or ()))
        if named:
            raise PolicyError(
                f"tools: {', '.join(map(repr, named))} writes files; this server's operator "
                "left write tools off (visus serve --allow-write, [server] write_tools)"
            )
        return registry.only(n for n in registry.names() if n not in WRITE_TOOLS)

    def narrow_mcp(
        self, requested: Sequence[Mapping[str, Any]] | None
    ) -> tuple[McpServerSpec, ...]:
        """The MCP servers an instance mounts: those ``requested`` names (operator
        servers, or https URLs when allowed), or every operator server."""
        if requested is None:
            return self.mcp_servers
        return tuple(self._one_mcp(i, dict(entry)) for i, entry in enumerate(requested))

    def _one_mcp(self, i: int, entry: dict[str, Any]) -> McpServerSpec:
        where = f"mcp_servers[{i}]"
        name = str(entry.get("name", ""))
        given = sorted(k for k in ("command", "args", "env", "headers") if entry.get(k))
        if given:
            raise PolicyError(
                f"{where} ({name!r}): a create request cannot give {', '.join(given)}; it "
                "names an MCP server the operator configured (visus serve --mcp, "
                "[[mcp.servers]])"
            )
        known = {s.name: s for s in self.mcp_servers}
        url = entry.get("url")
        if url is None:
            if name not in known:
                offered = ", ".join(known) or "none"
                raise PolicyError(
                    f"{where}: no MCP server named {name!r} on this server (configured: {offered})"
                )
            return known[name]
        if not self.client_mcp_urls:
            raise PolicyError(
                f"{where} ({name!r}): this server does not mount MCP URLs a client names; "
                "its operator may allow https ones with [mcp] allow_client_urls = true"
            )
        if name in known:
            raise PolicyError(f"{where}: {name!r} is the name of a configured MCP server")
        return McpServerSpec(name=name, url=str(url), public_only=not self.private_mcp_urls)
