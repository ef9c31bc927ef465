"""Content codings the proxy reads: compressed request bodies, and what it asks the upstream for.

A client may compress its request body (``Content-Encoding: gzip``, ``deflate`` or
``zstd``); the proxy decompresses it (never past its body cap: a small bomb cannot
grow into gigabytes) so its images are fixed like a plain body's.

The proxy reads an upstream's answer only to explain a refused image, and it can read
only what it can decode. So it asks the upstream for the codings of the client's
``Accept-Encoding`` it can read (:data:`READABLE`); a Node client's ``br`` is dropped,
and the upstream answers gzip or plain, which that client reads too. An answer in a
coding it still cannot read is passed on as it came, header and all.

Example:
    >>> readable_accept("gzip, deflate, br")
    'gzip, deflate'
    >>> readable_accept("br")
    'identity'
    >>> import gzip
    >>> decode_body(gzip.compress(b'{"a": 1}'), "gzip", limit=100)
    b'{"a": 1}'
"""

from __future__ import annotations

import json
import zlib
from typing import Any, Final

__all__ = [
    "READABLE",
    "BodyTooLarge",
    "UnknownCoding",
    "decode_body",
    "parse_json",
    "readable_accept",
    "serialise_json",
]

#: Content codings whose answers the proxy (httpx, without optional decoders) decodes.
READABLE: Final = frozenset({"gzip", "x-gzip", "deflate", "identity"})

_CHUNK = 64 * 1024


class UnknownCoding(ValueError):
    """A request body in a content coding the proxy does not decode."""


class BodyTooLarge(ValueError):
    """A compressed body that decodes to more than the proxy's body cap."""


def readable_accept(value: str | None) -> str:
    """``Accept-Encoding`` narrowed to the codings the proxy reads (q-values kept)."""
    kept = [
        item.strip()
        for item in (value or "").split(",")
        if item.split(";", 1)[0].strip().lower() in READABLE
    ]
    return ", ".join(kept) if kept else "identity"


def _inflate(data: bytes, wbits: int, limit: int) -> bytes:
    d = zlib.decompressobj(wbits)
    out = bytearray()
    view = data
    while True:
        out += d.decompress(view, _CHUNK)
        if len(out) > limit:
            raise BodyTooLarge(f"the body decodes to more than {limit} bytes")
        view = d.unconsumed_tail
        if not view:
            out += d.flush()
            if len(out) > limit:
                raise BodyTooLarge(f"the body decodes to more than {limit} bytes")
            return bytes(out)


def _unzstd(data: bytes, limit: int) -> bytes:
    try:
        import zstandard
    except ImportError as e:
        raise UnknownCoding("zstd (the zstandard package is not installed)") from e
    reader = zstandard.ZstdDecompressor().stream_reader(data)
    out = bytearray()
    try:
        while chunk := reader.read(_CHUNK):
            out += chunk
            if len(out) > limit:
                raise BodyTooLarge(f"the body decodes to more than {limit} bytes")
    except zstandard.ZstdError as e:
        raise UnknownCoding(f"zstd (the body is not valid zstd: {e})") from e
    return bytes(out)


def decode_body(data: bytes, coding: str | None, *, limit: int) -> bytes:
    """``data`` without its content coding(s), at most ``limit`` bytes decoded.

    Raises :class:`UnknownCoding` for a coding it does not read or data that is not
    valid in its coding, and :class:`BodyTooLarge` past ``limit``.
    """
    codings = [c.strip().lower() for c in (coding or "").split(",") if c.strip()]
    for name in reversed(codings):  # applied in order, so undone last first
        if name == "identity":
            continue
        try:
            if name in {"gzip", "x-gzip"}:
                data = _inflate(data, 16 + zlib.MAX_WBITS, limit)
            elif name == "deflate":
                data = _inflate(data, zlib.MAX_WBITS, limit)
            elif name == "zstd":
                data = _unzstd(data, limit)
            else:
                raise UnknownCoding(name)
        except zlib.error as e:
            raise UnknownCoding(f"{name} (the body is not valid {name}: {e})") from e
    return data


def parse_json(raw: bytes) -> dict[str, Any] | None:
    """The body as a JSON object, or None (not JSON, not an object, nested too deep)."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        return None  # forwarded as it is: the upstream says what is wrong with it
    return body if isinstance(body, dict) else None


def serialise_json(body: dict[str, Any]) -> bytes | None:
    """The body as compact JSON bytes, or None (nested too deep to write)."""
    try:
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    except (ValueError, RecursionError):
        return None
