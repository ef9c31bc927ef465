"""The offline reference vision model and its wire-faithful server.

The model perceives only real image parts (OCR and ink colour), so an image that
was stringified into text or dropped on the way is simply not seen.

Example:
    >>> from visus.reference import make_grid, perceive
    >>> png, expected = make_grid(2, 2, seed=1)
    >>> len(perceive(png).words)
    4
"""

from __future__ import annotations

from visus.reference.grid import make_grid, score_grid
from visus.reference.vision import SeenImage, SeenWord, perceive

__all__ = ["SeenImage", "SeenWord", "make_grid", "perceive", "score_grid"]
