"""Redteam (issue 23): sampling a video's keyframes runs under a budget.

Keyframes were decoded by FFmpeg in the calling process (now in the render worker). A
5 MB QuickTime file of thirty 12000 x 12000 PNG frames took 43 s and 635 MB there, with
no bound at all.
"""

from __future__ import annotations

import pytest

pytest.importorskip("av")

from tests.media.bombs import encoded_video
from visus import limits
from visus.analyze.video import keyframes as analyze_keyframes
from visus.errors import AnalyzeError, TooLargeError
from visus.media import video


def png_video(width: int, height: int, frames: int) -> bytes:
    """A QuickTime file of ``frames`` black PNG frames (compress to almost nothing)."""
    return encoded_video("png", "mov", width, height, frames, "gray")


def test_frames_past_the_raster_bounds_are_refused_before_decoding() -> None:
    data = png_video(4, limits.MAX_SOURCE_EDGE + 2, 1)  # small pixels, too tall a side
    with pytest.raises(TooLargeError, match="past the decode bound"):
        video.keyframes(data)
    with pytest.raises(AnalyzeError, match="FILE_TOO_LARGE"):
        analyze_keyframes(data)


def test_sampling_stops_at_its_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    data = png_video(64, 64, 8)
    assert len(video.keyframes(data)[0]) == 8  # within the budget: every sample
    monkeypatch.setattr(limits, "VIDEO_DECODE_SECONDS", 0.0)
    with pytest.raises(TooLargeError, match="VIDEO_DECODE_SECONDS"):
        video.keyframes(data)
