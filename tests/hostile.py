"""A real `visus serve` or `visus proxy` process for the attack tests (issue 33).

Each attack runs against the command as an operator starts it, in its own process on a
free loopback port, and what it costs the server is read from outside, in ``/proc``:
resident memory (``VmRSS``), its peak since a reset (``VmHWM``, reset through
``clear_refs``) and CPU seconds (``utime + stime``). The render workers are other
processes, under their own caps: what is measured is the server's own process.

``bounds`` set :mod:`visus.limits` values in the server (as the in-process tests
monkeypatch them), so a budget is reached fast: the work an attack brings still certainly
exceeds it. ``VISUS_ATTACK_SRC`` (a ``src`` folder of another checkout) runs the server from that
code instead: how the same attack fares on an older main.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.timing import within

MB = 1024 * 1024
TOKEN = "attack-test-token-0123456789"
_CLI = "from visus.cli import main; main()"
_START_SECONDS = 90.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _status(pid: int, name: str) -> int:
    """A ``/proc/<pid>/status`` size field in bytes (0 once the process is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(name + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


@dataclass
class Server:
    """One started server process: where it listens and what it costs."""

    url: str
    proc: subprocess.Popen[bytes]
    log: Path
    token: str | None = TOKEN
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def rss(self) -> int:
        return _status(self.pid, "VmRSS")

    def peak(self) -> int:
        """The most resident memory since the last :meth:`reset_peak` (or the start)."""
        return _status(self.pid, "VmHWM")

    def reset_peak(self) -> None:
        with contextlib.suppress(OSError):
            Path(f"/proc/{self.pid}/clear_refs").write_text("5")

    def cpu(self) -> float:
        """CPU seconds the process has used (user + system)."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def client(self, **kw: object) -> httpx.Client:
        kw.setdefault("timeout", 60)
        return httpx.Client(base_url=self.url, headers=self.headers, **kw)  # type: ignore[arg-type]

    def async_client(self, **kw: object) -> httpx.AsyncClient:
        kw.setdefault("timeout", 60)
        return httpx.AsyncClient(base_url=self.url, headers=self.headers, **kw)  # type: ignore[arg-type]

    def tail(self, n: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-n:]

    def terminate(self, seconds: float) -> bool:
        """SIGTERM, and whether the process exited within ``seconds``."""
        if not self.alive():
            return True
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(seconds)
        except subprocess.TimeoutExpired:
            return False
        return True


def _env(tmp: Path, extra: dict[str, str] | None) -> dict[str, str]:
    config = tmp / "conf" / "visus.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    if not config.exists():
        config.write_text("")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("VISUS_") and not k.endswith("_API_KEY")
    }
    env |= {"VISUS_CONFIG": str(config), "VISUS_DATA": str(tmp / "data"), "PYTHONUNBUFFERED": "1"}
    src = os.environ.get("VISUS_ATTACK_SRC")
    if src:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    return env | (extra or {})


def _program(bounds: dict[str, float] | None) -> str:
    """The server's ``python -c`` program: the CLI, after ``bounds`` are set."""
    lines = ["import visus.limits as limits"]
    lines += [f"limits.{k} = {v!r}" for k, v in (bounds or {}).items()]
    return "\n".join([*lines, _CLI])


@contextlib.contextmanager
def _started(
    args: Sequence[str],
    env: dict[str, str],
    log: Path,
    ready: str,
    headers: dict[str, str],
    bounds: dict[str, float] | None = None,
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", _program(bounds), *args, "--port", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + within(_START_SECONDS)
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + ready, headers=headers, timeout=2).status_code < 500:
                    break
            assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.2)
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextlib.contextmanager
def serve(
    tmp: Path,
    *,
    reference_url: str | None = None,
    config: str = "",
    args: Sequence[str] = (),
    env: dict[str, str] | None = None,
    bounds: dict[str, float] | None = None,
) -> Iterator[Server]:
    """``visus serve --model reference`` with the token :data:`TOKEN`, its data and
    ``config`` (visus.toml) under ``tmp``; the reference model at ``reference_url``."""
    (tmp / "conf").mkdir(parents=True, exist_ok=True)
    (tmp / "conf" / "visus.toml").write_text(config)
    extra = {"VISUS_TOKEN": TOKEN} | (env or {})
    if reference_url:
        extra["VISUS_REFERENCE_URL"] = reference_url
    headers = {"Authorization": f"Bearer {TOKEN}"}
    log = tmp / "serve.log"
    cmd = ["serve", "--model", "reference", *args]
    started = _started(cmd, _env(tmp, extra), log, "/v1/instances", headers, bounds)
    with started as (proc, url):
        yield Server(url, proc, log, TOKEN, headers)


@contextlib.contextmanager
def proxy(
    tmp: Path,
    upstream: str,
    *,
    env: dict[str, str] | None = None,
    bounds: dict[str, float] | None = None,
) -> Iterator[Server]:
    """``visus proxy --upstream <upstream>`` on loopback, without a token."""
    log = tmp / "proxy.log"
    cmd = ["proxy", "--upstream", upstream]
    with _started(cmd, _env(tmp, env), log, "/stats", {}, bounds) as (proc, url):
        yield Server(url, proc, log, None, {})


async def turn(
    http: httpx.AsyncClient, iid: str, session: str, text: str, *, seconds: float = 180
) -> dict[str, Any]:
    """Send ``text`` to instance ``iid``'s session ``session`` and long-poll until its
    turn ends (``seconds`` on a quiet machine, scaled for load): the
    ``assistant.done`` or ``error`` frame."""
    frame = {"type": "user.message", "session": session, "payload": {"text": text}}
    sent = await http.post(f"/v1/instances/{iid}/tether", json=frame)
    assert sent.status_code == 202, sent.text
    after = sent.json()["seq"]
    deadline = time.monotonic() + within(seconds)
    while time.monotonic() < deadline:
        params: dict[str, Any] = {"after_seq": after, "wait": 5, "session": session}
        page = (await http.get(f"/v1/instances/{iid}/tether/poll", params=params)).json()
        after = page["next_seq"]
        for f in page["frames"]:
            if f["type"] in ("assistant.done", "error"):
                return dict(f)
    raise AssertionError("the turn did not end")


class Recorder:
    """Another program serving on another port of 127.0.0.1: it records the method,
    path and headers of every request it gets, and answers 200 with a small page (or
    ``body``). Where a test points a provider's base URL, or a browser, to see what
    reaches it. With ``hold``, each request is answered once that is set (an upstream
    still thinking: what the caller holds meanwhile is what it holds for as long)."""

    def __init__(
        self,
        body: bytes = b"<!doctype html><title>another app</title>",
        *,
        hold: threading.Event | None = None,
    ) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        seen: list[dict[str, str]] = []

        class Handler(BaseHTTPRequestHandler):
            def _record(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                headers = {k.lower(): v for k, v in self.headers.items()}
                seen.append({"method": self.command, "path": self.path, **headers})
                if hold is not None:
                    hold.wait(within(120))
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _record

            def log_message(self, *args: object) -> None:
                pass

        self.seen = seen
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
