"""Deadlines for tests that assert something happens in time, on any machine speed.

A bound a quiet machine meets with room can fail on a loaded one: a step that needs
0.2 s of CPU takes a second and more when a dozen processes share two cores. So:

- work a budget must stop runs far past the budget on the fastest machine (minutes of
  CPU, or it blocks until the test releases it), so the budget always stops it;
- a bound on how long something takes is what a quiet 2-core machine needs with room,
  times :func:`load_factor`, and stays far below how long the failure it catches
  takes (a wait for the whole budget, a model asked to take 30 s);
- a deadline that only says "it finished" (a turn's end, a process's exit) is
  generous: minutes, never the quiet machine's time.

Example:
    >>> within(2.0) >= 2.0
    True
"""

from __future__ import annotations

import os

__all__ = ["load_factor", "within"]


def load_factor() -> float:
    """How many times slower than quiet a CPU-bound step runs now, at least 1: the
    processes waiting for a core (the 1-minute load average) per core this process may
    use, and under pytest-xdist at least what the other workers can take.

    The load average counts the other workers, but it lags a minute behind a rise; a
    worker's neighbours may each hold a core from the first test on, leaving this one
    ``cores - (workers - 1)`` of ``cores`` (on CI's 2 cores with ``-n 2``: half, so 2).
    A quiet serial run gives 1; the suite on 2 cores beside two busy loops about 2.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cores = max(1, cores or 1)
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    shared = cores / max(1, cores - (workers - 1))
    return max(1.0, os.getloadavg()[0] / cores, shared)


def within(seconds: float) -> float:
    """``seconds`` (a quiet machine's bound, with room) scaled by :func:`load_factor`."""
    return seconds * load_factor()
