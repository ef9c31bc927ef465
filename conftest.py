"""Suite-wide guards: no test (nor docstring example) reaches the internet, nor
depends on one of visus's default ports being free.

At the repository root so it covers the doctests pytest collects from ``src/visus``
as well as ``tests/``.

Every socket connect and name lookup is checked: loopback addresses, ``localhost``
and Unix sockets pass; anything else raises ``OSError`` before a packet leaves.
Tests marked ``live`` (real providers, run only with API keys) are exempt.

The README's order is ``scripts/serve.sh`` (left running on 8750), then the tests; a
user may run the proxy or the reference server too. So in this process every port
in :data:`DEFAULT_PORTS` is taken, free or not: binding one fails as ``EADDRINUSE``
and connecting to one raises :class:`DefaultPortError` (whatever runs there is the
user's). A test picks a free port (bind port 0). Child processes are not covered:
run the suite once with ``visus serve`` and ``visus proxy`` up on their defaults
(docs/CONTRIBUTING.md).
"""

from __future__ import annotations

import errno
import gc
import ipaddress
import os
import signal
import socket
import sys
from collections.abc import Iterator
from typing import Any

import pytest

#: pg_cluster / pg_url: a throwaway PostgreSQL cluster (tests/pgcluster.py).
pytest_plugins = ["tests.pgcluster"]

# A suite started in the background of a shell without job control (`cmd &` in a
# script) runs with SIGINT ignored, and every command a test starts inherits that: the
# tests that type Ctrl-C at `visus chat` or `visus run` then wait for ever (seen: all
# four, on a loaded machine, which the background run was). A user's terminal gives a
# command the default: so does the suite (a Python handler is reset to the default in
# a child at exec).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# The reference model's answers end in the JSON block of what it saw, which most tests
# read (a chat user gets the prose alone). Set before any reference server starts, in
# this process or a CLI subprocess; tests of the prose unset it or pass json_block=False.
os.environ.setdefault("VISUS_REFERENCE_JSON", "1")
# A CLI command would otherwise start the local reference server that outlives it (for
# the next command): no test leaves one running; tests of that server turn it on.
os.environ.setdefault("VISUS_REFERENCE_SHARED", "0")
# The reference OCR on one onnxruntime thread: the workers already fill the cores, and
# two threads per call spent about half as much CPU again per image (visus.reference.
# vision). The same words either way.
os.environ.setdefault("VISUS_REFERENCE_OCR_THREADS", "1")

_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex
_real_bind = socket.socket.bind
_real_getaddrinfo = socket.getaddrinfo

#: The ports visus and its docs use by default: serve (8750) and the replicas of
#: docs/replicas.md (8751-8753), the reference server (8760), the proxies of the
#: README (8790, 8791) and the Telegram webhook (8443).
DEFAULT_PORTS = frozenset({8443, 8750, 8751, 8752, 8753, 8760, 8790, 8791})


class NetworkBlockedError(OSError):
    """Raised when a test tries to leave loopback."""


class DefaultPortError(RuntimeError):
    """Raised when a test connects to one of :data:`DEFAULT_PORTS`: a server the user
    runs there (not the test's own) would answer. Not an ``OSError``, so no client
    takes it for "nothing listens there"."""


def _default_port(sock: socket.socket, address: Any) -> int | None:
    if sock.family not in (socket.AF_INET, socket.AF_INET6):
        return None
    if isinstance(address, tuple) and len(address) >= 2 and address[1] in DEFAULT_PORTS:
        return int(address[1])
    return None


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
    port = _default_port(sock, address)
    if port is not None:
        raise DefaultPortError(
            f"a test connected to {address!r}: {port} is a visus default port, where the "
            "user's own server may run; start the test's server on a free port"
        )


def _guarded_bind(self: socket.socket, address: Any) -> None:
    port = _default_port(self, address)
    if port is not None:
        raise OSError(
            errno.EADDRINUSE,
            f"{os.strerror(errno.EADDRINUSE)} (in the tests visus's default port {port} "
            "is always taken: pick a free one)",
        )
    return _real_bind(self, address)


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
    mp.setattr(socket.socket, "bind", _guarded_bind)
    mp.setattr(socket, "getaddrinfo", _guarded_getaddrinfo)
    try:
        yield
    finally:
        mp.undo()


@pytest.fixture(autouse=True)
def _sse_streams_outlive_the_test() -> Iterator[None]:
    """Fail a test that leaves sse-starlette's process-wide ``AppStatus.should_exit``
    set: every SSE response after it in this process (the MCP SDK's streamable HTTP)
    would end at once, and a later MCP test fail with "SSE stream ended without a
    response", far from the cause. Plain ``uvicorn.Server.handle_exit`` sets it once
    sse-starlette is imported; stop a server with ``should_exit = True`` or
    ``tether_server`` (:mod:`visus.tether.stopping`)."""
    yield
    sse = sys.modules.get("sse_starlette.sse")
    status = getattr(sse, "AppStatus", None)
    if status is not None and status.should_exit:
        status.should_exit = False  # the tests after this one are not its victims
        pytest.fail(
            "this test set sse-starlette's AppStatus.should_exit (uvicorn's handle_exit): "
            "it ends every later SSE stream in the process"
        )


def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze what collection left alive (src/visus, the frameworks, the test modules:
    it lives to the end anyway), so a full garbage collection scans only what the
    tests make. tests/integrations collects after every test (its conftest says why);
    with the frozen heap, test_langchain.py + test_pydantic_ai.py took 47 s of CPU
    instead of 57 (docs/CONTRIBUTING.md, "Where the time goes")."""
    gc.collect()
    gc.freeze()
