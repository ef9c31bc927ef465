"""The SSRF gate and the capped fetch, against servers the tests start on loopback."""

from __future__ import annotations

import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.timing import within
from tests.tls import make_cert
from visus import limits, net
from visus.errors import BlockedURLError, NetError


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: list[tuple[str, str]]  # (path, Host header), set per server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, body: bytes = b"", **headers: str) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k.replace("_", "-"), v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        type(self).seen.append((self.path, self.headers.get("Host", "")))
        path = self.path
        if path == "/png":
            self._send(200, b"\x89PNG fake", Content_Type="image/png")
        elif path == "/host":
            self._send(200, self.headers.get("Host", "").encode(), Content_Type="text/plain")
        elif path == "/to-private":
            self._send(302, Location="http://10.0.0.1/")
        elif path == "/to-metadata":
            self._send(302, Location="http://169.254.169.254/latest/meta-data/")
        elif path == "/to-decimal":
            self._send(302, Location="http://2130706433/png")
        elif path.startswith("/chain/"):
            left = int(path.rsplit("/", 1)[1])
            if left == 0:
                self._send(200, b"end", Content_Type="text/plain")
            else:
                self._send(302, Location=f"/chain/{left - 1}")
        elif path == "/big":
            self._send(200, b"x" * 5000, Content_Type="application/octet-stream")
        elif path == "/big-unsized":
            # No Content-Length: the cap must bite while streaming.
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            for _ in range(50):
                self.wfile.write(b"y" * 1000)
            self.close_connection = True
        elif path == "/slow":
            # Later than any bound a test sets: until the server stops (or a minute).
            _RELEASE.wait(60)
            self._send(200, b"late")
        elif path == "/drip":
            self.send_response(200)
            self.send_header("Content-Length", "2000")
            self.end_headers()
            try:  # a byte every 50 ms: 100 s for the whole body
                for _ in range(2000):
                    self.wfile.write(b"d")
                    self.wfile.flush()
                    time.sleep(0.05)
            except OSError:
                pass
        elif path == "/missing":
            self._send(404, b"nope")
        else:
            self._send(500)


#: Set when a test's server stops: what /slow waits for.
_RELEASE = threading.Event()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # aborted connections (byte cap, timeouts, rejected TLS) are the point


