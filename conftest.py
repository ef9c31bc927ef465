"""Suite-wide guards: no test (nor docstring example) reaches the internet.

At the repository root so it covers the doctests pytest collects from ``src/visus``
as well as ``tests/``.

Every socket connect and name lookup is checked: loopback addresses, ``localhost``
and Unix sockets pass; anything else raises ``OSError`` before a packet leaves.
Tests marked ``live`` (real providers, run only with API keys) are exempt.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Iterator
from typing import Any

import pytest

#: pg_cluster / pg_url: a throwaway PostgreSQL cluster (tests/pgcluster.py).
pytest_plugins = ["tests.pgcluster"]

# The reference model's answers end in the JSON block of what it saw, which most tests
# read (a chat user gets the prose alone). Set before any reference server starts, in
# this process or a CLI subprocess; tests of the prose unset it or pass json_block=False.
os.environ.setdefault("VISUS_REFERENCE_JSON", "1")

_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex
_real_getaddrinfo = socket.getaddrinfo


class NetworkBlockedError(OSError):
    """Raised when a test tries to leave loopback."""


def _is_loopback_host(host: object) -> bool:
    if not isinstance(host, str):
        return False
    host = host.strip("[]")
    if host in {"localhost", ""}:
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


def _check_address(sock: socket.socket, address: Any) -> None:
    if sock.family == getattr(socket, "AF_UNIX", object()):
        return
    host = address[0] if isinstance(address, tuple) and address else address
    if not _is_loopback_host(host):
        raise NetworkBlockedError(f"network access blocked in tests: {address!r}")


def _guarded_connect(self: socket.socket, address: Any) -> None:
    _check_address(self, address)
    return _real_connect(self, address)


def _guarded_connect_ex(self: socket.socket, address: Any) -> int:
    _check_address(self, address)
    return _real_connect_ex(self, address)


def _guarded_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
    if host is not None and not _is_loopback_host(
        host.decode() if isinstance(host, bytes) else host
    ):
        try:
            ipaddress.ip_address(str(host).strip("[]"))
        except ValueError:
            raise NetworkBlockedError(f"DNS lookup blocked in tests: {host!r}") from None
    return _real_getaddrinfo(host, *args, **kwargs)


@pytest.fixture(autouse=True)
def _block_network(request: pytest.FixtureRequest) -> Iterator[None]:
    if request.node.get_closest_marker("live"):
        yield
        return
    mp = pytest.MonkeyPatch()
    mp.setattr(socket.socket, "connect", _guarded_connect)
    mp.setattr(socket.socket, "connect_ex", _guarded_connect_ex)
    mp.setattr(socket, "getaddrinfo", _guarded_getaddrinfo)
    try:
        yield
    finally:
        mp.undo()
