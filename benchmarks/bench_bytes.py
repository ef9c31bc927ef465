"""Bytes before pixels: the smallest encoding at which the reference model still reads.

A request over its byte budget (Anthropic: 32 MB) used to lose its oldest images; most of
those bytes are a lossless encoding's. This measures, for each candidate re-encoding at
the same size (JPEG qualities with full-resolution and 4:2:0 colour, lossy WebP
qualities), its bytes and the words the reference model's OCR
(:func:`visus.reference.vision.perceive`) reads in it, against the lossless PNG:

* **noise**: 1200x900 of random pixels (incompressible: ~3.1 MB as PNG, the issue's
  motivating case) with 16 cards of nonsense words at 20 px;
* **editor**: the nearsame editor window (tests/nearsame.py) as ``view`` fits it for
  claude-sonnet-4-6 (1356x847: 13 px code shrunk to ~7 px, the smallest text here);
* **photo**: a 1600x1000 smooth photo-like gradient with shapes and a caption panel.

A word counts when its exact text comes back (nonsense words: the noise cards; every
word the PNG reads: editor and photo). An encoding qualifies when it reads every word
the PNG reads on every image; the chosen one is the smallest qualifying, by total bytes
(:data:`visus.media.compact.COMPACT_ENCODINGS`). Then: twelve noise screens lowered for
claude-sonnet-4-6 on the Anthropic wire, before and after.

Run: ``.venv/bin/python -m benchmarks bytes``
"""

from __future__ import annotations

import io
import random
import tempfile
from collections import Counter

from PIL import Image, ImageDraw, ImageFont

from tests.nearsame import Screen, draw
from visus.media import classify, font_path
from visus.perception import Reach, Refusal, view
from visus.reference.vision import perceive

#: (label, Pillow format, options): the candidates, lossless reference first.
CANDIDATES: list[tuple[str, str, dict[str, object]]] = [
    ("png", "PNG", {}),
    ("webp lossless", "WEBP", {"lossless": True, "quality": 80, "method": 4}),
    *[
        (f"jpeg q{q} 4:4:4", "JPEG", {"quality": q, "subsampling": 0})
        for q in (95, 90, 80, 70, 60, 50)
    ],
    *[(f"jpeg q{q} 4:2:0", "JPEG", {"quality": q, "subsampling": 2}) for q in (90, 75, 60)],
    *[(f"webp q{q}", "WEBP", {"quality": q, "method": 4}) for q in (90, 80, 70, 60, 50, 40)],
]


def _word(rng: random.Random) -> str:
    return "".join(rng.choice("bdfgkmnprst") + rng.choice("aou") for _ in range(3))


def noise_screen(seed: int) -> tuple[Image.Image, list[str]]:
    """1200x900 random pixels with 16 cards of nonsense words (20 px)."""
    rng = random.Random(seed)
    im = Image.frombytes("RGB", (1200, 900), rng.randbytes(1200 * 900 * 3))
    d = ImageDraw.Draw(im)
    font = ImageFont.truetype(str(font_path("DejaVuSans.ttf")), 20)
    words = []
    for i in range(16):
        x, y = 40 + (i % 4) * 290, 60 + (i // 4) * 210
        word = _word(rng)
        words.append(word)
        d.rectangle((x, y, x + 200, y + 44), fill=(245, 245, 240))
        d.text((x + 100, y + 22), word, font=font, fill=(30, 30, 40), anchor="mm")
    return im, words


def editor_screen() -> Image.Image:
    seen = view(draw(Screen()), reach=Reach([tempfile.mkdtemp()]), model="claude-sonnet-4-6")
    assert not isinstance(seen, Refusal), seen
    return Image.open(io.BytesIO(seen.data)).convert("RGB")


def photo_screen() -> tuple[Image.Image, list[str]]:
    """A 1600x1000 photo-like image (gradient, shapes) with a caption panel of 36 words."""
    rng = random.Random(5)
    w, h = 1600, 1000
    im = Image.linear_gradient("L").resize((w, h)).convert("RGB")
    im = Image.blend(im, Image.new("RGB", (w, h), (180, 90, 40)), 0.45)
    d = ImageDraw.Draw(im)
    for _ in range(12):
        x, y = rng.randrange(w), rng.randrange(h)
        d.ellipse((x, y, x + 160, y + 120), fill=(rng.randrange(256), 120, rng.randrange(256)))
    d.rectangle((80, 760, 1520, 940), fill=(250, 250, 250))
    font = ImageFont.truetype(str(font_path("DejaVuSans.ttf")), 18)
    words = []
    for row in range(4):
        line = [_word(rng) for _ in range(9)]
        words += line
        d.text((100, 775 + row * 40), " ".join(line), font=font, fill=(20, 20, 20))
    return im, words


def _encode(im: Image.Image, fmt: str, options: dict[str, object]) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **options)
    return buf.getvalue()


def _read(data: bytes) -> Counter[str]:
    return Counter(w.text for w in perceive(data).words)


def _score(expected: Counter[str], seen: Counter[str]) -> int:
    return sum(min(n, seen[w]) for w, n in expected.items())


def main() -> None:
    noise, noise_words = noise_screen(1)
    photo, photo_words = photo_screen()
    editor = editor_screen()
    # The editor's truth: every word of two letters or more that its PNG reads (the
    # reader's stray one-letter reads of shapes are no words to lose).
    editor_words = [w for w in _read(_encode(editor, "PNG", {})).elements() if len(w) > 1]
    images = [
        ("noise", noise, noise_words),
        ("photo", photo, photo_words),
        ("editor", editor, editor_words),
    ]
    rows: dict[str, list[tuple[int, int, int]]] = {label: [] for label, _, _ in CANDIDATES}
    for name, im, words in images:
        expected = Counter(words)
        for label, fmt, options in CANDIDATES:
            data = _encode(im, fmt, options)
            rows[label].append((len(data), _score(expected, _read(data)), len(words)))
        print(f"  {name}: {im.width}x{im.height}, {classify(im)}, {len(words)} words")
    names = [n for n, _, _ in images]
    print("\n| encoding | " + " | ".join(f"{n} bytes | {n} words" for n in names) + " |")
    print("| --- |" + " ---: | ---: |" * len(names))
    for label, cells in rows.items():
        parts = " | ".join(f"{size:,} | {read}/{total}" for size, read, total in cells)
        print(f"| {label} | {parts} |")
    png = rows["png"]
    for kind in ("photo", "graphic"):
        at = [i for i, (_, im, _) in enumerate(images) if classify(im) == kind]
        fine = [
            (sum(rows[label][i][0] for i in at), label)
            for label in rows
            if label != "png" and all(rows[label][i][1] >= png[i][1] for i in at)
        ]
        print(
            f"{kind} images ({', '.join(names[i] for i in at)}): encodings reading every word "
            f"the PNG reads, smallest first: {sorted(fine)[:4]}"
        )