@pytest.fixture
def server() -> Iterator[tuple[str, list[tuple[str, str]]]]:
    seen: list[tuple[str, str]] = []
    handler = type("H", (_Handler,), {"seen": seen})
    httpd = _Server(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    _RELEASE.clear()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
    finally:
        _RELEASE.set()
        httpd.shutdown()
        httpd.server_close()


def _never(host: str, port: int) -> list[str]:
    raise AssertionError(f"resolver must not be called for {host}")


# --- the blocked corpus ---------------------------------------------------------------

BLOCKED = [
    "https://127.0.0.1/",
    "https://localhost/",
    "https://LOCALHOST./",
    "https://foo.localhost/",
    "https://10.0.0.1/",
    "https://172.16.0.1/",
    "https://192.168.1.1/",
    "https://169.254.169.254/latest/meta-data/",
    "https://[::1]/",
    "https://[::ffff:127.0.0.1]/",
    "https://[::ffff:8.8.8.8]/",
    "https://[::127.0.0.1]/",
    "https://[fe80::1]/",
    "https://[fc00::1]/",
    "https://[2002:a00:1::]/",
    "https://[64:ff9b::a9fe:a9fe]/",
    "https://2130706433/",
    "https://0x7f.0.0.1/",
    "https://017700000001/",
    "https://127.1/",
    "https://0x7f000001/",
    "https://0/",
    "https://0.0.0.0/",
    "https://[::]/",
    "https://224.0.0.1/",
    "https://240.0.0.1/",
    "https://100.64.0.1/",
    "https://255.255.255.255/",
    "https://127.0.0.1./",
]


@pytest.mark.parametrize("url", BLOCKED)
def test_blocked_targets_are_refused_before_any_lookup(url: str) -> None:
    with pytest.raises(BlockedURLError, match="refused"):
        net.fetch(url, resolver=_never)


@pytest.mark.parametrize("url", ["https://127.0.0.1/", "https://2130706433/", "https://10.0.0.1/"])
async def test_async_fetch_refuses_the_same(url: str) -> None:
    with pytest.raises(BlockedURLError):
        await net.afetch(url, resolver=_never)


@pytest.mark.parametrize(
    ("host", "canonical", "words"),
    [
        ("2130706433", "127.0.0.1", "loopback"),
        ("0x7f.0.0.1", "127.0.0.1", "loopback"),
        ("017700000001", "127.0.0.1", "loopback"),
        ("127.1", "127.0.0.1", "loopback"),
        ("0xa.1", "10.0.0.1", "private"),
        ("169.254.43518", "169.254.169.254", "link-local"),
    ],
)
def test_odd_spellings_parse_like_inet_aton(host: str, canonical: str, words: str) -> None:
    assert str(net.parse_ip(host)) == canonical
    # The C library agrees on what the spelling means.
    assert socket.inet_ntoa(socket.inet_aton(host)) == canonical
    with pytest.raises(BlockedURLError, match=rf"{words}.*\({canonical}\)"):
        net.check_host(host)


def test_public_address_spelled_oddly_is_still_refused() -> None:
    with pytest.raises(BlockedURLError, match=r"unusual spelling of 8\.8\.8\.8"):
        net.check_host("0x8.8.8.8")
    assert net.check_host("8.8.8.8") == ipaddress.ip_address("8.8.8.8")


def test_names_and_public_addresses_pass_the_host_check() -> None:
    assert net.check_host("example.com") is None
    assert net.check_host("1.2.3.4.5") is None  # not an address: a name, checked after lookup
    assert net.check_address("2606:4700::1111") == ipaddress.ip_address("2606:4700::1111")
    # 6to4 and NAT64 wrapping a public address are public
    assert net.check_address("2002:808:808::1") is not None
    assert net.check_address("64:ff9b::808:808") is not None


def test_name_resolving_to_a_private_address_is_refused() -> None:
    calls: list[tuple[str, int]] = []

    def resolver(host: str, port: int) -> list[str]:
        calls.append((host, port))
        return ["10.1.2.3"]

    with pytest.raises(BlockedURLError, match=r"internal\.example resolves to 10\.1\.2\.3"):
        net.fetch("https://internal.example/x.png", resolver=resolver)
    assert calls == [("internal.example", 443)]


def test_any_blocked_answer_among_several_refuses() -> None:
    def resolver(host: str, port: int) -> list[str]:
        return ["93.184.216.34", "169.254.169.254"]

    with pytest.raises(BlockedURLError, match="link-local"):
        net.fetch("https://mixed.example/", resolver=resolver)


# --- schemes --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url", ["http://example.com/", "ftp://example.com/x", "file:///etc/passwd", "gopher://x/"]
)
def test_only_https(url: str) -> None:
    with pytest.raises(BlockedURLError, match="not allowed"):
        net.fetch(url, resolver=_never)


def test_http_to_loopback_needs_the_flag(server: tuple[str, list[tuple[str, str]]]) -> None:
    base, seen = server
    with pytest.raises(BlockedURLError):
        net.fetch(base + "/png")
    assert seen == []
    got = net.fetch(base + "/png", allow_loopback_http=True)
    assert got.data == b"\x89PNG fake"


def test_http_flag_does_not_open_private_or_public_http() -> None:
    with pytest.raises(BlockedURLError, match="private"):
        net.fetch("http://10.0.0.1/", allow_loopback_http=True, resolver=_never)

    def public(host: str, port: int) -> list[str]:
        return ["93.184.216.34"]

    with pytest.raises(BlockedURLError, match="only allowed to loopback"):
        net.fetch("http://example.com/", allow_loopback_http=True, resolver=public)


def test_credentials_in_url_are_refused() -> None:
    with pytest.raises(BlockedURLError, match="credentials"):
        net.fetch("https://user:secret@example.com/", resolver=_never)


# --- a real loopback server -----------------------------------------------------------


def test_fetch_reports_status_type_and_bytes(server: tuple[str, list[tuple[str, str]]]) -> None:
    base, _ = server
    got = net.fetch(base + "/png", allow_loopback_http=True)
    assert got.status == 200
    assert got.content_type == "image/png"
    assert got.media_type == "image/png"
    assert got.url == base + "/png"


