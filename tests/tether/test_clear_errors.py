"""Clear failures: a failed turn's log record (expected failures are one line, anything
else keeps its traceback) and a create request that is not JSON."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from visus.errors import InvalidInputError
from visus.tether.frames import Frame, UserMessagePayload
from visus.tether.instance import Instance
from visus.tether.runner import ImageIn, InstanceConfig, TurnOutput
from visus.tether.server import create_app


class Raising:
    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    async def run_turn(
        self,
        *,
        session: str,
        text: str,
        images: Sequence[ImageIn],
        user: Mapping[str, Any] | None,
        emit_delta: Callable[[str], Awaitable[None]],
    ) -> TurnOutput:
        raise self.exc


async def _fail(
    exc: Exception, caplog: pytest.LogCaptureFixture, said: str = ""
) -> logging.LogRecord:
    config = InstanceConfig(id="i-1", model="m", created="t", data_dir="/nonexistent")
    inst = Instance(config, Raising(exc))
    frame = await inst.ring.append(Frame(UserMessagePayload("hi"), "s", "m1"))
    with caplog.at_level(logging.WARNING, logger="visus.tether.instance"):
        await inst.start_turn(frame, ())
    page = inst.ring.read(0)
    assert page.frames[-1].type == "error"
    assert page.frames[-1].payload.code == "turn_failed"  # type: ignore[union-attr]
    if said:
        assert page.frames[-1].payload.message == said  # type: ignore[union-attr]
    (record,) = [r for r in caplog.records if r.name == "visus.tether.instance"]
    return record


async def test_an_expected_failure_is_one_warning_line(caplog: pytest.LogCaptureFixture) -> None:
    # The user reads the message as it is, with no internal class name in front.
    said = "image 1 cannot be used: not a raster"
    record = await _fail(InvalidInputError(said), caplog, said)
    assert record.levelno == logging.WARNING
    assert record.exc_info is None
    assert "image 1 cannot be used" in record.getMessage()


async def test_an_unexpected_failure_keeps_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    record = await _fail(RuntimeError("a bug"), caplog)
    assert record.levelno == logging.ERROR
    assert record.exc_info is not None


async def test_a_form_body_on_create_is_told_to_send_json(tmp_path: Path) -> None:
    # What `curl -d '{"model": ...}'` sends without -H 'Content-Type: application/json'.
    app = create_app(data_dir=tmp_path, runner_factory=lambda c: Raising(RuntimeError()))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        r = await client.post(
            "/v1/instances",
            content=b'{"model": "reference"}',
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert r.status_code == 415  # a form is also what another site's page can post blind
        error = r.json()["error"]
        assert error["code"] == "unsupported_media_type"
        assert "Content-Type: application/json" in error["message"]
        assert "application/x-www-form-urlencoded" in error["message"]
        r = await client.post("/v1/instances", json={"model": "reference"})
        assert r.status_code == 201


def test_an_instance_the_runner_refuses_at_load_is_one_warning_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from visus.errors import ConfigError
    from visus.tether.instances import Registry

    def refusing(config: InstanceConfig) -> Raising:
        if config.model == "gone":
            raise ConfigError("tools: no tool named 'x'")
        return Raising(RuntimeError())

    first = Registry(tmp_path, refusing)
    kept = first.create(model="fine")
    first.create(model="gone-later")
    for path in (tmp_path / "instances").glob("*/instance.json"):
        path.write_text(path.read_text().replace('"gone-later"', '"gone"'))
    with caplog.at_level(logging.WARNING, logger="visus.tether.instances"):
        second = Registry(tmp_path, refusing)
    assert [i.config.id for i in second] == [kept.config.id]
    (record,) = [r for r in caplog.records if r.name == "visus.tether.instances"]
    assert record.levelno == logging.WARNING
    assert record.exc_info is None
    assert "no tool named 'x'" in record.getMessage()
