"""The fixed colour palette the reference model names colours from.

A colour is named by its nearest palette entry in CIELAB (D65), where straight-line
distance roughly follows how different two colours look; RGB distance would call a
dark teal "green" or a brown "red" far more often.

Example:
    >>> nearest_colour((31, 138, 128))
    'teal'
    >>> hex_of("red")
    '#dc1e1e'
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["PALETTE", "hex_of", "nearest_colour", "rgb_to_lab", "to_hex"]

#: Name -> representative sRGB. Order is only for ties, which need exact equidistance.
PALETTE: dict[str, tuple[int, int, int]] = {
    "red": (220, 30, 30),
    "orange": (245, 130, 20),
    "yellow": (240, 215, 30),
    "green": (40, 150, 40),
    "teal": (20, 128, 120),
    "cyan": (30, 200, 225),
    "blue": (35, 70, 215),
    "purple": (115, 45, 165),
    "magenta": (210, 20, 190),
    "pink": (245, 150, 190),
    "brown": (125, 75, 35),
    "black": (0, 0, 0),
    "grey": (128, 128, 128),
    "white": (255, 255, 255),
}


def _linear(c: float) -> float:
    c /= 255.0
    return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4


def _f(t: float) -> float:
    return t ** (1 / 3) if t > (6 / 29) ** 3 else t / (3 * (6 / 29) ** 2) + 4 / 29


def rgb_to_lab(rgb: Sequence[float]) -> tuple[float, float, float]:
    """sRGB (0..255) to CIELAB under D65."""
    r, g, b = (_linear(float(v)) for v in rgb[:3])
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883
    fx, fy, fz = _f(x), _f(y), _f(z)
    return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)


_PALETTE_LAB = {name: rgb_to_lab(rgb) for name, rgb in PALETTE.items()}


def nearest_colour(rgb: Sequence[float]) -> str:
    """The palette name nearest to ``rgb`` in CIELAB."""
    lab = rgb_to_lab(rgb)
    return min(
        _PALETTE_LAB,
        key=lambda n: sum((a - b) ** 2 for a, b in zip(lab, _PALETTE_LAB[n], strict=True)),
    )


def to_hex(rgb: Sequence[float]) -> str:
    """``#rrggbb`` of an sRGB triple, channels rounded and clamped to 0..255."""
    return "#" + "".join(f"{max(0, min(255, round(float(v)))):02x}" for v in rgb[:3])


def hex_of(name: str) -> str:
    """The hex of a palette entry."""
    return to_hex(PALETTE[name])
