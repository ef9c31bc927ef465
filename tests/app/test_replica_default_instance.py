"""Replicas of ``visus serve`` that start at the same moment on one PostgreSQL database
share one web-chat instance (it has a fixed id), instead of creating one each."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.app.replicas import replica_apps
from visus.agent.policy import OperatorPolicy
from visus.app import (
    DEFAULT_INSTANCE_ID,
    DEFAULT_INSTANCE_KEY,
    agent_runner_factory,
    default_instance,
)
from visus.store.postgres import PostgresStore
from visus.tether.server import create_app


def _defaults(store: PostgresStore) -> list[dict[str, Any]]:
    return [d for d in store.list_instances() if d.get("extra", {}).get(DEFAULT_INSTANCE_KEY)]


@pytest.mark.asyncio
async def test_replicas_starting_at_once_create_one_web_chat_instance(
    pg_url: str, tmp_path: Path
) -> None:
    apps, stores = replica_apps(pg_url, tmp_path, 2)
    try:
        # The race: both replicas look for the web chat's instance before either has
        # created it, so both go on to create it.
        for app in apps:
            assert not [i for i in app.state.registry if i.config.extra.get(DEFAULT_INSTANCE_KEY)]
        made = [
            app.state.registry.create(
                model="reference",
                extra={DEFAULT_INSTANCE_KEY: True},
                instance_id=DEFAULT_INSTANCE_ID,
            )
            for app in apps
        ]
        assert {m.config.id for m in made} == {DEFAULT_INSTANCE_ID}
        assert [d["id"] for d in _defaults(stores[0])] == [DEFAULT_INSTANCE_ID]
        # A third replica starting later finds that one instance.
        later = SimpleNamespace(state=SimpleNamespace(registry=apps[1].state.registry))
        assert default_instance(later, "reference") == DEFAULT_INSTANCE_ID  # type: ignore[arg-type]
    finally:
        for app in apps:
            await app.state.registry.aclose()
        for store in stores:
            store.close()


def test_a_fresh_data_folder_gets_the_fixed_web_chat_id(tmp_path: Path) -> None:
    policy = OperatorPolicy(roots=(tmp_path / "files",), data=(tmp_path,))
    app = create_app(data_dir=tmp_path, runner_factory=agent_runner_factory(policy=policy))
    assert default_instance(app, "reference") == DEFAULT_INSTANCE_ID
    # and finds it again instead of creating another
    assert default_instance(app, "reference") == DEFAULT_INSTANCE_ID
    assert [i.config.id for i in app.state.registry] == [DEFAULT_INSTANCE_ID]
