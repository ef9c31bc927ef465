"""Tether apps of ``visus serve`` replicas sharing one PostgreSQL database (each with
its own store connection, replica name and data folder), for the replica tests."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from fastapi import FastAPI

from visus.agent.policy import OperatorPolicy
from visus.app import agent_runner_factory
from visus.config import load_config
from visus.paths import files_dir
from visus.store.postgres import PostgresStore
from visus.tether.server import create_app


def replica_apps(
    pg_url: str, folder: Path, n: int, *, roots: Sequence[Path] = (), token: str | None = None
) -> tuple[list[FastAPI], list[PostgresStore]]:
    """``n`` replica apps (``r0``, ``r1``, ...) with real agents, and their stores.

    Each replica's operator allows ``roots`` (default: ``<folder>/files``); ``token``
    is the bearer token every replica asks for."""
    stores = [PostgresStore(pg_url, replica=f"r{k}") for k in range(n)]
    policy = OperatorPolicy(roots=tuple(roots) or (files_dir(folder),), data=(folder,))
    config = load_config(env={})
    apps = [
        create_app(
            data_dir=folder / f"r{k}",
            runner_factory=agent_runner_factory(policy=policy, config=config, store=store),
            store=store,
            token=token,
        )
        for k, store in enumerate(stores)
    ]
    return apps, stores
