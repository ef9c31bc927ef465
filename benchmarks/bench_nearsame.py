"""Near-identical screenshots: could a perceptual criterion treat them as unchanged?

Issue 24 asks that an unchanged screen not be sent twice; visus recognises a screen as
unchanged when the bytes it would send equal a live image's (the fitted view's digest).
A screen that differs only by a blinking caret or a ticking clock is sent again. This
measures whether any perceptual criterion could call such screens unchanged without ever
hiding a change the model must see (a changed word, digit or sign).

Screens: a 2560x1600 editor window drawn with Pillow (DejaVu fonts, as visus ships them:
title bar with a clock, sidebar, 13 px code, a table, a status bar), each variant one
small change, then fitted for claude-sonnet-4-6 by ``visus.perception.view`` (1568x980),
which is what the model would see and what retention compares. For each pair: pixels
that differ at all, pixels that differ by more than 48 levels, the changed area's
bounding box, and the Hamming distance of a 64-bit difference hash. Then each candidate
criterion is checked: which "cosmetic" pairs it would call unchanged (the saving) and
which "meaningful" ones (a change hidden from the model: disqualifying).

Then **only what changed** (issue 35): since no threshold may call a changed screen
unchanged, visus sends a changed screen as the crops where it differs (exactly) while
the screen before it is live. Measured here:

* each of the twelve changes, lowered by visus for claude-sonnet-4-6 (the base screen
  whole, the changed one as its note and crop) and POSTed to the reference server: the
  crop's size and tokens against the whole screen's, whether pasting it onto the base
  gives the changed screen exactly (every changed pixel), and what the reference model
  read in the crop it received against what it reads in the same region of the base;
* two 100-step sessions through visus's retention (defaults: 4 live, batches of 4) and
  lowering, each request POSTed to the reference server (prompt caching accounted as
  the providers document it, priced by ``visus.models.prices``), with and without the
  crops: **typing** (one character a step in an editor, the status bar's line and column
  following, another file opened every 25 steps) and **page loads** (a different page
  every step). Wires: Anthropic (claude-sonnet-4-6) and OpenAI Responses (gpt-5).

Run: ``.venv/bin/python -m benchmarks nearsame`` (``VISUS_NEARSAME_STEPS`` shortens the
sessions).
"""

from __future__ import annotations

import io
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

from PIL import Image, ImageChops

from benchmarks._sessions import changed_region_report, session_report
from tests.nearsame import HEIGHT, PAIRS, WIDTH, Screen, draw
from visus.perception import Reach, Refusal, view

MODEL = "claude-sonnet-4-6"


@dataclass(frozen=True)
class _Diff:
    name: str
    kind: str
    same_bytes: bool
    changed: int  # pixels differing at all
    strong: int  # pixels differing by more than 48 levels in some channel
    box: tuple[int, int]  # the changed area's width and height
    dhash: int  # Hamming distance of the 64-bit difference hashes


def _dhash(im: Image.Image) -> int:
    small = im.convert("L").resize((9, 8), Image.Resampling.LANCZOS)
    px = list(small.getdata())
    return sum(1 << i for i in range(64) if px[(i // 8) * 9 + i % 8] > px[(i // 8) * 9 + i % 8 + 1])


def _diff(name: str, kind: str, a: bytes, b: bytes) -> _Diff:
    ia, ib = Image.open(io.BytesIO(a)).convert("RGB"), Image.open(io.BytesIO(b)).convert("RGB")
    delta = ImageChops.difference(ia, ib)
    peak = delta.convert("L").point(lambda v: 255 if v else 0)
    strong = Image.merge("RGB", [c.point(lambda v: 255 if v > 48 else 0) for c in delta.split()])
    strong_any = ImageChops.lighter(ImageChops.lighter(*strong.split()[:2]), strong.split()[2])
    box = delta.getbbox()
    return _Diff(
        name,
        kind,
        a == b,
        peak.histogram()[255],
        strong_any.histogram()[255],
        (box[2] - box[0], box[3] - box[1]) if box else (0, 0),
        bin(_dhash(ia) ^ _dhash(ib)).count("1"),
    )


def _fitted(png: bytes, reach: Reach) -> bytes:
    seen = view(png, reach=reach, model=MODEL, name="screen.png")
    assert not isinstance(seen, Refusal), seen
    return seen.data


#: Candidate criteria: "treat the screen as unchanged when ...".
CRITERIA: list[tuple[str, Callable[[_Diff], bool]]] = [
    ("the sent bytes are equal (visus today)", lambda d: d.same_bytes),
    ("64-bit dHash equal", lambda d: d.dhash == 0),
    ("<= 16 pixels differ by > 48 levels", lambda d: d.strong <= 16),
    ("<= 40 pixels differ by > 48 levels", lambda d: d.strong <= 40),
    ("<= 100 pixels differ at all", lambda d: d.changed <= 100),
    ("the change fits in 24x24 px", lambda d: max(d.box) <= 24),
]


def main() -> None:
    reach = Reach([tempfile.mkdtemp()])
    base = _fitted(draw(Screen()), reach)
    diffs = [_diff(n, k, base, _fitted(draw(s), reach)) for n, k, s in PAIRS]
    print(f"fitted for {MODEL}: {WIDTH}x{HEIGHT} -> {Image.open(io.BytesIO(base)).size}")
    print(f"{'pair':44} {'kind':10} {'bytes=':>6} {'px':>5} {'>48':>5} {'box':>9} {'dhash':>5}")
    for d in diffs:
        box = f"{d.box[0]}x{d.box[1]}"
        print(
            f"{d.name:44} {d.kind:10} {d.same_bytes!s:>6} {d.changed:>5} {d.strong:>5} "
            f"{box:>9} {d.dhash:>5}"
        )
    print("\ncriterion: cosmetic pairs it calls unchanged / meaningful pairs it would hide")
    for label, rule in CRITERIA:
        saved = [d.name for d in diffs if d.kind == "cosmetic" and rule(d)]
        hidden = [d.name for d in diffs if d.kind == "meaningful" and rule(d)]
        verdict = "UNSAFE" if hidden else ("safe" if saved else "safe, saves nothing")
        print(f"  {label:42} {len(saved)}/3 saved, {len(hidden)} hidden: {verdict}")
        for name in hidden:
            print(f"      hides: {name}")
    changed_region_report()
    session_report()
