"""An MCP URL a client names is connected at the address that was checked: a DNS answer
that changes after the check (rebinding to 127.0.0.1) is never asked for.

The root conftest refuses every connect beyond loopback with ``OSError`` before a packet
leaves, so a connect to the "public" address below fails here, and is recorded."""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import uvicorn

from tests.tether.doubles import Factory
from tests.timing import within
from tests.tls import make_cert
from visus.agent import McpMounts, McpServerSpec, ToolRegistry
from visus.agent.pinned_http import PinnedTransport, pinned_client
from visus.mcp_server import mount_mcp
from visus.net import CheckedURL
from visus.tether.server import create_app

PUBLIC = "93.184.216.34"


@pytest.fixture
async def loopback_listener() -> Any:
    """A TCP listener on 127.0.0.1 recording every connection it accepts."""
    accepted: list[int] = []

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield port, accepted
    finally:
        server.close()
        await server.wait_closed()


async def test_a_rebinding_name_never_reaches_loopback(
    loopback_listener: tuple[int, list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    port, accepted = loopback_listener
    lookups: list[str] = []
    connects: list[Any] = []
    guarded_lookup = socket.getaddrinfo
    guarded_connect = socket.socket.connect

    def rebinding_dns(host: Any, service: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else host  # httpcore asks in bytes
        if name != "rebind.test":
            return guarded_lookup(host, service, *args, **kwargs)
        lookups.append(name)
        # A public address for the check, loopback for anyone who asks again.
        address = PUBLIC if len(lookups) == 1 else "127.0.0.1"
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, int(service or 443)))]

    def recorded_connect(sock: socket.socket, address: Any) -> None:
        connects.append(address)
        guarded_connect(sock, address)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding_dns)
    monkeypatch.setattr(socket.socket, "connect", recorded_connect)
    spec = McpServerSpec(name="web", url=f"https://rebind.test:{port}/mcp", public_only=True)
    mounts = McpMounts([spec])
    try:
        warnings = await mounts.start(ToolRegistry().add)
    finally:
        await mounts.aclose()
    assert accepted == []  # nothing reached the loopback listener
    assert lookups == ["rebind.test"]  # the name was resolved once, for the check
    assert connects
    assert {a[0] for a in connects} == {PUBLIC}  # every connect went to the checked address
    [warning] = warnings
    assert "'web'" in warning
    assert "did not start" in warning


async def test_another_origin_is_refused_before_any_connect() -> None:
    checked = CheckedURL("https://mcp.test/mcp", "https", "mcp.test", 443, (PUBLIC,))
    transport = PinnedTransport(checked)
    for url in ("https://elsewhere.test/mcp", "https://mcp.test:8443/mcp", "http://mcp.test/"):
        with pytest.raises(httpx2.ConnectError, match="refused"):
            await transport.handle_async_request(httpx2.Request("POST", url))
    await transport.aclose()


@pytest.fixture
def tls_mcp(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """visus's own MCP endpoint over https on 127.0.0.1, with a certificate for
    ``mcp.test`` (a name nothing resolves: the root conftest refuses its lookup)."""
    ca, cert, key = make_cert(tmp_path, "mcp.test")
    app = create_app(data_dir=tmp_path / "d", runner_factory=Factory(), token="tok")
    mount_mcp(app, roots=[tmp_path], host="mcp.test")  # served under that name
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        app, log_level="warning", lifespan="on", ssl_certfile=str(cert), ssl_keyfile=str(key)
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + within(10)
    while not server.started:
        assert thread.is_alive(), "the https server did not start"
        assert time.monotonic() < deadline, "the https server did not start in time"
        time.sleep(0.01)
    try:
        yield sock.getsockname()[1], ca
    finally:
        server.should_exit = True
        thread.join(timeout=10)


async def _tools(checked: CheckedURL, ca: Path) -> list[str]:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    http = pinned_client(
        checked,
        headers={"Authorization": "Bearer tok"},
        timeout=10,
        verify=ssl.create_default_context(cafile=str(ca)),
    )
    async with (
        http,
        Client(streamable_http_client(checked.url, http_client=http), mode="legacy") as c,
    ):
        return [t.name for t in (await c.list_tools()).tools]


async def test_the_pinned_address_serves_the_name_with_its_certificate(
    tls_mcp: tuple[int, Path],
) -> None:
    port, ca = tls_mcp
    url = f"https://mcp.test:{port}/mcp"
    checked = CheckedURL(url, "https", "mcp.test", port, ("127.0.0.1",))
    assert "view" in await _tools(checked, ca)
    # The certificate is checked against the name, not the address connected to.
    other_url = f"https://other.test:{port}/mcp"
    other = CheckedURL(other_url, "https", "other.test", port, ("127.0.0.1",))
    with pytest.raises(ExceptionGroup) as failed:  # the SDK's task group
        await _tools(other, ca)
    assert "CERTIFICATE_VERIFY_FAILED" in _messages(failed.value)


def _messages(e: BaseException) -> str:
    """Every message in ``e``, its groups and its causes."""
    inner = [*getattr(e, "exceptions", ()), e.__cause__, e.__context__]
    return " ".join([repr(e), *(_messages(x) for x in inner if x is not None)])
