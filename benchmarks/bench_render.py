"""The render budget's cost on the common path: ``load()`` (render in the warm worker
process, under the time budget and memory cap) against the same render in the
caller's process (what ``load()`` did before the budget), for a ~500 KB SVG and a
2000-line source file fitted for a Claude model.

Both run in this process, interleaved round by round (so machine load hits both
alike), after one warm-up call each (the worker's start and the lazy imports are not
per-call costs). Reports the median and the spread (min-max) of the rounds and the
ratio in-process / worker: at or above ~1.0 means the budget costs nothing.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from benchmarks.bench_media import _PROFILE, _source, _svg

_ROUNDS = 9


def main() -> None:
    from visus.media import Profile, load
    from visus.media.render import render_source

    profile = Profile(**_PROFILE)  # type: ignore[arg-type]
    cases = {
        "~500 KB SVG (2400x1800)": (_svg(), None),
        "2000-line source file": (_source(), "module.py"),
    }
    print(f"median of {_ROUNDS} interleaved rounds [min-max]; ratio = in-process / worker")
    print(f"{'case':26} {'in-process':>22} {'worker (budgeted)':>22} {'ratio':>6}")
    for label, (data, name) in cases.items():

        def in_process(data: bytes = data, name: str | None = name) -> object:
            return render_source(
                data, profile=profile, render=True, page=None, offset=None, limit=None, name=name
            )

        def worker(data: bytes = data, name: str | None = name) -> object:
            return load(data, profile=profile, name=name)

        runs: dict[str, list[float]] = {"in": [], "worker": []}
        fns: dict[str, Callable[[], object]] = {"in": in_process, "worker": worker}
        for fn in fns.values():
            fn()
        for _ in range(_ROUNDS):
            for key, fn in fns.items():
                start = time.perf_counter()
                fn()
                runs[key].append(time.perf_counter() - start)

        def cell(xs: list[float]) -> str:
            return (
                f"{statistics.median(xs) * 1000:6.0f}ms [{min(xs) * 1000:.0f}-{max(xs) * 1000:.0f}]"
            )

        ratio = statistics.median(runs["in"]) / statistics.median(runs["worker"])
        print(f"{label:26} {cell(runs['in']):>22} {cell(runs['worker']):>22} {ratio:5.2f}x")


if __name__ == "__main__":
    main()
