"""``visus`` in a child process on a pseudo-terminal, as a user runs it: Ctrl-C typed
there is SIGINT to the command, keys are typed, output is read until a marker."""

from __future__ import annotations

import time
from pathlib import Path

from tests.timing import within


def wait_in_readline(pid: int, timeout: float = 30.0) -> None:
    """Return once process ``pid``'s main thread sleeps in select/poll, as readline does
    waiting for a key after printing its prompt.

    A SIGINT that lands between readline printing the prompt and entering select() is
    held until the next key (a CPython race no human hits, seen under load on 2 cores):
    a test types Ctrl-C at a prompt only once the process waits there. Where the kernel
    does not say what a process waits in, a second stands in.
    """
    proc = Path(f"/proc/{pid}")
    deadline = time.monotonic() + within(timeout)
    waits_in = ""
    while time.monotonic() < deadline:
        try:
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
            waits_in = (proc / "wchan").read_text()
        except (OSError, IndexError):
            break
        if state != "R" and waits_in in ("", "0"):  # asleep, and the kernel hides where
            time.sleep(1.0)
            return
        if "poll" in waits_in or "select" in waits_in:
            return
        time.sleep(0.02)
    raise AssertionError(f"process {pid} never waited for a key (it waits in {waits_in!r})")


class Terminal:
    """A ``visus`` command in a child process on a pseudo-terminal of its own."""

    def __init__(self, cwd: Path, *args: str, env: dict[str, str] | None = None) -> None:
        import os
        import pty
        import subprocess
        import sys

        self.leader, follower = pty.openpty()
        # A session of its own (setsid) whose controlling terminal is the pty, so
        # Ctrl-C there is SIGINT, as in a real terminal.
        code = (
            "import fcntl, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
            "from visus.cli import main; main()"
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, *args],
            stdin=follower,
            stdout=follower,
            stderr=follower,
            cwd=cwd,
            start_new_session=True,
            env=env,
        )
        os.close(follower)
        self.seen = b""

    def read_until(self, marker: bytes, count: int = 1) -> None:
        import os
        import select

        deadline = time.monotonic() + within(60)
        while self.seen.count(marker) < count and time.monotonic() < deadline:
            ready, _, _ = select.select([self.leader], [], [], 0.5)
            if ready:
                try:
                    self.seen += os.read(self.leader, 4096)
                except OSError:
                    break
        assert self.seen.count(marker) >= count, self.seen[-400:]

    def type(self, keys: bytes) -> None:
        import os

        os.write(self.leader, keys)

    def close(self) -> None:
        import os

        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.leader)
