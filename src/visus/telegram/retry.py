"""Bot API calls that survive flood control and flaky networks.

Example:
    >>> async def ok() -> int: return 1
    >>> asyncio.run(with_retry(ok, what="demo"))
    1
"""

from __future__ import annotations

import asyncio
import datetime as dtm
import logging
import warnings
from collections.abc import Awaitable, Callable
from typing import TypeVar

from telegram.error import BadRequest, NetworkError, RetryAfter, TimedOut
from telegram.warnings import PTBDeprecationWarning

from visus import limits

__all__ = ["with_retry"]

log = logging.getLogger(__name__)

T = TypeVar("T")


def _retry_after_seconds(e: RetryAfter) -> float:
    # PTB 22 warns on reading retry_after as int; the value is the same either way.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        value = e.retry_after
    seconds = value.total_seconds() if isinstance(value, dtm.timedelta) else float(value)
    return min(max(seconds, 0.0), limits.TELEGRAM_MAX_RETRY_AFTER_SECONDS)


async def with_retry(
    call: Callable[[], Awaitable[T]],
    *,
    what: str,
    retries: int = limits.TELEGRAM_MAX_RETRIES,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> T:
    """Run one Bot API call, retrying 429s (after ``retry_after``) and network errors.

    A ``BadRequest`` (Telegram refused the call itself) is not retried. After
    ``retries`` retries the last error is raised.
    """
    attempt = 0
    while True:
        try:
            return await call()
        except RetryAfter as e:
            if attempt >= retries:
                raise
            wait = _retry_after_seconds(e)
            log.warning("telegram %s: 429, retrying after %.1fs", what, wait)
        except BadRequest:
            raise
        except (TimedOut, NetworkError) as e:
            if attempt >= retries:
                raise
            wait = min(2.0**attempt * 0.5, limits.TELEGRAM_MAX_RETRY_AFTER_SECONDS)
            log.warning("telegram %s: %s, retrying in %.1fs", what, e, wait)
        attempt += 1
        await sleep(wait)
