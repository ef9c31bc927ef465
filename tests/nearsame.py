"""Screens that differ by one small change, drawn deterministically with Pillow (the
DejaVu fonts visus ships): a 2560x1600 editor window with a clock in its title bar, a
sidebar, 13 px code, a table, a progress bar and a status bar with a spinner. Each of
:data:`PAIRS` changes one thing: "cosmetic" (a caret blink, a clock tick, a spinner
frame) or "meaningful" (a letter, a digit, a minus sign, a tick, a squiggle...). Used by
``python -m benchmarks nearsame`` and the retention test that no small change is ever
taken for an unchanged screen.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

from PIL import Image, ImageDraw, ImageFont

from visus.media import font_path

WIDTH, HEIGHT = 2560, 1600

_CODE = [
    "def total(orders: list[Order]) -> int:",
    '    """The sum of every paid order, in cents."""',
    "    count = 0",
    "    for order in orders:",
    "        if order.paid and not order.refunded:",
    "            count += order.amount",
    "    return count",
    "",
    "def report(orders: list[Order]) -> str:",
    "    paid = [o for o in orders if o.paid]",
    '    return f"{len(paid)} paid, {total(paid)} cents"',
]
_ROWS = [("north", "1,204", "12.5%"), ("south", "986", "-3.1%"), ("east", "2,310", "7.0%")]


@dataclass(frozen=True)
class Screen:
    """What differs between variants (everything else is drawn the same)."""

    clock: str = "12:41:07"
    caret: bool = True
    code: tuple[str, ...] = tuple(_CODE)
    rows: tuple[tuple[str, str, str], ...] = tuple(_ROWS)
    status: str = "Saved"
    spinner: int = 0
    checked: bool = False
    progress: int = 40
    squiggle: bool = False


def _font(name: str, size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(str(font_path(name)), size)


def draw(s: Screen) -> bytes:
    im = Image.new("RGB", (WIDTH, HEIGHT), (250, 250, 251))
    d = ImageDraw.Draw(im)
    ui, mono = _font("DejaVuSans.ttf", 14), _font("DejaVuSansMono.ttf", 13)
    d.rectangle((0, 0, WIDTH, 36), fill=(38, 41, 48))  # title bar and its clock
    d.text((16, 10), "orders.py - editor", font=ui, fill=(220, 220, 220))
    d.text((WIDTH - 90, 10), s.clock, font=ui, fill=(220, 220, 220))
    d.rectangle((0, 36, 300, HEIGHT - 28), fill=(236, 238, 242))  # sidebar
    for i, name in enumerate(["orders.py", "report.py", "models.py", "tests/", "README.md"]):
        d.text((24, 60 + 28 * i), name, font=ui, fill=(40, 40, 40))
    d.rectangle((24, 220, 36, 232), outline=(90, 90, 90))  # a checkbox
    if s.checked:
        d.line((26, 226, 29, 230, 34, 222), fill=(30, 120, 30), width=2)
    d.text((44, 218), "run tests on save", font=ui, fill=(40, 40, 40))
    for i, line in enumerate(s.code):  # the editor
        d.text((340, 60 + 20 * i), f"{i + 1:>3}  {line}", font=mono, fill=(30, 30, 30))
    if s.squiggle:  # an error marker under "count" on line 6
        y, x = 60 + 20 * 5 + 17, 340 + 8 * 17
        d.line([(x + k * 3, y + (k % 2) * 2) for k in range(14)], fill=(220, 40, 40), width=1)
    if s.caret:  # after "return count" (line 7)
        x = 340 + 8 * (5 + len(s.code[6]))
        d.rectangle((x, 60 + 20 * 6, x + 1, 60 + 20 * 6 + 16), fill=(20, 20, 20))
    for r, row in enumerate(s.rows):  # a table
        for c, cell in enumerate(row):
            d.text((340 + 140 * c, 360 + 24 * r), cell, font=ui, fill=(30, 30, 30))
    d.rectangle((340, 460, 840, 472), outline=(120, 120, 120))  # a progress bar
    d.rectangle((341, 461, 341 + 5 * s.progress, 471), fill=(60, 120, 220))
    d.rectangle((0, HEIGHT - 28, WIDTH, HEIGHT), fill=(230, 232, 236))  # status bar and a spinner
    d.text((16, HEIGHT - 22), s.status, font=ui, fill=(40, 40, 40))
    cx, cy = WIDTH - 40, HEIGHT - 14
    d.arc((cx - 7, cy - 7, cx + 7, cy + 7), 45 * s.spinner, 45 * s.spinner + 270, fill=(60, 60, 60))
    buf = io.BytesIO()
    im.save(buf, "PNG")
    return buf.getvalue()


def _code_with(line: int, text: str) -> tuple[str, ...]:
    code = list(_CODE)
    code[line] = text
    return tuple(code)


def _rows_with(row: int, col: int, text: str) -> tuple[tuple[str, str, str], ...]:
    rows = [list(r) for r in _ROWS]
    rows[row][col] = text
    return tuple((a, b, c) for a, b, c in rows)


_NO_PERIOD = '    """The sum of every paid order, in cents"""'
_NOW = "        if order.paid and now order.refunded:"
_MEANINGFUL = "meaningful"

#: (name, kind, variant): "cosmetic" may be called unchanged; "meaningful" must not be.
PAIRS: list[tuple[str, str, Screen]] = [
    ("caret blinks off", "cosmetic", Screen(caret=False)),
    ("clock ticks a second", "cosmetic", Screen(clock="12:41:08")),
    ("spinner turns", "cosmetic", Screen(spinner=1)),
    (
        "one letter in code (count -> mount)",
        _MEANINGFUL,
        Screen(code=_code_with(6, "    return mount")),
    ),
    ("a minus sign in the table (986 -> -986)", _MEANINGFUL, Screen(rows=_rows_with(1, 1, "-986"))),
    ("a digit in the table (1,204 -> 1,284)", _MEANINGFUL, Screen(rows=_rows_with(0, 1, "1,284"))),
    ("a period in a docstring removed", _MEANINGFUL, Screen(code=_code_with(1, _NO_PERIOD))),
    ("not -> now in a condition", _MEANINGFUL, Screen(code=_code_with(4, _NOW))),
    ("checkbox ticked", _MEANINGFUL, Screen(checked=True)),
    ("error squiggle appears", _MEANINGFUL, Screen(squiggle=True)),
    ("progress 40% -> 41%", _MEANINGFUL, Screen(progress=41)),
    ("status Saved -> Saving", _MEANINGFUL, Screen(status="Saving")),
]
