"""FFmpeg (PyAV) decoding of a video, as the render worker runs it.

:mod:`visus.media.video` is the public side: it hands the bytes to a worker of the
heavy lane (:mod:`visus.media._worker`), which runs :func:`sample_keyframes` or
:func:`read_media_type` here. PyAV (the ``video`` extra) is imported here and nowhere
else, lazily, so the rest of visus works without it.

Example:
    >>> format_time(72.4), format_time(3725)
    ('1:12', '1:02:05')
"""

from __future__ import annotations

import io
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from visus import limits
from visus.errors import InvalidInputError, TooLargeError, UnsupportedTypeError

if TYPE_CHECKING:
    import av.container
    import av.video.frame

__all__ = [
    "Keyframe",
    "available",
    "check_av",
    "format_time",
    "read_media_type",
    "sample_keyframes",
]


@dataclass(frozen=True, slots=True)
class Keyframe:
    """One sampled frame: ``seconds`` from the start, PNG bytes, its size."""

    seconds: float
    png: bytes
    width: int
    height: int

    @property
    def label(self) -> str:
        return format_time(self.seconds)


def format_time(seconds: float) -> str:
    """``m:ss`` (``h:mm:ss`` past an hour), seconds rounded down."""
    whole = max(0, math.floor(seconds + 1e-6))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def available() -> bool:
    """Whether PyAV (the ``video`` extra) is installed."""
    try:
        import av  # noqa: F401
    except ImportError:
        return False
    return True


def check_av() -> Any:
    """The ``av`` module, or :class:`UnsupportedTypeError` with the extra's install hint."""
    try:
        import av
    except ImportError as e:  # pragma: no cover - the extra is installed in dev
        raise UnsupportedTypeError(
            "sampling keyframes needs PyAV: pip install -e '.[video]' in the visus checkout"
        ) from e
    return av


def _png(av: Any, frame: av.video.frame.VideoFrame, max_edge: int) -> tuple[bytes, int, int]:
    scale = min(1.0, max_edge / max(frame.width, frame.height))
    width = max(2, int(frame.width * scale)) // 2 * 2
    height = max(2, int(frame.height * scale)) // 2 * 2
    rgb = frame.reformat(width=width, height=height, format="rgb24")
    encoder = av.CodecContext.create("png", "w")
    encoder.width, encoder.height, encoder.pix_fmt = width, height, "rgb24"
    packets = [*encoder.encode(rgb), *encoder.encode(None)]
    return b"".join(bytes(p) for p in packets), width, height


def _duration(container: av.container.InputContainer, stream: Any) -> float | None:
    if stream.duration is not None and stream.time_base is not None:
        return float(stream.duration * stream.time_base)
    if container.duration is not None:
        return float(container.duration) / 1_000_000  # AV_TIME_BASE
    return None


# Sample times further apart than this are reached by seeking to the keyframe before
# each one; closer ones by decoding straight through (seeking would decode the same
# group of pictures again and again).
_SEEK_SPACING_SECONDS = 4.0
_EPSILON = 1e-3


def _frame_time(frame: Any, base: Fraction, start: float) -> float:
    return float(frame.pts * base) - start if frame.pts is not None else 0.0


def _in_time(deadline: float) -> None:
    """Refuse once sampling has run past its budget (checked after each decoded frame)."""
    if time.monotonic() > deadline:
        raise TooLargeError(
            f"sampling keyframes took longer than the {limits.VIDEO_DECODE_SECONDS:g} s "
            "budget (limits.VIDEO_DECODE_SECONDS)"
        )


def _check_size(stream: Any) -> None:
    """Refuse frames past the raster bounds before one is decoded, and have FFmpeg refuse
    any frame inside the stream larger than they allow."""
    width, height = stream.codec_context.width, stream.codec_context.height
    if width * height > limits.MAX_SOURCE_PIXELS or max(width, height) > limits.MAX_SOURCE_EDGE:
        raise TooLargeError(
            f"video frames of {width} x {height} pixels are past the decode bound "
            f"({limits.MAX_SOURCE_PIXELS:,} pixels, {limits.MAX_SOURCE_EDGE:,} px per side)"
        )
    stream.codec_context.options = {"max_pixels": str(limits.MAX_SOURCE_PIXELS)}


@dataclass(frozen=True, slots=True)
class _Sampling:
    """One video being sampled: its stream, where its time starts, the frames' edge,
    and the moment the sampling's budget ends."""

    av: Any
    container: Any
    stream: Any
    start: float
    max_edge: int
    deadline: float

    def frames(self) -> Iterator[tuple[Any, float]]:
        """Decoded frames from where the container stands, with their times; past the
        budget, :class:`TooLargeError`."""
        base: Fraction = self.stream.time_base
        for frame in self.container.decode(self.stream):
            _in_time(self.deadline)
            yield frame, _frame_time(frame, base, self.start)

    def keyframe(self, frame: Any, at: float) -> Keyframe:
        png, w, h = _png(self.av, frame, self.max_edge)
        return Keyframe(max(at, 0.0), png, w, h)