async def test_afetch_reads_the_same(server: tuple[str, list[tuple[str, str]]]) -> None:
    base, _ = server
    got = await net.afetch(base + "/png", allow_loopback_http=True)
    assert (got.status, got.content_type, got.data) == (200, "image/png", b"\x89PNG fake")


def test_connects_to_the_checked_address_with_the_name_as_host(
    server: tuple[str, list[tuple[str, str]]],
) -> None:
    base, _ = server
    port = int(base.rsplit(":", 1)[1])
    calls: list[str] = []

    def resolver(host: str, p: int) -> list[str]:
        calls.append(host)
        return ["127.0.0.1"]

    # conftest blocks DNS for visus.test: only the pinned address can reach the server.
    got = net.fetch(f"http://visus.test:{port}/host", allow_loopback_http=True, resolver=resolver)
    assert got.data == f"visus.test:{port}".encode()
    assert calls == ["visus.test"]
    assert got.url == f"http://visus.test:{port}/host"


def test_next_checked_address_is_tried_when_one_refuses(
    server: tuple[str, list[tuple[str, str]]],
) -> None:
    base, seen = server
    port = int(base.rsplit(":", 1)[1])

    def resolver(host: str, p: int) -> list[str]:
        return ["::1", "127.0.0.1"]  # the server listens on 127.0.0.1 only

    got = net.fetch(f"http://dual.test:{port}/png", allow_loopback_http=True, resolver=resolver)
    assert got.data == b"\x89PNG fake"
    assert seen == [("/png", f"dual.test:{port}")]


async def test_async_tries_the_next_address_too(
    server: tuple[str, list[tuple[str, str]]],
) -> None:
    base, _ = server
    port = int(base.rsplit(":", 1)[1])

    def resolver(host: str, p: int) -> list[str]:
        return ["::1", "127.0.0.1"]

    got = await net.afetch(
        f"http://dual.test:{port}/png", allow_loopback_http=True, resolver=resolver
    )
    assert got.status == 200


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("/to-private", "10.0.0.1"),
        ("/to-metadata", "169.254.169.254"),
        ("/to-decimal", "2130706433"),
    ],
)
def test_redirect_to_a_blocked_target_is_refused(
    server: tuple[str, list[tuple[str, str]]], path: str, words: str
) -> None:
    base, seen = server
    # conftest would raise a plain OSError on connect; BlockedURLError proves we never tried.
    with pytest.raises(BlockedURLError, match=words):
        net.fetch(base + path, allow_loopback_http=True)
    assert [p for p, _ in seen] == [path]


async def test_async_redirect_to_private_is_refused(
    server: tuple[str, list[tuple[str, str]]],
) -> None:
    base, _ = server
    with pytest.raises(BlockedURLError, match=r"10\.0\.0\.1"):
        await net.afetch(base + "/to-private", allow_loopback_http=True)


def test_redirects_are_followed_up_to_the_limit(
    server: tuple[str, list[tuple[str, str]]],
) -> None:
    base, seen = server
    n = limits.NET_MAX_REDIRECTS
    got = net.fetch(f"{base}/chain/{n}", allow_loopback_http=True)
    assert got.data == b"end"
    assert got.url == f"{base}/chain/0"
    assert len(seen) == n + 1
    seen.clear()
    with pytest.raises(NetError, match=f"more than {n} redirects"):
        net.fetch(f"{base}/chain/{n + 1}", allow_loopback_http=True)
    assert len(seen) == n + 1


def test_byte_cap_from_content_length(server: tuple[str, list[tuple[str, str]]]) -> None:
    base, _ = server
    with pytest.raises(NetError, match=r"declares 5000 bytes.*limit of 1000 bytes \(max_bytes\)"):
        net.fetch(base + "/big", max_bytes=1000, allow_loopback_http=True)
    assert len(net.fetch(base + "/big", max_bytes=5000, allow_loopback_http=True).data) == 5000


def test_byte_cap_while_streaming(server: tuple[str, list[tuple[str, str]]]) -> None:
    base, _ = server
    with pytest.raises(NetError, match=r"passed 10000 bytes"):
        net.fetch(base + "/big-unsized", max_bytes=10_000, allow_loopback_http=True)


