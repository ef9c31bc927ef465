"""Video: evenly spaced keyframes as PNG, and the container's media type.

FFmpeg (PyAV, the ``video`` extra) runs in the render worker's heavy lane
(:mod:`visus.media._worker`, :mod:`visus.media._ffmpeg` there), never in the calling
process: sixteen 9000 x 9000 frames took a server 530 MB past its memory budget, and
demuxing alone decodes frames to find a stream's parameters. :func:`keyframes` and
:func:`video_media_type` hand the bytes to a worker, under
``limits.VIDEO_DECODE_SECONDS`` and the worker's memory cap. Callers turn frames into
images with :func:`visus.media.fit` and label them with :func:`format_time`.

Example:
    >>> format_time(72.4), format_time(3725)
    ('1:12', '1:02:05')
"""

from __future__ import annotations

from visus import limits
from visus.errors import InvalidInputError
from visus.media._ffmpeg import Keyframe, available, check_av, format_time
from visus.media._worker import video_in_worker

__all__ = ["Keyframe", "available", "format_time", "keyframes", "video_media_type"]


def keyframes(
    data: bytes,
    *,
    max_frames: int = limits.ANALYZE_VIDEO_MAX_FRAMES,
    max_edge: int = limits.ANALYZE_VIDEO_FRAME_EDGE,
) -> tuple[list[Keyframe], float]:
    """Evenly spaced frames of the video in ``data`` and its duration in seconds,
    sampled in the render worker (:func:`visus.media._ffmpeg.sample_keyframes` there);
    past ``limits.VIDEO_DECODE_SECONDS`` or the worker's memory cap,
    :class:`~visus.errors.TooLargeError`, and :class:`~visus.errors.BusyError` when no
    worker came free in time.

    Example:
        >>> frames, seconds = keyframes(mp4_bytes, max_frames=8)  # doctest: +SKIP
        >>> frames[0].label, frames[0].png[:4]  # doctest: +SKIP
        ('0:00', b'\\x89PNG')
    """
    check_av()  # the extra's hint here, not the worker's
    if max_frames < 1:
        raise InvalidInputError(f"max_frames must be at least 1, got {max_frames}")
    request = {"what": "keyframes", "max_frames": max_frames, "max_edge": max_edge}
    reply, body = video_in_worker(data, request)
    out: list[Keyframe] = []
    pos = 0
    for k in reply["keyframes"]:
        png = body[pos : pos + int(k["bytes"])]
        pos += len(png)
        out.append(Keyframe(float(k["seconds"]), png, int(k["width"]), int(k["height"])))
    return out, float(reply["duration"])


def video_media_type(data: bytes) -> str:
    """The MIME type of the video in ``data``, as FFmpeg's demuxer names it, read in
    the render worker (:func:`visus.media._ffmpeg.read_media_type` there; FFmpeg
    decodes frames to find a stream's parameters).

    Raises :class:`~visus.errors.UnsupportedTypeError` when FFmpeg finds no video
    stream, and the worker's errors (:func:`keyframes`).
    """
    check_av()
    reply, _ = video_in_worker(data, {"what": "media_type"})
    return str(reply["media_type"])
