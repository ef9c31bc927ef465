"""The instances of one server: the :class:`Registry` (one :class:`Instance` is
:mod:`visus.tether.instance`'s; with a shared store, :mod:`visus.tether.shared`'s).

Each instance lives in ``data_dir/instances/<id>/``: ``instance.json`` holds its
config (written via a temp file and a rename) and the rest of the folder belongs
to the runner (sessions, blobs). A restarted server finds the configs again and
rebuilds each runner with the same factory.

Example:
    >>> import asyncio, tempfile
    >>> from pathlib import Path
    >>> from visus.tether.runner import TurnOutput
    >>> class Quiet:
    ...     async def run_turn(self, **kw): return TurnOutput("ok")
    >>> reg = Registry(Path(tempfile.mkdtemp()), lambda c: Quiet())
    >>> inst = reg.create(model="reference")
    >>> Registry(reg.data_dir, lambda c: Quiet()).get(inst.config.id).config.model
    'reference'
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import secrets
import shutil
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from visus import limits
from visus.errors import ConfigError, NotFoundError, PolicyError, VisusError
from visus.paths import PRIVATE_DIR_MODE, private_dir
from visus.store import FileStore, SharedRingStore, Store
from visus.tether.frames import now_ts
from visus.tether.instance import (
    EGRESS_PROFILE,
    STOPPED,
    BusyError,
    Emit,
    Instance,
    TurnLostError,
    fit_egress,
)
from visus.tether.runner import InstanceConfig, RunnerFactory, TurnRunner
from visus.tether.shared import SharedInstance

__all__ = [
    "EGRESS_PROFILE",
    "STOPPED",
    "BusyError",
    "Emit",
    "Instance",
    "Registry",
    "TurnLostError",
    "fit_egress",
]

log = logging.getLogger(__name__)


class Registry:
    """The instances of one server, kept in ``store`` (default: files under
    ``data_dir/instances``). With a shared store (PostgreSQL) every replica sees every
    instance: one missing here is loaded from the database on first use, and each
    instance's local folder (``data_dir/instances/<id>``) holds only its files."""

    def __init__(
        self, data_dir: Path, factory: RunnerFactory, *, store: Store | None = None
    ) -> None:
        self.data_dir = Path(data_dir)
        self.factory = factory
        self.store: Store = store if store is not None else FileStore(self.data_dir)
        self.shared = bool(self.store.shared)
        #: The replica's turn worker (shared store only; the server's lifespan sets it).
        self.worker: Any = None
        self._instances: dict[str, Instance] = {}
        self._closing: set[asyncio.Task[None]] = set()
        private_dir(self.data_dir / "instances")
        for data in self.store.list_instances():
            self._load(data)

    def _load(self, data: Mapping[str, Any]) -> Instance | None:
        try:
            config = _config(data, self.data_dir / "instances" / str(data["id"]))
            inst = self._build(config, self.factory(config))
        except VisusError as e:  # a config the runner refuses: why, in one line
            log.warning("could not load instance %s: %s", data.get("id"), e)
            return None
        except Exception:  # one bad instance must not keep the server down
            log.exception("could not load instance %s", data.get("id"))
            return None
        self._instances[config.id] = inst
        return inst

    def _build(self, config: InstanceConfig, runner: TurnRunner) -> Instance:
        if not isinstance(self.store, SharedRingStore):
            return Instance(config, runner)
        return SharedInstance(config, runner, self.store, self.kick)

    def kick(self) -> None:
        """Have this replica's worker look for turns to claim now."""
        if self.worker is not None:
            self.worker.kick()

    def __iter__(self) -> Iterator[Instance]:
        """The instances this process knows (see :meth:`current` for a shared store's)."""
        return iter(sorted(self._instances.values(), key=lambda i: i.config.created))

    async def current(self) -> list[Instance]:
        """Every instance, oldest first; with a shared store as the database has them
        now (another replica may have created or deleted some), read off the loop."""
        if self.shared:
            known = {str(d["id"]): d for d in await asyncio.to_thread(self.store.list_instances)}
            for iid in set(self._instances) - set(known):
                self.forget(iid)
            for iid, data in known.items():
                if iid not in self._instances:
                    self._load(data)
        return list(self)

    def get(self, instance_id: str) -> Instance:
        """The instance ``instance_id``; a shared store's unknown here is read from the
        database (synchronously: on a serving loop, use :meth:`find`)."""
        found = self._instances.get(instance_id)
        if found is None and self.shared:
            data = self.store.get_instance(instance_id)
            found = None if data is None else self._load(data)
        if found is None:
            raise NotFoundError(f"instance {instance_id!r} not found")
        return found

    async def find(self, instance_id: str) -> Instance:
        """:meth:`get` for the serving loop: a database read happens in a thread."""
        found = self._instances.get(instance_id)
        if found is None and self.shared:
            data = await asyncio.to_thread(self.store.get_instance, instance_id)
            found = None if data is None else self._instances.get(instance_id) or self._load(data)
        if found is None:
            raise NotFoundError(f"instance {instance_id!r} not found")
        return found

    def forget(self, instance_id: str) -> None:
        """Drop an instance another replica deleted (its runner is closed)."""
        inst = self._instances.pop(instance_id, None)
        if inst is None:
            return
        try:
            task = asyncio.get_running_loop().create_task(inst.aclose())
        except RuntimeError:
            return
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def create(
        self,
        *,
        model: str,
        tools: Sequence[str] | None = None,
        roots: Sequence[str] | None = None,
        extra: Mapping[str, Any] | None = None,
        instance_id: str | None = None,
    ) -> Instance:
        """Build the runner first (a factory error creates nothing), then persist.

        ``instance_id`` fixes the id instead of drawing a random one: replicas that
        create "the same" instance at the same moment then write one row, not two.
        """
        if not model.strip():
            raise ConfigError("model: must not be empty")
        for r in roots or ():
            if not os.path.isabs(r):
                raise ConfigError(f"roots: {r!r} is not an absolute path")
        if instance_id is None and len(self._instances) >= limits.TETHER_MAX_INSTANCES:
            raise PolicyError(
                f"this server holds {len(self._instances)} instances, the limit "
                "(TETHER_MAX_INSTANCES); delete one (DELETE /v1/instances/{id}) first"
            )
        iid = instance_id or "i-" + secrets.token_hex(8)
        folder = self.data_dir / "instances" / iid
        config = InstanceConfig(
            id=iid,
            model=model,
            created=now_ts(),
            data_dir=str(folder),
            tools=None if tools is None else tuple(tools),
            roots=tuple(roots or ()),
            extra=dict(extra or {}),
        )
        runner = self.factory(config)
        private_dir(folder.parent)
        folder.mkdir(mode=PRIVATE_DIR_MODE, exist_ok=instance_id is not None)
        data = asdict(config)
        data["extra"] = dict(config.extra)
        self.store.put_instance(data)
        inst = self._build(config, runner)
        self._instances[iid] = inst
        return inst

    def set_model(self, instance_id: str, model: str) -> Instance:
        """Give an instance another model, keeping its id and sessions (``visus serve
        --model`` or a new provider key, for the web chat's instance made on an earlier
        start). Only before the server runs: the old runner, on which nothing ran, is
        dropped without closing."""
        inst = self.get(instance_id)
        if inst.config.model == model:
            return inst
        config = dataclasses.replace(inst.config, model=model)
        runner = self.factory(config)
        data = asdict(config)
        data["extra"] = dict(config.extra)
        self.store.put_instance(data)
        self._instances[instance_id] = self._build(config, runner)
        return self._instances[instance_id]

    async def delete(self, instance_id: str) -> None:
        inst = await self.find(instance_id)
        del self._instances[instance_id]
        await inst.aclose()
        await asyncio.to_thread(self.store.delete_instance, instance_id)
        await asyncio.to_thread(shutil.rmtree, inst.config.data_dir, ignore_errors=True)

    async def aclose(self) -> None:
        for inst in list(self._instances.values()):
            await inst.aclose()
        for task in list(self._closing):
            with contextlib.suppress(Exception):
                await task


def _config(data: Mapping[str, Any], folder: Path) -> InstanceConfig:
    tools = data.get("tools")
    return InstanceConfig(
        id=str(data["id"]),
        model=str(data["model"]),
        created=str(data["created"]),
        data_dir=str(folder),
        tools=None if tools is None else tuple(map(str, tools)),
        roots=tuple(map(str, data.get("roots") or ())),
        extra=dict(data.get("extra") or {}),
    )
