"""Run benchmarks: ``python -m benchmarks`` (all) or ``python -m benchmarks NAME...``.

NAME is the part after ``bench_`` in a module's file name.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time
from pathlib import Path


def _names() -> list[str]:
    here = Path(__file__).parent
    return sorted(
        m.name.removeprefix("bench_")
        for m in pkgutil.iter_modules([str(here)])
        if m.name.startswith("bench_")
    )


def main(argv: list[str]) -> int:
    available = _names()
    chosen = argv or available
    unknown = [n for n in chosen if n not in available]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; available: {', '.join(available)}")
        return 2
    for name in chosen:
        print(f"\n=== {name}")
        start = time.perf_counter()
        importlib.import_module(f"benchmarks.bench_{name}").main()
        print(f"--- {name} took {time.perf_counter() - start:.1f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
