from __future__ import annotations

import errno
import socket

import pytest


def test_non_loopback_connect_is_blocked() -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        with pytest.raises(OSError, match="blocked in tests"):
            s.connect(("93.184.216.34", 443))
    finally:
        s.close()


def test_dns_lookup_of_public_name_is_blocked() -> None:
    with pytest.raises(OSError, match="blocked in tests"):
        socket.getaddrinfo("example.com", 443)


def test_loopback_is_allowed() -> None:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        client.connect(server.getsockname())
    finally:
        client.close()
        server.close()


@pytest.mark.parametrize("port", [8750, 8760, 8790])
def test_a_default_port_is_always_taken(port: int) -> None:
    # As when the user's `scripts/serve.sh` holds 8750 (the README's order): a test
    # that binds a default port fails whether or not it happens to be free.
    with socket.socket() as s, pytest.raises(OSError, match="default port") as taken:
        s.bind(("127.0.0.1", port))
    assert taken.value.errno == errno.EADDRINUSE


def test_connecting_to_a_default_port_is_an_error_not_a_refusal() -> None:
    from conftest import DefaultPortError

    with socket.socket() as s, pytest.raises(DefaultPortError):
        s.connect(("127.0.0.1", 8750))
