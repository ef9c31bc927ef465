"""Ports for the tests: never one of visus's defaults (the user's own ``visus serve``
may hold 8750 while the suite runs; conftest.py makes every default port taken)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager


def free_port() -> int:
    """A loopback port free a moment ago (the kernel's pick for port 0)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def dead_port() -> Iterator[int]:
    """A loopback port where nothing answers for as long as the block runs: bound and
    never listening, so a connection there is refused and no other server can take it.

    Example:
        >>> import socket
        >>> with dead_port() as port, socket.socket() as s:
        ...     s.connect_ex(("127.0.0.1", port)) != 0
        True
    """
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield int(s.getsockname()[1])
