"""Fonts shipped with visus or taken from a PyPI package, never from the machine.

DejaVu Sans, Serif and Sans Mono ship in ``visus/media/fonts`` (their licence,
``LICENSE-DejaVu.txt``, allows redistribution). Scripts DejaVu lacks come from two
font packages on PyPI: Noto Sans CJK (``manimgx-fonts-cjk``) for Chinese, Japanese
and Korean, and Noto Emoji plus Noto Sans Symbols (``manimgx-fonts``) for emoji and
symbols. Both are monochrome outline fonts that FreeType (Pillow) and librsvg draw.

Example:
    >>> from pathlib import Path
    >>> Path(font_path("DejaVuSansMono.ttf")).is_file()
    True
    >>> [Path(p).name for p in fallback_font_paths()][:1]
    ['NotoSansCJK-VF.otf.ttc']
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

from visus.errors import UnsupportedTypeError

__all__ = ["fallback_font_paths", "font_dir", "font_path"]

_HERE = Path(__file__).resolve().parent / "fonts"

#: (package, file) of each fallback font, in the order glyphs are looked up.
_FALLBACKS = (
    ("manimgx_fonts_cjk", "NotoSansCJK-VF.otf.ttc"),
    ("manimgx_fonts", "NotoEmoji[wght].ttf"),
    ("manimgx_fonts", "NotoSansSymbols[wght].ttf"),
    ("manimgx_fonts", "NotoSans[wght].ttf"),
)


@functools.cache
def font_dir() -> Path:
    """The directory holding the DejaVu fonts shipped with visus."""
    if not (_HERE / "DejaVuSansMono.ttf").is_file():
        raise UnsupportedTypeError(f"visus is installed without its fonts (no {_HERE})")
    return _HERE


def font_path(name: str) -> str:
    """Path of one shipped font file, e.g. ``font_path("DejaVuSansMono.ttf")``."""
    return str(font_dir() / name)


@functools.cache
def fallback_font_paths() -> tuple[str, ...]:
    """Fonts for the characters DejaVu lacks (CJK, emoji, symbols), those installed.

    Found with ``importlib`` without importing the packages; a missing package only
    means its characters draw as boxes, so it is skipped rather than an error.
    """
    found: list[str] = []
    for package, name in _FALLBACKS:
        spec = importlib.util.find_spec(package)
        for location in list(spec.submodule_search_locations or []) if spec else []:
            candidate = Path(location) / name
            if candidate.is_file():
                found.append(str(candidate))
                break
    return tuple(found)
