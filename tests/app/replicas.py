"""Tether apps of ``visus serve`` replicas sharing one PostgreSQL database (each with
its own store connection, replica name and data folder), for the replica tests."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI

from visus.app import agent_runner_factory
from visus.store.postgres import PostgresStore
from visus.tether.server import create_app


def replica_apps(pg_url: str, folder: Path, n: int) -> tuple[list[FastAPI], list[PostgresStore]]:
    """``n`` replica apps (``r0``, ``r1``, ...) with real agents, and their stores."""
    stores = [PostgresStore(pg_url, replica=f"r{k}") for k in range(n)]
    apps = [
        create_app(
            data_dir=folder / f"r{k}",
            runner_factory=agent_runner_factory(store=store),
            store=store,
        )
        for k, store in enumerate(stores)
    ]
    return apps, stores