def _straight(s: _Sampling, times: list[float]) -> list[Keyframe]:
    out: list[Keyframe] = []
    wanted = list(times)
    for frame, at in s.frames():
        if len(out) >= len(wanted):
            break
        if at + _EPSILON >= wanted[len(out)]:
            out.append(s.keyframe(frame, at))
            # A long gap between frames may cover several sample times: one frame each.
            while len(out) < len(wanted) and at + _EPSILON >= wanted[len(out)]:
                wanted.pop(len(out))
    return out


def _seeking(s: _Sampling, times: list[float]) -> list[Keyframe]:
    base: Fraction = s.stream.time_base
    out: list[Keyframe] = []
    for t in times:
        s.container.seek(int((t + s.start) / base), stream=s.stream, backward=True, any_frame=False)
        for frame, at in s.frames():
            if at + _EPSILON >= t:
                if not out or at > out[-1].seconds + _EPSILON:
                    out.append(s.keyframe(frame, at))
                break
        else:
            break  # past the last frame
    return out


def sample_keyframes(
    data: bytes,
    *,
    max_frames: int = limits.ANALYZE_VIDEO_MAX_FRAMES,
    max_edge: int = limits.ANALYZE_VIDEO_FRAME_EDGE,
) -> tuple[list[Keyframe], float]:
    """Evenly spaced frames of the video in ``data`` and its duration in seconds, decoded
    in this process (the render worker's side of :func:`keyframes`).

    About one frame per second (``ceil(duration)``), at most ``max_frames``; frame
    ``i`` is the first whose time is at or after ``i * duration / n``. Short spacings
    decode straight through; long videos seek to each time. Raises
    :class:`~visus.errors.UnsupportedTypeError` for bytes FFmpeg cannot decode as video,
    :class:`~visus.errors.TooLargeError` for frames past the raster bounds or sampling
    past ``limits.VIDEO_DECODE_SECONDS``.
    """
    av = check_av()
    deadline = time.monotonic() + limits.VIDEO_DECODE_SECONDS
    if max_frames < 1:
        raise InvalidInputError(f"max_frames must be at least 1, got {max_frames}")
    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            if not container.streams.video:
                raise UnsupportedTypeError("no video stream in the file")
            stream = container.streams.video[0]
            _check_size(stream)
            stream.thread_type = "AUTO"
            if stream.time_base is None:
                raise UnsupportedTypeError("the video stream has no time base")
            start = float((stream.start_time or 0) * stream.time_base)
            duration = _duration(container, stream)
            count = min(max_frames, max(1, math.ceil(duration or 1)))
            times = [i * (duration or 0) / count for i in range(count)]
            spacing = (duration or 0) / count
            sample = _seeking if spacing >= _SEEK_SPACING_SECONDS else _straight
            sampling = _Sampling(av, container, stream, start, max_edge, deadline)
            out = sample(sampling, times)
    except (UnsupportedTypeError, TooLargeError):
        raise
    except (av.FFmpegError, ValueError, IndexError, OSError) as e:
        raise UnsupportedTypeError(f"not a video FFmpeg can decode: {_reason(e)}") from e
    if not out:
        raise UnsupportedTypeError("the video has no decodable frames")
    return out, duration if duration is not None else out[-1].seconds


# FFmpeg's demuxer names -> the MIME type a provider's video part declares.
_DEMUXER_TYPES = (
    ("mp4", "video/mp4"),
    ("webm", "video/webm"),
    ("matroska", "video/x-matroska"),
    ("mov", "video/quicktime"),
    ("avi", "video/x-msvideo"),
    ("mpeg", "video/mpeg"),
    ("flv", "video/x-flv"),
    ("3gp", "video/3gpp"),
)


def read_media_type(data: bytes) -> str:
    """:func:`visus.media.video.video_media_type` in this process (what the render
    worker runs)."""
    av = check_av()
    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            if not container.streams.video:
                raise UnsupportedTypeError("no video stream in the file")
            names = str(container.format.name).split(",")
    except UnsupportedTypeError:
        raise
    except (av.FFmpegError, ValueError, IndexError, OSError) as e:
        raise UnsupportedTypeError(f"not a video FFmpeg can decode: {_reason(e)}") from e
    for name, media_type in _DEMUXER_TYPES:
        if name in names:
            return media_type
    raise UnsupportedTypeError(f"not a video container ({names[0]})")


def _reason(e: Exception) -> str:
    """FFmpeg's own words, without the errno and the file name (``'<none>'`` for bytes)."""
    said = getattr(e, "strerror", None)
    return said if isinstance(said, str) and said else str(e)
