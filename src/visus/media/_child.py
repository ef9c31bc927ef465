"""The render worker's side (see :mod:`visus.media._worker` for the parent's).

The parent starts ``python -c`` with :data:`ENTRY`; :func:`serve` answers one request
at a time. The protocol is ours and carries no pickles (a worker that handled hostile
bytes is not trusted to hand objects back): a frame is two big-endian u64 (header
length, payload length), a JSON header, then the raw payload. A request names its
``kind``: ``render`` (svg, text, pdf: :func:`visus.media.render.render_source`) or
``raster`` (a raster too large to decode in the caller's process:
:func:`visus.media.raster.load_raster`), ``probe`` (what a non-raster source is:
:func:`visus.media.render.probe_document`; opening a PDF alone can inflate gigabytes)
or ``video`` (keyframes or a container's type: :mod:`visus.media.video`). The parent's
current bounds travel with every request, so the worker enforces the same
:mod:`visus.limits` values as its parent.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import struct
import sys
import threading
import time
from typing import Any

from visus import limits
from visus.errors import InvalidInputError, MediaError, VisusError
from visus.media.types import Fitted, Profile, Region

__all__ = ["ENTRY", "FITTED_FIELDS", "FRAME", "READY", "fitted_from_reply", "serve"]

#: Two big-endian u64: header length, payload length.
FRAME = struct.Struct(">QQ")
ENTRY = "import sys; from visus.media._child import serve; serve(int(sys.argv[1]))"
READY = b"visus-render-worker-ready\n"
FITTED_FIELDS = tuple(f for f in Fitted.__dataclass_fields__ if f != "data")
_ORPHAN_CHECK_SECONDS = 1.0
_WARM_SVG = (
    b'<svg xmlns="http://www.w3.org/2000/svg" width="8" height="8"><text y="8">w</text></svg>'
)


def fitted_from_reply(fields: dict[str, Any], data: bytes) -> Fitted:
    """The :class:`Fitted` a reply's ``fitted`` fields and body describe."""
    values = {k: fields[k] for k in FITTED_FIELDS}
    if values.get("region") is not None:
        values["region"] = Region(*values["region"])
    return Fitted(data=data, **values)


def _fitted_fields(fitted: Fitted) -> dict[str, Any]:
    fields = {k: getattr(fitted, k) for k in FITTED_FIELDS}
    if fitted.region is not None:
        fields["region"] = fitted.region.as_list()
    return fields


def _mb(n: int) -> str:
    return f"{n / limits.MB:,.0f} MB"


def _limit_memory(cap: int) -> None:
    import resource

    # Soft and hard: the render cannot raise its own cap back.
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def _die_with_parent() -> None:
    """Exit when the parent dies mid-render, so no orphan spins on.

    (``PR_SET_PDEATHSIG`` would fire when the *thread* that started us ends, which
    in a thread pool is any time.)
    """
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(_ORPHAN_CHECK_SECONDS)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="visus-render-orphan-watch", daemon=True).start()


def _read_exact(stream: Any, n: int) -> bytes | None:
    data = stream.read(n)
    return data if len(data) == n else None


def _warm() -> None:
    """Load the fonts, lexers and decoders once, before the first budgeted request."""
    from visus.media.render import render_source

    warm = Profile(64, 64 * 64, 1 << 20)
    with contextlib.suppress(VisusError):
        render_source(
            _WARM_SVG, profile=warm, render=True, page=None, offset=None, limit=None, name=None
        )
        for name in ("w.py", None):  # a lexer by name, and the guess over all lexers
            render_source(
                b"x = 1\n", profile=warm, render=True, page=None, offset=None, limit=None, name=name
            )


def _probe(data: bytes) -> tuple[dict[str, Any], bytes]:
    from visus.media._guard import translated
    from visus.media.render import probe_document

    with translated("source"):
        found = probe_document(data)
    return {"probe": None if found is None else dataclasses.asdict(found)}, b""


