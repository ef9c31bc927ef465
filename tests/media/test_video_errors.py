"""Undecodable video bytes are refused in FFmpeg's words, without errno noise."""

from __future__ import annotations

import pytest

from visus.errors import UnsupportedTypeError
from visus.media import video

pytestmark = pytest.mark.skipif(not video.available(), reason="PyAV not installed")


@pytest.mark.parametrize("call", [video.keyframes, video.video_media_type])
def test_not_a_video_says_why_without_errno_or_placeholder_name(call: object) -> None:
    assert callable(call)
    with pytest.raises(UnsupportedTypeError) as err:
        call(b"plain text, not a video at all\n" * 20)
    message = str(err.value)
    assert message.startswith("not a video FFmpeg can decode: ")
    assert "Invalid data" in message
    assert "Errno" not in message
    assert "<none>" not in message
