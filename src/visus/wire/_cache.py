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

__all__ = ["LADDER_BLOCKS", "ladder_message"]

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