def _video(request: dict[str, Any], data: bytes) -> tuple[dict[str, Any], bytes]:
    from visus.media import _ffmpeg

    if request.get("what") == "media_type":
        return {"media_type": _ffmpeg.read_media_type(data)}, b""
    frames, duration = _ffmpeg.sample_keyframes(
        data, max_frames=int(request["max_frames"]), max_edge=int(request["max_edge"])
    )
    shown = [{"seconds": f.seconds, "width": f.width, "height": f.height} for f in frames]
    shown = [s | {"bytes": len(f.png)} for s, f in zip(shown, frames, strict=True)]
    return {"keyframes": shown, "duration": duration}, b"".join(f.png for f in frames)


def _handle(request: dict[str, Any], data: bytes) -> Fitted | None:
    from visus.media import raster
    from visus.media._guard import translated
    from visus.media.render import render_source

    p = request["profile"]
    profile = Profile(p["max_edge"], p["max_pixels"], p["max_bytes"], frozenset(p["media_types"]))
    region = None if request.get("region") is None else Region(*request["region"])
    if request.get("kind") == "raster":
        with translated("image"):
            im = raster.identify(data)
            if im is None:
                return None
            with im:
                return raster.load_raster(raster.read_header(im), data, profile, region)
    with translated("source"):
        return render_source(
            data,
            profile=profile,
            render=bool(request.get("render", True)),
            page=request["page"],
            offset=request["offset"],
            limit=request["limit"],
            name=request["name"],
            region=region,
        )


def _answer(request: dict[str, Any], data: bytes, memory_cap: int) -> tuple[dict[str, Any], bytes]:
    for key, value in request["bounds"].items():
        if hasattr(limits, key):
            setattr(limits, key, value)
    try:
        if request.get("kind") == "probe":
            return _probe(data)
        if request.get("kind") == "video":
            return _video(request, data)
        fitted = _handle(request, data)
    except (MediaError, InvalidInputError) as e:
        return {"error": type(e).__name__, "message": str(e)}, b""
    except MemoryError:
        what = {"raster": "decode", "probe": "parse", "video": "video decode"}
        message = (
            f"the {what.get(str(request.get('kind')), 'render')} needs more "
            f"than its {_mb(memory_cap)} memory cap (limits.RENDER_MAX_MEMORY_BYTES)"
        )
        return {"error": "TooLargeError", "message": message}, b""
    if fitted is None:
        return {"fitted": None}, b""
    return {"fitted": _fitted_fields(fitted)}, fitted.data


def serve(memory_cap: int) -> None:
    """The worker's main loop (run by the parent as ``python -c``): one request at a time."""
    # The protocol owns the real stdout; anything a library prints goes to stderr.
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    inp = sys.stdin.buffer
    # Ctrl-C in a terminal reaches the whole process group: the parent handles it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    from visus.media import _vips

    # libvips with librsvg allowed and fontconfig fenced to visus's fonts, before
    # anything could start fontconfig (and before the cap: loading it is not a render).
    # Without the shipped fonts it fails again, in words, on the first SVG render.
    with contextlib.suppress(VisusError):
        _vips.svg_engine()
    _limit_memory(memory_cap)
    _warm()
    out.write(READY)  # a few bytes: one write on a pipe
    while True:
        frame = _read_exact(inp, FRAME.size)
        if frame is None:
            return  # the parent closed the pipe: its process is done with us
        head_len, body_len = FRAME.unpack(frame)
        raw = _read_exact(inp, head_len)
        data = _read_exact(inp, body_len)
        if raw is None or data is None:
            return
        reply, body = _answer(json.loads(raw), data, memory_cap)
        raw_reply = json.dumps(reply).encode()
        view = memoryview(FRAME.pack(len(raw_reply), len(body)) + raw_reply + body)
        while view:
            view = view[out.write(view) or 0 :]
