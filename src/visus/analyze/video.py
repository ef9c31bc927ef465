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
import contextlib
from collections.abc import Iterator
from typing import Any

from visus import limits, media
from visus.analyze._gemini_video import ask_gemini_video
from visus.analyze._inputs import Loaded, Picture, load_source, translated
from visus.analyze._values import AnalyzeResult, FileSource, fail
from visus.analyze.vision import (
    Recording,
    Target,
    UsageSink,
    ask_model,
    check_session,
    connect,
    default_reach,
    resolve_target,
)
from visus.config import VisusConfig, load_config
from visus.errors import InvalidInputError, MediaError, TooLargeError
from visus.media import video
from visus.media.video import Keyframe, format_time
from visus.perception import Reach
from visus.providers import ProviderClient, aclose
from visus.record.messages import Usage
from visus.record.sessions import SessionStore

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


def keyframes(
    data: bytes,
    *,
    max_frames: int = limits.ANALYZE_VIDEO_MAX_FRAMES,
    max_edge: int = limits.ANALYZE_VIDEO_FRAME_EDGE,
) -> tuple[list[Keyframe], float]:
    """:func:`visus.media.video.keyframes` with its errors as analyze codes."""
    with _video_errors():
        return video.keyframes(data, max_frames=max_frames, max_edge=max_edge)


def video_media_type(data: bytes) -> str:
    """:func:`visus.media.video.video_media_type` with its errors as analyze codes."""
    with _video_errors():
        return video.video_media_type(data)


@contextlib.contextmanager
def _video_errors() -> Iterator[None]:
    if not video.available():
        raise fail(
            "VIDEO_NOT_SUPPORTED",
            "sampling keyframes needs PyAV: pip install -e '.[video]' in the visus checkout",
        )
    try:
        yield
    except InvalidInputError as e:
        raise fail("INVALID_INPUT", str(e)) from e
    except TooLargeError as e:
        raise fail("FILE_TOO_LARGE", str(e)) from e
    except MediaError as e:
        raise fail("UNSUPPORTED_FILE_TYPE", str(e)) from e


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
    loaded = await load_source(
        source,
        reach=reach if reach is not None else default_reach(cfg),
        max_bytes=limits.NET_MAX_VIDEO_BYTES,
        allow_loopback_http=allow_loopback_http,
    )
    record = Recording(session, sessions, cfg, prompt, tool="video_analyze")
    if takes_video and len(loaded.data) <= limits.ANALYZE_VIDEO_INLINE_BYTES:
        text, usage, summary = await _ask_natively(target, loaded, prompt, on_usage)
    else:
        text, usage, summary = await _ask_keyframes(
            target, loaded, prompt, client, max_frames=max_frames, on_usage=on_usage
        )
    result = AnalyzeResult.answered(text, usage, spec.name)
    record(summary, result)
    return result


async def _ask_natively(
    target: Target, loaded: Loaded, prompt: str, on_usage: UsageSink | None
) -> tuple[str, Usage, str]:
    """The answer from the video itself, inline (Gemini): text, usage, what was sent."""
    media_type = await asyncio.to_thread(video_media_type, loaded.data)
    text, usage = await ask_gemini_video(
        loaded.data, media_type, prompt, spec=target.spec, settings=target.settings
    )
    if on_usage is not None:
        on_usage(usage)
    return text, usage, f"video: {loaded.label}, sent natively as {media_type}"


async def _ask_keyframes(
    target: Target,
    loaded: Loaded,
    prompt: str,
    client: ProviderClient | None,
    *,
    max_frames: int,
    on_usage: UsageSink | None,
) -> tuple[str, Usage, str]:
    """The answer from timestamped keyframes: text, usage, and what was sent."""
    spec = target.spec
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
    return text, usage, f"video: {loaded.label}, {len(frames)} frames"


def video_analyze_sync(
    file_url: str | None = None, prompt: str = DEFAULT_VIDEO_PROMPT, **kwargs: Any
) -> AnalyzeResult:
    """:func:`video_analyze` for code without an event loop."""
    return asyncio.run(video_analyze(file_url, prompt, **kwargs))
