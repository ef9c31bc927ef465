"""The one way visus fetches a URL: https only, an SSRF gate, a byte cap, a deadline.

Every hop is checked before a packet leaves: the scheme (https; plain http only to a
loopback address and only when the caller allows it, for tests and local config),
the host (odd IPv4 spellings such as ``2130706433``, ``0x7f.1`` or ``017700000001``
are parsed as leniently as ``inet_aton`` parses them, so they cannot sneak past),
and every address the name resolves to (loopback, private, link-local, multicast,
reserved, unspecified, IPv4-mapped or -compatible IPv6, 6to4 and NAT64 wrapping a
blocked IPv4 are refused). The name is resolved once and the connection goes to the
checked address, with the Host header and TLS SNI set to the name and the
certificate verified against the name, so a second DNS answer (rebinding) is never
consulted. Redirects are followed by hand, each hop checked again, at most
:data:`visus.limits.NET_MAX_REDIRECTS`. The body is streamed under a byte cap and
one overall deadline. Proxies from the environment are ignored: a proxy would make
its own DNS lookup and bypass the pinned address.

Example:
    >>> from visus.net import check_host
    >>> check_host("0x7f.0.0.1")
    Traceback (most recent call last):
    ...
    visus.errors.BlockedURLError: 0x7f.0.0.1 is a loopback address (127.0.0.1)

    ``fetch("https://example.com/cat.png")`` returns a :class:`Fetched` with the final
    URL, the status, the content type and the bytes.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeAlias, TypedDict

import httpx

from visus import limits
from visus.errors import BlockedURLError, HTTPStatusError, NetError, UnreachableError

__all__ = [
    "CheckedURL",
    "Fetched",
    "Resolver",
    "acheck_url",
    "afetch",
    "check_address",
    "check_host",
    "fetch",
    "parse_ip",
]

#: ``resolver(host, port) -> [address, ...]``: how a name becomes addresses.
Resolver: TypeAlias = Callable[[str, int], list[str]]
IPAddress: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_USER_AGENT = "visus-fetch/0.1"


@dataclass(frozen=True, slots=True)
class Fetched:
    """A fetched body: ``url`` is the final URL after redirects."""

    url: str
    status: int
    content_type: str | None
    data: bytes

    @property
    def media_type(self) -> str | None:
        """The content type without parameters, lowercased (``image/png``)."""
        if not self.content_type:
            return None
        return self.content_type.split(";", 1)[0].strip().lower() or None


# --- the gate -----------------------------------------------------------------------


def _parse_ipv4_lenient(host: str) -> ipaddress.IPv4Address | None:
    """Parse ``host`` the way ``inet_aton`` does: 1-4 parts, decimal, octal or hex."""
    parts = host.split(".")
    if len(parts) > 4 or any(p == "" for p in parts):
        return None
    values: list[int] = []
    for part in parts:
        try:
            if part[:2].lower() == "0x":
                values.append(int(part[2:] or "0", 16))
            elif len(part) > 1 and part[0] == "0":
                values.append(int(part[1:], 8))
            else:
                values.append(int(part, 10))
        except ValueError:
            return None
    if any(v < 0 for v in values):
        return None
    *head, last = values
    if any(v > 255 for v in head) or last >= 256 ** (4 - len(head)):
        return None
    number = last
    for i, v in enumerate(head):
        number |= v << (8 * (3 - i))
    return ipaddress.IPv4Address(number)


def parse_ip(host: str) -> IPAddress | None:
    """The address ``host`` spells, however oddly, or None when it is a name.

    Example:
        >>> str(parse_ip("127.1")), str(parse_ip("2130706433")), parse_ip("example.com")
        ('127.0.0.1', '127.0.0.1', None)
    """
    host = host.strip("[]")
    if ":" in host:
        try:
            return ipaddress.IPv6Address(host)
        except ValueError:
            return None
    # A trailing dot is the DNS root; resolvers accept "127.0.0.1." too.
    return _parse_ipv4_lenient(host[:-1] if host.endswith(".") else host)


def _embedded_v4(ip: ipaddress.IPv6Address) -> tuple[str, ipaddress.IPv4Address] | None:
    if ip.ipv4_mapped is not None:
        return "IPv4-mapped", ip.ipv4_mapped
    if ip.sixtofour is not None:
        return "6to4", ip.sixtofour
    if ip in _NAT64:
        return "NAT64", ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if int(ip) >> 32 == 0 and int(ip) > 1:
        return "IPv4-compatible", ipaddress.IPv4Address(int(ip))
    return None


def _reason(ip: IPAddress) -> str | None:
    """Why ``ip`` is no place to fetch from, or None when it is a public address."""
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_v4(ip)
        if embedded is not None:
            form, v4 = embedded
            if form in ("IPv4-mapped", "IPv4-compatible"):
                return f"an {form} IPv6 address ({v4})"
            inner = _reason(v4)
            return None if inner is None else f"a {form} address wrapping {v4}, {inner}"
        if ip.is_site_local:
            return "a site-local address"
    checks = (
        ("is_unspecified", "an unspecified address"),
        ("is_loopback", "a loopback address"),
        ("is_link_local", "a link-local address"),
        ("is_multicast", "a multicast address"),
        ("is_private", "a private address"),
        ("is_reserved", "a reserved address"),
    )
    for attr, text in checks:
        if getattr(ip, attr):
            return text
    if not ip.is_global:
        return "not a globally routable address"
    return None


def check_address(address: str | IPAddress, *, allow_loopback: bool = False) -> IPAddress:
    """Return the address if it is safe to connect to, else raise :class:`BlockedURLError`.

    Example:
        >>> check_address("169.254.169.254")
        Traceback (most recent call last):
        ...
        visus.errors.BlockedURLError: 169.254.169.254 is a link-local address
    """
    ip = address if not isinstance(address, str) else parse_ip(address)
    if ip is None:
        raise BlockedURLError(f"{address!r} is not an IP address")
    if allow_loopback and ip.is_loopback:
        return ip
    reason = _reason(ip)
    if reason is not None:
        raise BlockedURLError(f"{ip} is {reason}")
    return ip


def check_host(host: str, *, allow_loopback: bool = False) -> IPAddress | None:
    """Check a URL host before any lookup: the address it spells, or None for a name.

    A literal address must be safe and written canonically (dotted decimal, or IPv6);
    ``localhost`` and ``*.localhost`` are refused by name.
    """
    if not host:
        raise BlockedURLError("the URL has no host")
    bare = host.strip("[]")
    ip = parse_ip(bare)
    if ip is None:
        name = bare.rstrip(".").lower()
        if (name == "localhost" or name.endswith(".localhost")) and not allow_loopback:
            raise BlockedURLError(f"{host} is a loopback name")
        return None
    reason = None if allow_loopback and ip.is_loopback else _reason(ip)
    if reason is not None:
        raise BlockedURLError(f"{host} is {reason}" + ("" if bare == str(ip) else f" ({ip})"))
    if isinstance(ip, ipaddress.IPv4Address) and bare != str(ip):
        raise BlockedURLError(f"{host} is an unusual spelling of {ip}; write it as {ip}")
    return ip


def _system_resolver(host: str, port: int) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as e:
        raise UnreachableError(f"cannot resolve {host}: {e}") from e
    return [str(info[4][0]) for info in infos]


@dataclass(frozen=True, slots=True)
class _Hop:
    """One checked request: the URL as asked, and where and how to connect."""

    url: httpx.URL
    pinned: httpx.URL
    headers: Mapping[str, str]
    extensions: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class CheckedURL:
    """A URL checked once, with the addresses its host was checked at: a client that
    connects to one of ``addresses`` (and to nothing else) talks to what was checked,
    whatever the name resolves to later (:func:`acheck_url`).

    ``host`` is the URL's host as sent (lowercase, IDNA, no brackets), ``port`` the
    port it connects to (the scheme's default when the URL names none).
    """

    url: str
    scheme: str
    host: str
    port: int
    addresses: tuple[str, ...]


def _parse_url(url: str | httpx.URL) -> httpx.URL:
    try:
        return httpx.URL(url)
    except (httpx.InvalidURL, TypeError) as e:
        raise BlockedURLError(f"not a valid URL: {url!r}") from e


def _check_url(url: httpx.URL, allow_loopback_http: bool) -> IPAddress | None:
    if url.scheme not in ("https", "http"):
        raise BlockedURLError(f"{url}: scheme {url.scheme!r} is not allowed (https only)")
    if url.userinfo:
        raise BlockedURLError(f"{url.copy_with(username=None, password=None)}: credentials in URL")
    host = url.raw_host.decode("ascii")
    try:
        ip = check_host(host, allow_loopback=allow_loopback_http and url.scheme == "http")
    except BlockedURLError as e:
        raise BlockedURLError(f"refused {url}: {e}") from None
    if url.scheme == "http" and not allow_loopback_http:
        raise BlockedURLError(f"{url}: plain http is not allowed (https only)")
    return ip


def _pin(url: httpx.URL, ip: IPAddress | None, addresses: Iterable[str], http: bool) -> list[_Hop]:
    """One request per checked address, in the resolver's order (tried until one connects)."""
    if ip is None:
        try:
            checked = [check_address(a.split("%", 1)[0], allow_loopback=http) for a in addresses]
        except BlockedURLError as e:
            raise BlockedURLError(f"refused {url}: {url.host} resolves to {e}") from None
        if not checked:
            raise NetError(f"{url.host} resolved to no address")
        if http and not all(a.is_loopback for a in checked):
            raise BlockedURLError(f"{url}: plain http is only allowed to loopback")
    elif http and not ip.is_loopback:
        raise BlockedURLError(f"{url}: plain http is only allowed to loopback")
    else:
        checked = [ip]
    name = url.raw_host.decode("ascii")
    default_port = 443 if url.scheme == "https" else 80
    host_header = name if url.port in (None, default_port) else f"{name}:{url.port}"
    if ":" in name:
        host_header = f"[{name}]" if url.port in (None, default_port) else f"[{name}]:{url.port}"
    extensions = {"sni_hostname": name} if url.scheme == "https" and parse_ip(name) is None else {}
    headers = {"Host": host_header, "User-Agent": _USER_AGENT, "Accept-Encoding": "identity"}
    return [
        _Hop(url=url, pinned=url.copy_with(host=str(a)), headers=headers, extensions=extensions)
        for a in dict.fromkeys(checked)
    ]


def _request(client: httpx.Client | httpx.AsyncClient, hop: _Hop, deadline: float) -> httpx.Request:
    return client.build_request(
        "GET",
        hop.pinned,
        headers=dict(hop.headers),
        extensions=dict(hop.extensions),
        timeout=_remaining(deadline),
    )


def _send(client: httpx.Client, hops: list[_Hop], deadline: float) -> httpx.Response:
    for hop in hops[:-1]:
        try:
            return client.send(_request(client, hop, deadline), stream=True)
        except httpx.ConnectError:
            continue  # another checked address of the same name may answer
    return client.send(_request(client, hops[-1], deadline), stream=True)


async def _asend(client: httpx.AsyncClient, hops: list[_Hop], deadline: float) -> httpx.Response:
    for hop in hops[:-1]:
        try:
            return await client.send(_request(client, hop, deadline), stream=True)
        except httpx.ConnectError:
            continue
    return await client.send(_request(client, hops[-1], deadline), stream=True)


def _port(url: httpx.URL) -> int:
    return url.port or (443 if url.scheme == "https" else 80)


def _next_url(current: httpx.URL, response: httpx.Response) -> httpx.URL | None:
    if response.status_code not in _REDIRECTS:
        return None
    location = response.headers.get("location")
    if not location:
        return None
    try:
        nxt = current.join(location)
    except (httpx.InvalidURL, TypeError) as e:
        raise BlockedURLError(f"{current}: redirect to an invalid URL {location!r}") from e
    if current.scheme == "https" and nxt.scheme != "https":
        raise BlockedURLError(f"{current}: redirect from https to {nxt.scheme} ({nxt})")
    return nxt


class _Body:
    """Collects a body under the byte cap and the deadline."""

    def __init__(self, url: httpx.URL, response: httpx.Response, max_bytes: int, deadline: float):
        self.url, self.max_bytes, self.deadline = url, max_bytes, deadline
        self.chunks: list[bytes] = []
        self.size = 0
        if response.status_code >= 400:
            raise HTTPStatusError(
                f"{url}: HTTP {response.status_code} {response.reason_phrase}",
                status=response.status_code,
            )
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > max_bytes:
            raise NetError(self._too_large(f"declares {int(declared)} bytes"))

    def _too_large(self, what: str) -> str:
        return f"{self.url}: body {what}, over the limit of {self.max_bytes} bytes (max_bytes)"

    def add(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > self.max_bytes:
            raise NetError(self._too_large(f"passed {self.max_bytes} bytes"))
        if time.monotonic() > self.deadline:
            raise _Deadline
        self.chunks.append(chunk)

    def done(self, response: httpx.Response) -> Fetched:
        return Fetched(
            url=str(self.url),
            status=response.status_code,
            content_type=response.headers.get("content-type"),
            data=b"".join(self.chunks),
        )


class _Deadline(Exception):
    pass


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise _Deadline
    return left


def _too_many(url: httpx.URL) -> NetError:
    return NetError(f"{url}: more than {limits.NET_MAX_REDIRECTS} redirects (NET_MAX_REDIRECTS)")


def _timeout_error(url: str, timeout: float) -> NetError:
    return NetError(f"{url}: timed out after {timeout:g} s (timeout)")


class _ClientArgs(TypedDict):
    trust_env: bool
    follow_redirects: bool
    timeout: float
    verify: ssl.SSLContext | bool


def _client_args(timeout: float) -> _ClientArgs:
    # trust_env=False: an environment proxy would resolve the name itself.
    return {"trust_env": False, "follow_redirects": False, "timeout": timeout, "verify": True}


def fetch(
    url: str,
    *,
    max_bytes: int = limits.NET_MAX_BYTES,
    timeout: float = limits.NET_TIMEOUT_SECONDS,
    allow_loopback_http: bool = False,
    resolver: Resolver | None = None,
) -> Fetched:
    """GET ``url`` through the SSRF gate, following at most 5 checked redirects.

    Raises :class:`BlockedURLError` (the message says why) before connecting to a
    refused target, and :class:`NetError` for timeouts, the byte cap, HTTP errors.

    Example:
        >>> fetch("http://10.0.0.1/")
        Traceback (most recent call last):
        ...
        visus.errors.BlockedURLError: refused http://10.0.0.1/: 10.0.0.1 is a private address
    """
    resolve = resolver or _system_resolver
    deadline = time.monotonic() + timeout
    current = _parse_url(url)
    try:
        with httpx.Client(**_client_args(timeout)) as client:
            for _ in range(limits.NET_MAX_REDIRECTS + 1):
                ip = _check_url(current, allow_loopback_http)
                http = current.scheme == "http"
                names = [] if ip is not None else resolve(current.raw_host.decode(), _port(current))
                response = _send(client, _pin(current, ip, names, http), deadline)
                try:
                    nxt = _next_url(current, response)
                    if nxt is None:
                        body = _Body(current, response, max_bytes, deadline)
                        for chunk in response.iter_bytes():
                            body.add(chunk)
                        return body.done(response)
                finally:
                    response.close()
                current = nxt
            raise _too_many(_parse_url(url))
    except _Deadline:
        raise _timeout_error(url, timeout) from None
    except httpx.TimeoutException as e:
        raise _timeout_error(url, timeout) from e
    except (httpx.ConnectError, httpx.NetworkError, httpx.ProtocolError) as e:
        raise UnreachableError(f"{current}: {type(e).__name__}: {e}") from e
    except httpx.HTTPError as e:
        raise NetError(f"{current}: {type(e).__name__}: {e}") from e


async def acheck_url(url: str, *, resolver: Resolver | None = None) -> CheckedURL:
    """Check ``url`` once (https to public addresses only) and say where it may connect.

    For URLs another library connects to (an MCP server named by a remote client): the
    same scheme, host and address checks as :func:`afetch`, every address the name
    resolves to included, and :class:`BlockedURLError` if any fails. The caller then
    connects to the returned addresses only (``visus.agent.pinned_http``), never
    resolving the name again: a DNS answer that changes after the check (rebinding to
    127.0.0.1) is never consulted.

    Example:
        >>> import asyncio
        >>> asyncio.run(acheck_url("https://169.254.169.254/mcp"))
        Traceback (most recent call last):
        ...
        visus.errors.BlockedURLError: refused https://169.254.169.254/mcp: 169.254.169.254 is ...
        >>> public = lambda host, port: ["1.1.1.1"]
        >>> checked = asyncio.run(acheck_url("https://MCP.example/x", resolver=public))
        >>> checked.host, checked.port, checked.addresses
        ('mcp.example', 443, ('1.1.1.1',))
    """
    resolve = resolver or _system_resolver
    current = _parse_url(url)
    ip = _check_url(current, allow_loopback_http=False)
    host = current.raw_host.decode("ascii").lower()
    if ip is not None:
        addresses: list[str] = [str(ip)]
    else:
        addresses = []
        for address in await asyncio.to_thread(resolve, host, _port(current)):
            try:
                addresses.append(str(check_address(address.split("%", 1)[0])))
            except BlockedURLError as e:
                raise BlockedURLError(f"refused {url}: {host} resolves to {e}") from None
        if not addresses:
            raise NetError(f"{host} resolved to no address")
    return CheckedURL(
        url=str(current),
        scheme=current.scheme,
        host=host,
        port=_port(current),
        addresses=tuple(dict.fromkeys(addresses)),
    )


async def afetch(
    url: str,
    *,
    max_bytes: int = limits.NET_MAX_BYTES,
    timeout: float = limits.NET_TIMEOUT_SECONDS,
    allow_loopback_http: bool = False,
    resolver: Resolver | None = None,
) -> Fetched:
    """The async twin of :func:`fetch`; the resolver runs in a worker thread."""
    resolve = resolver or _system_resolver
    deadline = time.monotonic() + timeout
    current = _parse_url(url)
    try:
        async with httpx.AsyncClient(**_client_args(timeout)) as client:
            for _ in range(limits.NET_MAX_REDIRECTS + 1):
                ip = _check_url(current, allow_loopback_http)
                http = current.scheme == "http"
                names = (
                    []
                    if ip is not None
                    else await asyncio.to_thread(resolve, current.raw_host.decode(), _port(current))
                )
                response = await _asend(client, _pin(current, ip, names, http), deadline)
                try:
                    nxt = _next_url(current, response)
                    if nxt is None:
                        body = _Body(current, response, max_bytes, deadline)
                        async for chunk in response.aiter_bytes():
                            body.add(chunk)
                        return body.done(response)
                finally:
                    await response.aclose()
                current = nxt
            raise _too_many(_parse_url(url))
    except _Deadline:
        raise _timeout_error(url, timeout) from None
    except httpx.TimeoutException as e:
        raise _timeout_error(url, timeout) from e
    except (httpx.ConnectError, httpx.NetworkError, httpx.ProtocolError) as e:
        raise UnreachableError(f"{current}: {type(e).__name__}: {e}") from e
    except httpx.HTTPError as e:
        raise NetError(f"{current}: {type(e).__name__}: {e}") from e
