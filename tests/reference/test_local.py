"""The local reference server the CLI shares (issue 36): the first ``visus run`` starts
it, the next finds it (its OCR engine loaded once, not per run), a server of other code
or a dead one is never used, it exits once idle, and ``VISUS_REFERENCE_SHARED=0`` keeps
each command to itself. Every server a test starts is stopped by the test."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from visus.reference.local import announce_path, fingerprint

ROOT = Path(__file__).resolve().parents[2]
SIGN = ROOT / "docs" / "examples" / "sign.png"
VISUS = str(Path(sys.executable).with_name("visus"))


@pytest.fixture
def shared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """An environment where commands share the server, announced under tmp_path; every
    server announced there is stopped afterwards."""
    cache = tmp_path / "cache"
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.pop("VISUS_REFERENCE_URL", None)
    env |= {
        "VISUS_REFERENCE_SHARED": "1",
        "XDG_CACHE_HOME": str(cache),
        "VISUS_CONFIG": os.devnull,
        "VISUS_DATA": str(tmp_path / "data"),
    }
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    yield env
    for path in cache.rglob("reference-server*.json"):
        with contextlib.suppress(ValueError, OSError, KeyError, ProcessLookupError):
            pid = int(json.loads(path.read_text())["pid"])
            if pid != os.getpid():
                os.kill(pid, signal.SIGKILL)


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [VISUS, "run", *args], env=env, capture_output=True, text=True, timeout=600
    )


def _announced(env: dict[str, str]) -> dict[str, object]:
    json_block = env.get("VISUS_REFERENCE_JSON", "") == "1"
    where = announce_path(json_block=json_block)
    return dict(json.loads(where.read_text(encoding="utf-8")))


def test_the_second_run_uses_the_server_the_first_one_started(shared: dict[str, str]) -> None:
    first = _run(shared, "--image", str(SIGN), "what does it say?")
    assert first.returncode == 0, first.stderr
    assert "started the reference model's server" in first.stderr
    server = _announced(shared)
    second = _run(shared, "--image", str(SIGN), "and now?")
    assert second.returncode == 0, second.stderr
    assert "started the reference model's server" not in second.stderr
    assert _announced(shared) == server  # the same process, its OCR engine still loaded
    health = httpx.get(f"{server['url']}/health", timeout=10).json()
    assert health["pid"] == server["pid"]
    assert health["ocr"] is True
    assert "LANTERN" in first.stdout
    assert "LANTERN" in second.stdout
    where = announce_path(json_block=shared.get("VISUS_REFERENCE_JSON") == "1")
    assert oct(where.stat().st_mode & 0o777) == "0o600"
    assert oct(where.parent.stat().st_mode & 0o777) == "0o700"


def test_a_dead_or_other_server_is_not_used(shared: dict[str, str]) -> None:
    json_block = shared.get("VISUS_REFERENCE_JSON") == "1"
    where = announce_path(json_block=json_block)
    where.parent.mkdir(parents=True)
    where.write_text(json.dumps({"url": "http://127.0.0.1:9", "pid": 1}), encoding="utf-8")
    ran = _run(shared, "--image", str(SIGN), "what does it say?")
    assert ran.returncode == 0, ran.stderr
    assert "started the reference model's server" in ran.stderr
    assert _announced(shared)["pid"] != 1


def test_shared_0_runs_the_model_in_the_command(shared: dict[str, str]) -> None:
    ran = _run({**shared, "VISUS_REFERENCE_SHARED": "0"}, "hello")
    assert ran.returncode == 0, ran.stderr
    assert "started the reference model's server" not in ran.stderr
    assert not list(Path(shared["XDG_CACHE_HOME"]).rglob("reference-server*.json"))


def test_the_server_exits_once_idle(tmp_path: Path) -> None:
    where = tmp_path / "cache" / "reference-server.json"
    where.parent.mkdir(parents=True)
    code = fingerprint(json_block=False)
    program = (
        "from visus import limits; limits.REFERENCE_LOCAL_IDLE_SECONDS = 1.0; "
        "from visus.reference.local import main; import sys; main(sys.argv[1:])"
    )
    proc = subprocess.Popen([sys.executable, "-c", program, str(where), code])
    try:
        # It loads its OCR engine first (seconds, more on a busy machine), then waits.
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    assert not where.exists()  # it took its announcement with it


def test_an_edited_announcement_never_sends_images_off_loopback(
    shared: dict[str, str],
) -> None:
    json_block = shared.get("VISUS_REFERENCE_JSON") == "1"
    where = announce_path(json_block=json_block)
    where.parent.mkdir(parents=True)
    where.write_text(
        json.dumps({"url": "http://198.51.100.7:80", "pid": os.getpid()}), encoding="utf-8"
    )
    ran = _run(shared, "hello")
    assert ran.returncode == 0, ran.stderr
    assert "started the reference model's server" in ran.stderr
    assert "198.51.100.7" not in json.dumps(_announced(shared))
