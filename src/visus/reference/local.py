"""The local reference server commands share, so its OCR engine loads once, not per run.

Each ``visus run`` is a new process; with the embedded reference server of
:func:`visus.agent.ensure_reference_server` every one loaded the OCR engine again
(seconds idle, more on a busy machine) and read every image of a continued session
again. A command of the CLI (``visus run``, ``chat``, ``analyze``) calls
:func:`local_reference_url` instead: it finds the server an earlier command started,
or starts one in the background, which stays for
:data:`~visus.limits.REFERENCE_LOCAL_IDLE_SECONDS` after its last request and then
exits. ``VISUS_REFERENCE_SHARED=0`` turns this off (every command runs its own, as a
library caller always does); ``VISUS_REFERENCE_URL`` names a server of your own.

The server is announced in ``reference-server[-json].json`` under the user's cache
folder (0600 in a 0700 folder: the URL and the process id, and the fingerprint of the
visus code it runs). A command uses it only when it answers ``GET /health`` on loopback
with that fingerprint, so a server left by another version of the code (a ``git pull``
in the checkout) or a port another program took since is never used: a new one starts.
A lock file keeps two commands started together from starting two.

Example:
    >>> len(fingerprint(json_block=False)) == 64
    True
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import platformdirs

from visus import limits
from visus.paths import locked, private_dir

__all__ = ["SHARED_ENV", "Local", "announce_path", "fingerprint", "local_reference_url", "main"]

#: ``0`` (or ``false``, ``no``): no shared server; each command runs its own.
SHARED_ENV = "VISUS_REFERENCE_SHARED"

_PACKAGE = Path(__file__).resolve().parents[1]


@dataclass(frozen=True, slots=True)
class Local:
    """The server a command uses: its URL, its process, and whether this call started
    it (the command then says so)."""

    url: str
    pid: int
    started: bool


def enabled(env: dict[str, str] | None = None) -> bool:
    """Whether commands share one local reference server (``VISUS_REFERENCE_SHARED``).

    Example:
        >>> enabled({}), enabled({"VISUS_REFERENCE_SHARED": "0"})
        (True, False)
    """
    value = (os.environ if env is None else env).get(SHARED_ENV, "1")
    return value.strip().lower() not in ("0", "false", "no", "off")


def fingerprint(*, json_block: bool) -> str:
    """What a shared server must match: the visus code it runs (every module's bytes)
    and whether its answers end in the JSON block."""
    digest = hashlib.sha256(b"json" if json_block else b"prose")
    for path in sorted(_PACKAGE.rglob("*.py")):
        digest.update(str(path.relative_to(_PACKAGE)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def announce_path(*, json_block: bool) -> Path:
    """Where the server for answers with (or without) the JSON block is announced."""
    folder = Path(platformdirs.user_cache_dir("visus", appauthor=False))
    return folder / ("reference-server-json.json" if json_block else "reference-server.json")


def local_reference_url(*, json_block: bool) -> Local:
    """The shared server's URL: the running one, else one started now and waited for
    until its OCR engine is loaded (up to ``REFERENCE_LOCAL_START_SECONDS``).

    Raises :class:`~visus.errors.ConfigError` when it cannot be started.
    """
    where = announce_path(json_block=json_block)
    private_dir(where.parent)
    code = fingerprint(json_block=json_block)
    with locked(where.with_suffix(".lock")):
        found = _running(where, code)
        if found is not None:
            return found
        return _start(where, code, json_block)


def _running(where: Path, code: str) -> Local | None:
    try:
        announced = json.loads(where.read_text(encoding="utf-8"))
        url, pid = str(announced["url"]), int(announced["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    health = _health(url)
    if health is None or health.get("code") != code or health.get("pid") != pid:
        return None
    return Local(url, pid, started=False)


def _health(url: str) -> dict[str, Any] | None:
    import httpx

    if not url.startswith("http://127.0.0.1:"):
        return None  # only ever loopback: an edited file must not send images elsewhere
    try:
        answer = httpx.get(f"{url}/health", timeout=2.0)
        body = answer.json()
    except (httpx.HTTPError, ValueError):
        return None
    return body if isinstance(body, dict) else None


def _start(where: Path, code: str, json_block: bool) -> Local:
    from visus.errors import ConfigError

    with contextlib.suppress(FileNotFoundError):
        where.unlink()
    log = where.with_suffix(".log")
    env = {**os.environ, "VISUS_REFERENCE_JSON": "1" if json_block else "0"}
    with log.open("ab") as out:
        os.chmod(log, 0o600)
        proc = subprocess.Popen(
            [sys.executable, "-m", "visus.reference.local", str(where), code],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            env=env,
            start_new_session=True,  # not stopped by the command's Ctrl-C, nor its exit
        )
    deadline = time.monotonic() + limits.REFERENCE_LOCAL_START_SECONDS
    while time.monotonic() < deadline:
        found = _running(where, code)
        if found is not None and _ready(found.url):
            return Local(found.url, found.pid, started=True)
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    raise ConfigError(
        f"the local reference server did not start (its log: {log}); "
        f"{SHARED_ENV}=0 runs the reference model in each command instead"
    )


def _ready(url: str) -> bool:
    health = _health(url)
    return bool(health and health.get("ocr"))


# --- the server's own process ----------------------------------------------------------


class _Idle:
    """Requests in flight and when the last one ended; the server exits once idle."""

    def __init__(self) -> None:
        self.busy = 0
        self.since = time.monotonic()
        self.lock = threading.Lock()

    def wrap(self, app: Any) -> Any:
        async def counted(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            with self.lock:
                self.busy += 1
            try:
                await app(scope, receive, send)
            finally:
                with self.lock:
                    self.busy -= 1
                    self.since = time.monotonic()

        return counted

    def idle_for(self) -> float:
        with self.lock:
            return 0.0 if self.busy else time.monotonic() - self.since


def main(argv: list[str] | None = None) -> None:
    """Serve on a free loopback port, announce it at ``argv[0]`` for code ``argv[1]``,
    load the OCR engine, and exit after ``REFERENCE_LOCAL_IDLE_SECONDS`` without a
    request."""
    import socket

    import uvicorn
    from starlette.responses import JSONResponse

    from visus.reference.server import create_app
    from visus.reference.vision import load_ocr, ocr_ready

    where, code = (argv or sys.argv[1:])[:2]
    announced = Path(where)
    app = create_app()

    async def health(request: Any) -> JSONResponse:
        del request
        return JSONResponse({"code": code, "pid": os.getpid(), "ocr": ocr_ready()})

    app.add_route("/health", health, methods=["GET"])
    idle = _Idle()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(
        uvicorn.Config(idle.wrap(app), log_level="warning", access_log=False, lifespan="off")
    )

    def watch() -> None:
        load_ocr()  # before the first image: the command that started this waits for it
        while not server.should_exit:
            if idle.idle_for() > limits.REFERENCE_LOCAL_IDLE_SECONDS:
                server.should_exit = True
            time.sleep(1.0)

    threading.Thread(target=watch, name="visus-reference-idle", daemon=True).start()
    _announce(announced, {"url": url, "pid": os.getpid()})
    try:
        server.run(sockets=[sock])
    finally:
        with contextlib.suppress(OSError, ValueError):
            if json.loads(announced.read_text(encoding="utf-8")).get("pid") == os.getpid():
                announced.unlink()


def _announce(where: Path, value: dict[str, Any]) -> None:
    """Write ``value`` to ``where`` at once (temp file, 0600, rename)."""
    temp = where.with_suffix(f".{os.getpid()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(value, out)
    os.replace(temp, where)


if __name__ == "__main__":
    main()
