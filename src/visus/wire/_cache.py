"""Where a prompt-cache "ladder" breakpoint goes (Anthropic ``cache_control``, Bedrock
``cachePoint``): shared by the two wires that place breakpoints themselves.

A cached prefix is found only at a breakpoint or up to about 20 content blocks before one
(Anthropic's prompt-caching guide: hits are looked for "approximately 20 blocks" back;
more blocks between a change and the breakpoint need another breakpoint closer to it).
At an eviction the window's breakpoint moves past the images that just became
descriptors, and the prefix the last window cached ends where that window began: when
the window spanned more than the lookback (an unchanged screen for many steps, several
blocks per step) no breakpoint reaches it, and the whole history is written again. A
second breakpoint :data:`LADDER_BLOCKS` blocks before the window's extends the reach to
about ``LADDER_BLOCKS + 20`` blocks; it adds no write (what is written is the stretch
from the longest hit to the last breakpoint), and it is the fourth of the four
breakpoints a request may carry (head, ladder, window, newest block).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["LADDER_BLOCKS", "ladder_message", "window_marks"]

#: How far (in content blocks) the ladder sits before the window's breakpoint: under
#: the 20-block lookback, so the two breakpoints' reaches overlap.
LADDER_BLOCKS = 16


def ladder_message(blocks: Sequence[int], window: int) -> int | None:
    """The message whose last block carries the ladder breakpoint, or None.

    ``blocks`` is each message's number of content blocks, and the window's breakpoint
    is on the last block of message ``window``. The ladder goes on the message holding
    the block :data:`LADDER_BLOCKS` blocks before that one (on its last block, so at
    most that far back), which must come before ``window``.

    Example:
        >>> ladder_message([1] * 30, 25)  # one block a message: 16 messages back
        9
        >>> ladder_message([2] * 30, 25)  # two a message: block 16 back is in message 17
        17
        >>> ladder_message([1] * 30, 10) is None  # the history is inside the lookback
        True
        >>> ladder_message([1, 40], 1) is None  # block 16 back is in the window's message
        True
    """
    target = sum(blocks[: window + 1]) - 1 - LADDER_BLOCKS  # the block 16 before the mark
    if target < 0:
        return None
    seen = 0
    for i, count in enumerate(blocks[:window]):
        seen += count
        if target < seen:
            return i
    return None


def window_marks(blocks: Sequence[int], first_live: int | None) -> tuple[int, ...]:
    """The messages whose last block carries the retention window's breakpoints.

    ``blocks`` is each message's number of content blocks; ``first_live`` the message
    holding the first live image (None: no image). The window's breakpoint ends the
    history before it (an eviction changes the request only from there on, so the
    next one reads this prefix from the cache), and the ladder sits
    :data:`LADDER_BLOCKS` blocks before that. Oldest first. The wires and the
    integrations that place breakpoints in a framework's messages share it.

    Example:
        >>> window_marks([1] * 30, 26)
        (9, 25)
        >>> window_marks([1] * 30, 5), window_marks([1] * 30, 0), window_marks([1] * 3, None)
        ((4,), (), ())
    """
    if first_live is None or first_live <= 0:
        return ()
    window = first_live - 1
    ladder = ladder_message(blocks, window)
    return (window,) if ladder is None else (ladder, window)
