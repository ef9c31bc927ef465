"""video_analyze: a question about a video, answered from timestamped keyframes.

The video is fetched through ``visus.net`` (capped at ``limits.NET_MAX_VIDEO_BYTES``)
or read from a path under the reach, decoded with PyAV (the ``video`` extra), and
sampled at evenly spaced times: about one frame per second, at most
``limits.ANALYZE_VIDEO_MAX_FRAMES``. The frames go to the model as an image
sequence, each introduced by its time (``Frame at 0:12``), so any vision model can
answer "what happens at 0:12". A model that takes video natively (``ModelSpec.video``,
Gemini) gets the whole video inline instead, up to ``limits.ANALYZE_VIDEO_INLINE_BYTES``
(the record and wires have no video part, so that one call is made by
``visus.analyze._gemini_video``). ``VIDEO_NOT_SUPPORTED`` is a model that takes
neither video nor images.

Example:
    >>> format_time(72.4), format_time(3725)
    ('1:12', '1:02:05')
"""

from __future__ import annotations

import asyncio
import io
import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

from visus import limits, media
from visus.analyze._gemini_video import ask_gemini_video
from visus.analyze._inputs import Picture, load_source, translated
from visus.analyze._values import AnalyzeResult, FileSource, clip, fail
from visus.analyze.vision import (
    UsageSink,
    ask_model,
    check_session,
    connect,
    record_usage,
    resolve_target,
)
from visus.config import VisusConfig, load_config
from visus.errors import AnalyzeError
from visus.paths import sessions_dir
from visus.perception import Reach
from visus.providers import ProviderClient, aclose
from visus.record.messages import Usage
from visus.record.sessions import SessionStore

if TYPE_CHECKING:
    import av.container
    import av.video.frame

__all__ = [
    "DEFAULT_VIDEO_PROMPT",
    "Keyframe",
    "format_time",
    "keyframes",
    "video_analyze",
    "video_analyze_sync",
    "video_media_type",
]

DEFAULT_VIDEO_PROMPT = "Describe this video in detail."


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


