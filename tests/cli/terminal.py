"""``visus`` in a child process on a pseudo-terminal, as a user runs it: Ctrl-C typed
there is SIGINT to the command, keys are typed, output is read until a marker."""

from __future__ import annotations

from pathlib import Path


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
        import time

        deadline = time.monotonic() + 60
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
