from __future__ import annotations

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