async def test_async_byte_cap_while_streaming(server: tuple[str, list[tuple[str, str]]]) -> None:
    base, _ = server
    with pytest.raises(NetError, match=r"passed 10000 bytes"):
        await net.afetch(base + "/big-unsized", max_bytes=10_000, allow_loopback_http=True)


def test_timeout_waiting_for_headers(server: tuple[str, list[tuple[str, str]]]) -> None:
    base, _ = server
    start = time.monotonic()
    with pytest.raises(NetError, match=r"timed out after 0\.3 s"):
        net.fetch(base + "/slow", timeout=0.3, allow_loopback_http=True)
    assert time.monotonic() - start < within(1.2)


def test_overall_deadline_beats_a_slow_drip(server: tuple[str, list[tuple[str, str]]]) -> None:
    base, _ = server
    start = time.monotonic()
    # Each byte arrives well inside the timeout; the whole body does not.
    with pytest.raises(NetError, match="timed out"):
        net.fetch(base + "/drip", timeout=0.5, allow_loopback_http=True)
    assert time.monotonic() - start < within(1.5)


def test_http_error_status_is_a_net_error(server: tuple[str, list[tuple[str, str]]]) -> None:
    base, _ = server
    with pytest.raises(NetError, match="HTTP 404"):
        net.fetch(base + "/missing", allow_loopback_http=True)


def test_connection_refused_is_a_net_error() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(NetError) as info:
        net.fetch(f"http://127.0.0.1:{port}/", allow_loopback_http=True)
    assert not isinstance(info.value, BlockedURLError)


# --- https: SNI and certificate checked against the name, connection to the pin -------


@pytest.fixture
def tls_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[int, list[str | None]]]:
    """An https server on loopback with a cert for ``visus.test``; the gate lets loopback
    through and the client trusts the test CA, nothing else about the fetch changes."""
    ca, cert, key = make_cert(tmp_path, "visus.test")
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    snis: list[str | None] = []

    def on_sni(sock: Any, name: str | None, ctx: Any) -> None:
        snis.append(name)

    server_ctx.sni_callback = on_sni
    seen: list[tuple[str, str]] = []
    httpd = _Server(("127.0.0.1", 0), type("H", (_Handler,), {"seen": seen}))
    httpd.socket = server_ctx.wrap_socket(httpd.socket, server_side=True)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()

    client_ctx = ssl.create_default_context(cafile=str(ca))
    real_args = net._client_args
    monkeypatch.setattr(net, "_client_args", lambda t: {**real_args(t), "verify": client_ctx})
    real_reason = net._reason
    monkeypatch.setattr(net, "_reason", lambda ip: None if ip.is_loopback else real_reason(ip))
    try:
        yield httpd.server_address[1], snis
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_https_pins_the_address_and_verifies_the_name(
    tls_server: tuple[int, list[str | None]],
) -> None:
    port, snis = tls_server
    calls: list[str] = []

    def resolver(host: str, p: int) -> list[str]:
        calls.append(host)
        return ["127.0.0.1"]

    got = net.fetch(f"https://visus.test:{port}/host", resolver=resolver)
    assert got.data == f"visus.test:{port}".encode()
    assert snis == ["visus.test"]
    assert calls == ["visus.test"]


def test_https_certificate_for_another_name_is_rejected(
    tls_server: tuple[int, list[str | None]],
) -> None:
    port, _ = tls_server

    def resolver(host: str, p: int) -> list[str]:
        return ["127.0.0.1"]

    with pytest.raises(NetError, match=r"(?i)certificate|hostname"):
        net.fetch(f"https://other.test:{port}/host", resolver=resolver)


def test_https_redirect_to_http_is_refused() -> None:
    fake = net._parse_url("https://a.example/")

    response = httpx.Response(302, headers={"location": "http://a.example/plain"})
    with pytest.raises(BlockedURLError, match="from https to http"):
        net._next_url(fake, response)
    assert net._next_url(fake, httpx.Response(302, headers={"location": "/b"})) == httpx.URL(
        "https://a.example/b"
    )
