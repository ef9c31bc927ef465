"""Fonts from a PyPI package, never from the machine: DejaVu as shipped in matplotlib.

No dedicated monospace-font package exists on PyPI; matplotlib bundles the DejaVu
family under ``mpl-data/fonts/ttf``. The path is found with ``importlib`` without
importing matplotlib (which would pull in numpy and its rc machinery).
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

from visus.errors import UnsupportedTypeError

__all__ = ["font_dir", "font_path"]


@functools.cache
def font_dir() -> Path:
    """The directory holding matplotlib's bundled TrueType fonts."""
    spec = importlib.util.find_spec("matplotlib")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        candidate = Path(location) / "mpl-data" / "fonts" / "ttf"
        if (candidate / "DejaVuSansMono.ttf").is_file():
            return candidate
    raise UnsupportedTypeError(
        "rendering text needs the DejaVu fonts bundled with matplotlib: pip install matplotlib"
    )


def font_path(name: str) -> str:
    """Path of one bundled font file, e.g. ``font_path("DejaVuSansMono.ttf")``."""
    return str(font_dir() / name)