def _av() -> Any:
    try:
        import av
    except ImportError as e:  # pragma: no cover - the extra is installed in dev
        raise fail(
            "VIDEO_NOT_SUPPORTED",
            "sampling keyframes needs PyAV: pip install 'visus[video]'",
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


def _straight(
    av: Any, container: Any, stream: Any, times: list[float], start: float, max_edge: int
) -> list[Keyframe]:
    base: Fraction = stream.time_base
    out: list[Keyframe] = []
    wanted = list(times)
    for frame in container.decode(stream):
        if len(out) >= len(wanted):
            break
        at = _frame_time(frame, base, start)
        if at + _EPSILON >= wanted[len(out)]:
            png, w, h = _png(av, frame, max_edge)
            out.append(Keyframe(max(at, 0.0), png, w, h))
            # A long gap between frames may cover several sample times: one frame each.
            while len(out) < len(wanted) and at + _EPSILON >= wanted[len(out)]:
                wanted.pop(len(out))
    return out


def _seeking(
    av: Any, container: Any, stream: Any, times: list[float], start: float, max_edge: int
) -> list[Keyframe]:
    base: Fraction = stream.time_base
    out: list[Keyframe] = []
    for t in times:
        container.seek(int((t + start) / base), stream=stream, backward=True, any_frame=False)
        for frame in container.decode(stream):
            at = _frame_time(frame, base, start)
            if at + _EPSILON >= t:
                if not out or at > out[-1].seconds + _EPSILON:
                    png, w, h = _png(av, frame, max_edge)
                    out.append(Keyframe(max(at, 0.0), png, w, h))
                break
        else:
            break  # past the last frame
    return out


def keyframes(
    data: bytes,
    *,
    max_frames: int = limits.ANALYZE_VIDEO_MAX_FRAMES,
    max_edge: int = limits.ANALYZE_VIDEO_FRAME_EDGE,
) -> tuple[list[Keyframe], float]:
    """Evenly spaced frames of the video in ``data`` and its duration in seconds.

    About one frame per second (``ceil(duration)``), at most ``max_frames``; frame
    ``i`` is the first whose time is at or after ``i * duration / n``. Short spacings
    decode straight through; long videos seek to each time. Raises
    ``UNSUPPORTED_FILE_TYPE`` for bytes FFmpeg cannot decode as video.
    """
    av = _av()
    if max_frames < 1:
        raise fail("INVALID_INPUT", f"max_frames must be at least 1, got {max_frames}")
    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            if not container.streams.video:
                raise fail("UNSUPPORTED_FILE_TYPE", "no video stream in the file")
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            if stream.time_base is None:
                raise fail("UNSUPPORTED_FILE_TYPE", "the video stream has no time base")
            start = float((stream.start_time or 0) * stream.time_base)
            duration = _duration(container, stream)
            count = min(max_frames, max(1, math.ceil(duration or 1)))
            times = [i * (duration or 0) / count for i in range(count)]
            spacing = (duration or 0) / count
            sample = _seeking if spacing >= _SEEK_SPACING_SECONDS else _straight
            out = sample(av, container, stream, times, start, max_edge)
    except AnalyzeError:
        raise
    except (av.FFmpegError, ValueError, IndexError, OSError) as e:
        raise fail("UNSUPPORTED_FILE_TYPE", f"not a video FFmpeg can decode: {e}") from e
    if not out:
        raise fail("UNSUPPORTED_FILE_TYPE", "the video has no decodable frames")
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


def video_media_type(data: bytes) -> str:
    """The MIME type of the video in ``data``, as FFmpeg's demuxer names it.

    Raises ``UNSUPPORTED_FILE_TYPE`` when FFmpeg finds no video stream.
    """
    av = _av()
    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            if not container.streams.video:
                raise fail("UNSUPPORTED_FILE_TYPE", "no video stream in the file")
            names = str(container.format.name).split(",")
    except AnalyzeError:
        raise
    except (av.FFmpegError, ValueError, IndexError, OSError) as e:
        raise fail("UNSUPPORTED_FILE_TYPE", f"not a video FFmpeg can decode: {e}") from e
    for name, media_type in _DEMUXER_TYPES:
        if name in names:
            return media_type
    raise fail("UNSUPPORTED_FILE_TYPE", f"not a video container ({names[0]})")


async def video_analyze(
    file_url: str | None = None,
    prompt: str = DEFAULT_VIDEO_PROMPT,
    model: str | None = None,
    *,
    file_path: str | None = None,
    reach: Reach | None = None,
    config: VisusConfig | None = None,
    max_frames: int = limits.ANALYZE_VIDEO_MAX_FRAMES,
    session: str | None = None,
    sessions: SessionStore | None = None,
    allow_loopback_http: bool = False,
    on_usage: UsageSink | None = None,
    client: ProviderClient | None = None,
    native: bool = True,
) -> AnalyzeResult:
    """Answer ``prompt`` about the video at ``file_url`` (or ``file_path`` under ``reach``).

    The model chain, ``session``, ``on_usage`` and ``client`` work as in
    :func:`~visus.analyze.vision.vision_analyze` (``client`` serves the keyframe
    path). ``native=False`` sends keyframes even to a model that takes video.

    Example:
        >>> r = asyncio.run(video_analyze("https://example.com/demo.mp4",
        ...                               "What happens at 0:12?"))  # doctest: +SKIP
    """
    if not isinstance(prompt, str) or not prompt.strip():
        raise fail("INVALID_INPUT", "prompt must be a non-empty string")
    check_session(session)
    source = FileSource.of(file_path=file_path, file_url=file_url)
    cfg = config if config is not None else load_config()
    target = resolve_target(model, cfg)
    spec = target.spec
    takes_video = native and spec.video and spec.provider == "gemini"
    if not spec.vision and not takes_video:
        raise fail(
            "VIDEO_NOT_SUPPORTED",
            f"model {target.ref} takes neither video nor images (keyframes); name a vision model",
        )
    if reach is None:
        reach = Reach(list(cfg.reach.roots) or [Path.cwd()], render=cfg.reach.render)
    loaded = await load_source(
        source,
        reach=reach,
        max_bytes=limits.NET_MAX_VIDEO_BYTES,
        allow_loopback_http=allow_loopback_http,
    )
    if takes_video and len(loaded.data) <= limits.ANALYZE_VIDEO_INLINE_BYTES:
        media_type = await asyncio.to_thread(video_media_type, loaded.data)
        text, usage = await ask_gemini_video(
            loaded.data, media_type, prompt, spec=spec, settings=target.settings
        )
        if on_usage is not None:
            on_usage(usage)
        summary = f"video: {loaded.label}, sent natively as {media_type}"
        return _finish(text, usage, spec.name, cfg, session, sessions, prompt, summary)
    if not spec.vision:
        raise fail(
            "VIDEO_NOT_SUPPORTED",
            f"{loaded.label} is past {limits.ANALYZE_VIDEO_INLINE_BYTES} bytes for an inline "
            f"video and {target.ref} takes no images for keyframes",
        )
    frames, duration = await asyncio.to_thread(
        keyframes, loaded.data, max_frames=min(max_frames, spec.max_images)
    )
    pics: list[Picture] = []
    with translated(loaded.label):
        for kf in frames:
            fitted = media.fit(kf.png, spec.profile())
            caption = f"Frame at {kf.label} (of {format_time(duration)})"
            pics.append(
                Picture(fitted.data, fitted.media_type, fitted.width, fitted.height, caption)
            )
    question = (
        f"{prompt}\n\nThe images are frames sampled from the video {loaded.label} "
        f"({format_time(duration)} long) at the times given before each."
    )
    own_client = client is None
    if client is None:
        client = await connect(target, unavailable="VIDEO_NOT_SUPPORTED")
    try:
        text, _, usage = await ask_model(client, spec, pics, question, None, on_usage=on_usage)
    finally:
        if own_client:
            await aclose(client)
    summary = f"video: {loaded.label}, {len(frames)} frames"
    return _finish(text, usage, spec.name, cfg, session, sessions, prompt, summary)


def _finish(
    text: str,
    usage: Usage,
    model: str,
    cfg: VisusConfig,
    session: str | None,
    sessions: SessionStore | None,
    prompt: str,
    summary: str,
) -> AnalyzeResult:
    shown, clipped = clip(text)
    result = AnalyzeResult(
        text=shown,
        model=model,
        cost_usd=usage.cost_usd,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        clipped=clipped,
    )
    if session is not None:
        store = sessions if sessions is not None else SessionStore(sessions_dir(cfg.data_dir))
        record_usage(
            store,
            session,
            tool="video_analyze",
            prompt=prompt,
            summary=summary,
            text=result.text,
            model=result.model,
            usage=result.usage,
        )
    return result


def video_analyze_sync(
    file_url: str | None = None, prompt: str = DEFAULT_VIDEO_PROMPT, **kwargs: Any
) -> AnalyzeResult:
    """:func:`video_analyze` for code without an event loop."""
    return asyncio.run(video_analyze(file_url, prompt, **kwargs))
