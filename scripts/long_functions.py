"""List the functions in src/visus longer than a limit (default 60 lines).

Run from the checkout: ``python scripts/long_functions.py [LIMIT] [--all]``. A
function's length counts from its ``def`` line to its last line (decorators and
the docstring included, as a reader scrolls them). Nested functions count on
their own and inside their parent. Prints one line per function, longest first,
then the count; ``--all`` also counts the reference server's wire parsers, which
are left long on purpose (each reads one provider's request format top to bottom).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "visus"
#: Long on purpose: the reference server's parsers of each wire's request body.
EXEMPT = ("reference/wire_",)


def long_functions(root: Path, limit: int) -> Iterator[tuple[int, str]]:
    """(length, "path:line name") for each function longer than ``limit`` lines."""
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > limit:
                    yield length, f"src/visus/{rel}:{node.lineno} {node.name}"


def main(argv: list[str]) -> int:
    limit = int(next((a for a in argv if a.isdigit()), "60"))
    found = sorted(long_functions(SRC, limit), reverse=True)
    if "--all" not in argv:
        found = [f for f in found if not any(f"src/visus/{e}" in f[1] for e in EXEMPT)]
    for length, where in found:
        print(f"{length:4d}  {where}")
    print(f"{len(found)} functions over {limit} lines")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
