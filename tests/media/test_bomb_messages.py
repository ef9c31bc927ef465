"""A bomb header is refused in visus's words, quietly, whatever Pillow's guard says.

Pillow warns on stderr between our pixel bound and twice it, and raises its own
error past that; neither may reach the user: the refusal names our bound and the
size when the header gave it.
"""

from __future__ import annotations

import warnings

import pytest
from media_corpus import CLAUDE, png_header_only

from visus import limits
from visus.errors import TooLargeError
from visus.media import load


@pytest.mark.parametrize(("w", "h"), [(12_000, 12_000), (20_000, 12_000), (40_000, 40_000)])
def test_bomb_refusal_names_our_bound_and_warns_nothing(w: int, h: int) -> None:
    data = png_header_only(w, h)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(TooLargeError) as err:
            load(data, profile=CLAUDE)
    message = str(err.value)
    assert f"{limits.MAX_SOURCE_PIXELS:,} pixels" in message, message
    assert "decompression bomb" not in message.lower()
    assert "Image size" not in message
    assert [w.category.__name__ for w in caught] == []
    if w * h <= 2 * limits.MAX_SOURCE_PIXELS:
        # Our own header check ran: it says what the header claims.
        assert f"{w} x {h} pixels" in message
