"""Drop the PNG metadata chunks Pillow would refuse the whole file for, keeping the image.

Two kinds, both metadata, so the pixels are fine and the image is perceived without
them:

- A zTXt, compressed iTXt or iCCP chunk is zlib data; Pillow refuses a PNG whose
  chunk inflates past ``PngImagePlugin.MAX_TEXT_CHUNK`` (1 MB) or whose chunks
  together pass ``MAX_TEXT_MEMORY`` (64 MB). Each chunk is inflated at most to the
  bound plus one byte, and a running total of every byte inflated here, of the chunks
  kept and dropped alike, stops at ``limits.RASTER_PNG_MAX_METADATA_BYTES``: past it
  later compressed chunks are dropped without inflating them, so the work is bounded
  whatever the file holds (9,000 chunks each just under the chunk bound cost 19 CPU-s
  when only the kept ones counted).
- An ancillary chunk (lowercase first letter: a colour profile, a text note, a
  timestamp) whose CRC is wrong. The PNG spec lets a decoder skip one (libpng and
  browsers do); Pillow refuses the file. MCP servers send such images (the reference
  MCP server's own sample has a damaged ``iCCP``). Critical chunks (IHDR, PLTE,
  IDAT, IEND) are never touched nor checksummed here: the decoder checks those.
  APNG's frame chunks are numbered in one sequence, so one damaged ``fcTL`` or
  ``fdAT`` drops the animation whole: the still default image is what stays.

Example:
    >>> import io, zlib
    >>> from PIL import Image
    >>> buf = io.BytesIO(); Image.new("RGB", (4, 4)).save(buf, "PNG"); png = buf.getvalue()
    >>> without_unusable_chunks(png) is png  # nothing to drop: the same object back
    True
"""

from __future__ import annotations

import struct
import zlib

from PIL import PngImagePlugin

from visus import limits
from visus.errors import TooLargeError

__all__ = ["without_unusable_chunks"]

_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_COMPRESSED = frozenset({b"zTXt", b"iTXt", b"iCCP"})
#: APNG's chunks (ancillary: a decoder without APNG shows the IDAT image).
_ANIMATION = frozenset({b"acTL", b"fcTL", b"fdAT"})


def _zlib_payload(kind: bytes, body: bytes) -> bytes | None:
    """The zlib stream inside a compressed metadata chunk, or None (not compressed)."""
    name_end = body.find(b"\0")
    if name_end < 0:
        return None
    if kind == b"iTXt":
        # keyword \0 flag method language \0 translated-keyword \0 text
        if body[name_end + 1 : name_end + 2] != b"\1":
            return None
        lang_end = body.find(b"\0", name_end + 3)
        tkey_end = body.find(b"\0", lang_end + 1) if lang_end >= 0 else -1
        return body[tkey_end + 1 :] if tkey_end >= 0 else None
    return body[name_end + 2 :]  # keyword \0 method, then the stream (zTXt, iCCP)


def _inflated_size(stream: bytes, cap: int) -> int:
    """Bytes ``stream`` inflates to, counting at most ``cap + 1`` (a broken stream: 0)."""
    try:
        return len(zlib.decompressobj().decompress(stream, cap + 1))
    except zlib.error:
        return 0  # Pillow skips broken metadata itself


def _without_animation(data: bytes) -> bytes:
    """``data`` (a PNG) without its APNG chunks: the still default image."""
    kept, pos = [_SIGNATURE], len(_SIGNATURE)
    while pos + 8 <= len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        end = pos + 12 + length
        if data[pos + 4 : pos + 8] not in _ANIMATION:
            kept.append(data[pos:end])
        pos = end
    return b"".join(kept)


def without_unusable_chunks(data: bytes) -> bytes:
    """``data`` without the metadata chunks Pillow would refuse (oversized compressed
    ones, ancillary ones with a wrong CRC, compressed ones past the inflate budget);
    ``data`` itself (not a copy) when it is no PNG or nothing needs dropping."""
    if not data.startswith(_SIGNATURE):
        return data
    kept: list[bytes] = [_SIGNATURE]
    dropped = False
    budget = _Inflating()
    pos = len(_SIGNATURE)
    chunks = 0
    while pos + 8 <= len(data):
        chunks += 1
        if chunks > limits.RASTER_PNG_MAX_CHUNKS:
            raise TooLargeError(
                f"the PNG header has more than {limits.RASTER_PNG_MAX_CHUNKS:,} chunks "
                "(limits.RASTER_PNG_MAX_CHUNKS)"
            )
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        end = pos + 12 + length
        if end > len(data):
            break  # truncated: leave the rest to the decoder as it is
        if kind[:1].islower() and zlib.crc32(data[pos + 4 : end - 4]) != int.from_bytes(
            data[end - 4 : end], "big"
        ):
            dropped = True  # a damaged ancillary chunk: skipped, as the spec allows
            pos = end
            if kind in _ANIMATION:
                # Frames are numbered across fcTL and fdAT: without one of them the
                # animation is broken, so it goes whole and the default image stays.
                return without_unusable_chunks(_without_animation(data))
            continue
        if kind in _COMPRESSED and not budget.keeps(kind, data[pos + 8 : pos + 8 + length]):
            dropped = True
            pos = end
            continue
        kept.append(data[pos:end])
        pos = end
        if kind == b"IEND":
            break
    if not dropped:
        return data
    kept.append(data[pos:])
    return b"".join(kept)


class _Inflating:
    """What a PNG's compressed metadata chunks have cost so far: the bytes Pillow will
    hold for the kept ones, and every byte inflated here."""

    def __init__(self) -> None:
        self.kept = 0
        self.inflated = 0

    def keeps(self, kind: bytes, body: bytes) -> bool:
        """Whether a compressed chunk may stay (inflating it if the budget allows)."""
        stream = _zlib_payload(kind, body)
        if stream is None:
            return True  # not compressed after all (an iTXt flag): Pillow reads it as is
        chunk_cap = PngImagePlugin.MAX_TEXT_CHUNK
        left = limits.RASTER_PNG_MAX_METADATA_BYTES - self.inflated
        if left <= 0:
            return False
        size = _inflated_size(stream, min(chunk_cap, left))
        self.inflated += size
        if size > chunk_cap or size > left or self.kept + size > PngImagePlugin.MAX_TEXT_MEMORY:
            return False
        self.kept += size
        return True
