"""A throwaway PostgreSQL cluster for the tests (a pytest plugin, see conftest.py).

``pg_cluster`` (one per test session) runs ``initdb`` and ``postgres`` from Debian's
packages (``/usr/lib/postgresql/<major>/bin``, installed by scripts/setup-system.sh)
in a temp folder, listening on 127.0.0.1 on a free port. initdb refuses to run as
root, so as root both run as ``nobody`` with the folder handed to it. ``pg_url`` is a
fresh database per test module. Without the binaries the tests that need them skip,
saying so.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.timing import within


@dataclass(frozen=True)
class Cluster:
    host: str
    port: int
    user: str

    def url(self, db: str = "postgres") -> str:
        return f"postgresql://{self.user}@{self.host}:{self.port}/{db}"


def find_bin() -> Path | None:
    """The folder holding initdb and postgres (the newest major version), if any."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: (
            int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0
        ),
    )
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("initdb")
    return Path(on_path).parent if on_path else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_user() -> dict[str, Any]:
    if os.geteuid() != 0:
        return {}
    nobody = pwd.getpwnam("nobody")
    return {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}


def start_cluster(
    folder: Path, settings: tuple[str, ...] = ()
) -> tuple[Cluster, subprocess.Popen[bytes]]:
    """initdb + postgres in ``folder``; returns once it accepts connections.
    ``settings``: more ``name=value`` server settings (a benchmark's
    ``shared_preload_libraries=pg_stat_statements``)."""
    import psycopg

    bindir = find_bin()
    assert bindir is not None
    drop = _as_user()
    folder.mkdir(parents=True, exist_ok=True)
    if drop:
        folder.chmod(0o755)
        os.chown(folder, drop["user"], drop["group"])
    data, sock = folder / "data", folder / "sock"
    env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
    done = subprocess.run(
        [
            str(bindir / "initdb"),
            "-D",
            str(data),
            "-A",
            "trust",
            "-U",
            "visus",
            "-E",
            "UTF8",
            "--no-sync",
            "--no-instructions",
        ],
        check=False,
        capture_output=True,
        env=env,
        cwd=folder,
        **drop,
    )
    if done.returncode:
        raise RuntimeError(f"initdb failed: {done.stderr.decode(errors='replace')[-2000:]}")
    (folder / "sock").mkdir()
    if drop:
        os.chown(sock, drop["user"], drop["group"])
    port = _free_port()
    proc = subprocess.Popen(
        [
            str(bindir / "postgres"),
            "-D",
            str(data),
            "-p",
            str(port),
            "-k",
            str(sock),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            "fsync=off",
            "-c",
            "full_page_writes=off",
            "-c",
            "max_connections=200",
            "-c",
            "shared_buffers=64MB",
            *(arg for s in settings for arg in ("-c", s)),
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(folder / "postgres.log", "wb"),  # noqa: SIM115
        env=env,
        cwd=folder,
        **drop,
    )
    cluster = Cluster("127.0.0.1", port, "visus")
    deadline = time.monotonic() + within(30)
    while True:
        try:
            psycopg.connect(cluster.url(), connect_timeout=2).close()
            return cluster, proc
        except psycopg.OperationalError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                log = (folder / "postgres.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"postgres did not start:\n{log}") from None
            time.sleep(0.1)


def stop_cluster(proc: subprocess.Popen[bytes]) -> None:
    import signal

    proc.send_signal(signal.SIGINT)  # fast shutdown: disconnect clients, stop
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    pytest.importorskip("psycopg", reason="pip install 'visus[postgres]'")
    from visus.store import pg_conn

    # In the tests a synchronous query on a serving event loop is an error, not a log
    # line: every call site that forgets asyncio.to_thread fails the test that uses it.
    pg_conn.ON_LOOP = "raise"
    if find_bin() is None:
        pytest.skip(
            "PostgreSQL server binaries (initdb, postgres) not found; scripts/setup-system.sh "
            "installs Debian's postgresql package"
        )
    folder = Path(tempfile.mkdtemp(prefix="visus-pg-"))
    folder.chmod(0o755)  # the unprivileged user must reach the cluster folder inside
    cluster, proc = start_cluster(folder / "cluster")
    try:
        yield cluster
    finally:
        stop_cluster(proc)
        shutil.rmtree(folder, ignore_errors=True)


def create_database(cluster: Cluster) -> str:
    import psycopg

    name = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(cluster.url(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")  # type: ignore[arg-type]
    return cluster.url(name)


def drop_database(cluster: Cluster, url: str) -> None:
    import psycopg

    name = url.rsplit("/", 1)[1]
    with psycopg.connect(cluster.url(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def pg_url(pg_cluster: Cluster) -> Iterator[str]:
    """A fresh, empty database for one test module."""
    url = create_database(pg_cluster)
    try:
        yield url
    finally:
        drop_database(pg_cluster, url)
