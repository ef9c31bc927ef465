"""A screen whose small text no plain fitted view can read and a zoomed one can (issue 26).

The reference model's OCR (``visus.reference.vision.perceive``) is the reader: a word is
read when it comes back among the words it sees. The screen is drawn deterministically
(DejaVu Sans, the font visus ships) so every surface's test sees the same pixels.
"""

from __future__ import annotations

import io
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

#: The screen: 2400 x 1350, fitted for a 1568 px model to 1429 wide (0.6x).
WIDTH, HEIGHT = 2400, 1350
#: The words, drawn at 11 px: about 6.5 px once the whole screen is fitted.
WORDS = ("ZEBRAFISH", "marmalade")
#: Where they are, with a margin, in the screen's own pixels.
REGION = [1420, 925, 1760, 985]


def screen_png(width: int = WIDTH, height: int = HEIGHT) -> bytes:
    """The screen (a larger one keeps the words where they are: ``REGION`` holds)."""
    from visus.media import font_path

    font = ImageFont.truetype(str(font_path("DejaVuSans.ttf")), 11)
    im = Image.new("RGB", (width, height), (245, 246, 248))
    draw = ImageDraw.Draw(im)
    draw.rectangle((0, 0, width, 40), fill=(40, 44, 52))  # a title bar
    draw.text((REGION[0] + 20, REGION[1] + 20), " ".join(WORDS), font=font, fill=(30, 30, 30))
    buf = io.BytesIO()
    im.save(buf, "PNG")
    return buf.getvalue()


def write_screen(
    folder: Path, name: str = "screen.png", width: int = WIDTH, height: int = HEIGHT
) -> Path:
    path = folder / name
    path.write_bytes(screen_png(width, height))
    return path


def words_read(image: bytes) -> list[str]:
    """The words the reference model's OCR reads in ``image``."""
    from visus.reference.vision import perceive

    return [w.text for w in perceive(image).words]
