"""Text and code rendered as a screenshot: Pygments colours, line numbers, wrapped lines.

One image holds one page of lines (``offset`` 0-based, ``limit`` lines, at most
``limits.TEXT_MAX_PAGE_LINES`` rows after wrapping); a header names the range
("lines 1-120 of 2000"). The font size is chosen so the render already fits the
profile where it can (hinted glyphs at the final size read better than a downscale),
never below a size OCR still reads.
"""

from __future__ import annotations

import contextlib
import functools
import math
import unicodedata
from dataclasses import dataclass

from PIL import Image, ImageDraw, ImageFont
from pygments.lexer import Lexer
from pygments.lexers import TextLexer, get_lexer_for_filename, guess_lexer
from pygments.styles import get_style_by_name
from pygments.token import Token, _TokenType
from pygments.util import ClassNotFound

from visus import limits
from visus.errors import InvalidInputError
from visus.media._fonts import fallback_font_paths, font_path
from visus.media.fitting import target_size

__all__ = ["TextPage", "count_lines", "decode_text", "render_text", "split_lines"]

# Largest and smallest glyph sizes (px) we render at; below the minimum, fit downsizes.
_FONT_MAX = 22
_FONT_MIN = 11
_LINE_SPACING = 1.3
_TAB_SIZE = 4
# Guessing a lexer reads only the start of the file (guess_lexer is slow on big inputs).
_GUESS_SAMPLE_CHARS = 8 * 1024
_STYLE = get_style_by_name("default")
_BACKGROUND = (255, 255, 255)
_HEADER_BACKGROUND = (236, 238, 241)
_GUTTER = (140, 140, 140)
_RULE = (210, 210, 210)
_INK = (30, 30, 30)
_CLIPPED = "…"
# A tall page of short lines may be laid out in up to this many side-by-side columns.
_MAX_COLUMNS = 3
_COLUMN_GAP = 3
_SEPARATOR = (120, 120, 120)


@dataclass(frozen=True, slots=True)
class TextPage:
    """A rendered page of text and the 1-based inclusive range it shows."""

    image: Image.Image
    line_start: int
    line_end: int
    line_total: int


def decode_text(data: bytes) -> str | None:
    """``data`` as text when it is valid UTF-8 (BOM allowed) without NUL bytes, else ``None``."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None
    return None if "\x00" in text else text


def split_lines(text: str) -> list[str]:
    r"""Lines as the read tool counts them: split on ``\n``, ``\r`` dropped, no phantom last line.

    Example:
        >>> split_lines("a\r\nb\n")
        ['a', 'b']
        >>> split_lines("")
        []
    """
    if not text:
        return []  # an empty file has no lines (not one empty line)
    lines = text.split("\n")
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def count_lines(text: str) -> int:
    r"""``len(split_lines(text))``, counted at C speed without building the lines.

    Example:
        >>> [count_lines(t) for t in ("", "a", "a\n", "a\r\nb", "\n")]
        [0, 1, 1, 2, 1]
    """
    if not text:
        return 0
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def _visible(line: str) -> str:
    line = line.expandtabs(_TAB_SIZE)
    if line.isprintable():
        return line
    # Control characters have no glyph and would shift the monospace grid.
    return "".join(
        c if c.isprintable() or unicodedata.category(c) == "Zs" else "\ufffd" for c in line
    )


def _lexer(name: str | None, sample: str) -> Lexer:
    options = {"stripnl": False, "ensurenl": False, "tabsize": 0}
    if name:
        basename = name.replace("\\", "/").rsplit("/", 1)[-1]
        try:
            return get_lexer_for_filename(basename, sample, **options)
        except ClassNotFound:
            pass
    try:
        lexer: Lexer = guess_lexer(sample, **options)
    except ClassNotFound:
        lexer = TextLexer(**options)
    return lexer


@functools.cache
def _colour(ttype: _TokenType) -> tuple[tuple[int, int, int], bool]:
    style = _STYLE.style_for_token(ttype)
    hex_colour = style.get("color") or ""
    if len(hex_colour) == 6:
        rgb = (int(hex_colour[0:2], 16), int(hex_colour[2:4], 16), int(hex_colour[4:6], 16))
    else:
        rgb = _INK
    return rgb, bool(style.get("bold"))


@functools.cache
def _font(size: int, bold: bool) -> ImageFont.FreeTypeFont:
    name = "DejaVuSansMono-Bold.ttf" if bold else "DejaVuSansMono.ttf"
    return ImageFont.truetype(font_path(name), size)


# A character DejaVu Sans Mono lacks (CJK, emoji, symbols) is drawn from the first
# fallback font that has it, scaled to fit its one cell so the grid stays aligned.
# Pillow has no font fallback of its own, and no cmap query: a font lacks a character
# when it draws it exactly as it draws a private-use code point no font maps.
_PROBE_PX = 24
_UNMAPPED = "\U000f0000"


def _ink(font: ImageFont.FreeTypeFont, ch: str) -> bytes:
    im = Image.new("L", (2 * _PROBE_PX, 2 * _PROBE_PX))
    ImageDraw.Draw(im).text((_PROBE_PX // 2, _PROBE_PX // 2), ch, font=font, fill=255)
    return im.tobytes()


@functools.cache
def _fallback_font(index: int, size: int) -> ImageFont.FreeTypeFont:
    font = ImageFont.truetype(fallback_font_paths()[index], size)
    # Variable fonts open at their first instance (Noto Sans CJK: Thin).
    with contextlib.suppress(OSError, ValueError):
        font.set_variation_by_name("Regular")
    return font


@functools.cache
def _face_for(ch: str) -> int | None:
    """-1 when DejaVu Sans Mono has ``ch``, else the index of the fallback that has it."""
    if ch.isascii() or not ch.isprintable():
        return -1
    mono = _font(_PROBE_PX, False)
    if _ink(mono, ch) != _ink(mono, _UNMAPPED):
        return -1
    for index in range(len(fallback_font_paths())):
        font = _fallback_font(index, _PROBE_PX)
        if _ink(font, ch) != _ink(font, _UNMAPPED):
            return index
    return None


def _draw_piece(
    draw: ImageDraw.ImageDraw,
    xy: tuple[float, float],
    piece: str,
    size: int,
    bold: bool,
    colour: tuple[int, int, int],
) -> None:
    x, y = xy
    mono = _font(size, bold)
    char_w = mono.getlength("0")
    start = 0
    for i, ch in enumerate(piece):
        face = _face_for(ch)
        if face == -1 or face is None:
            continue
        if i > start:
            draw.text((x + start * char_w, y), piece[start:i], font=mono, fill=colour)
        wide = _fallback_font(face, size).getlength(ch) or 1.0
        scaled = max(1, min(size, int(size * char_w / wide)))
        draw.text(
            (x + i * char_w, y + (size - scaled) / 2),
            ch,
            font=_fallback_font(face, scaled),
            fill=colour,
        )
        start = i + 1
    if start < len(piece):
        draw.text((x + start * char_w, y), piece[start:], font=mono, fill=colour)


Run = tuple[str, _TokenType]


def _tokenise(lines: list[str], lexer: Lexer) -> list[list[Run]]:
    out: list[list[Run]] = [[]]
    for ttype, value in lexer.get_tokens("\n".join(lines)):
        parts = value.split("\n")
        for i, part in enumerate(parts):
            if i:
                out.append([])
            if part:
                out[-1].append((part, ttype))
    out.extend([] for _ in range(len(lines) - len(out)))
    return out[: len(lines)]


def _wrap(runs: list[Run], cols: int) -> list[list[Run]]:
    rows: list[list[Run]] = [[]]
    used = 0
    for text, ttype in runs:
        while text:
            room = cols - used
            if room == 0:
                rows.append([])
                used, room = 0, cols
            piece, text = text[:room], text[room:]
            rows[-1].append((piece, ttype))
            used += len(piece)
    return rows


def _layout(
    page: list[str], first: int, lexer: Lexer
) -> tuple[list[tuple[int | None, list[Run]]], int, bool]:
    """Rows (line number or None for a continuation, runs), columns, whether clipped."""
    budget = limits.TEXT_MAX_PAGE_LINES
    cols = max(1, min(limits.TEXT_WRAP_COLUMNS, max(len(line) for line in page)))
    # No line can show more than a full page of rows: cut before lexing a huge line.
    page = [line[: budget * cols] for line in page]
    rows: list[tuple[int | None, list[Run]]] = []
    clipped = False
    for i, runs in enumerate(_tokenise(page, lexer)):
        wrapped = _wrap(runs, cols)
        if rows and len(rows) + len(wrapped) > budget:
            break
        if len(wrapped) > budget:
            wrapped = wrapped[:budget]
            wrapped[-1] = [*wrapped[-1][:-1], (_CLIPPED, Token.Text)]
            clipped = True
        for j, row in enumerate(wrapped):
            rows.append((first + i + 1 if j == 0 else None, row))
    return rows, cols, clipped


def render_text(
    text: str,
    *,
    offset: int | None,
    limit: int | None,
    name: str | None,
    max_edge: int,
    max_pixels: int,
) -> TextPage:
    """Render one page of ``text``; the font size is the largest that fits the bounds.

    Example:
        >>> page = render_text("x = 1\\n", offset=None, limit=None, name="a.py",
        ...                    max_edge=1568, max_pixels=1_150_000)
        >>> (page.line_start, page.line_end, page.line_total)
        (1, 1, 1)
    """
    lines = split_lines(text)
    total = len(lines)
    first = 0 if offset is None else offset
    if not 0 <= first < total:
        raise InvalidInputError(f"offset {first} is outside the text (lines 0-{total - 1})")
    count = limits.TEXT_PAGE_LINES if limit is None else limit
    if count < 1:
        raise InvalidInputError(f"limit must be at least 1, not {count}")
    count = min(count, limits.TEXT_MAX_PAGE_LINES)
    page = [_visible(line) for line in lines[first : first + count]]
    sample = "\n".join(lines[: min(total, first + count)])[:_GUESS_SAMPLE_CHARS]
    rows, cols, clipped = _layout(page, first, _lexer(name, sample))
    last = max(n for n, _ in rows if n is not None)
    label = f"lines {first + 1}-{last} of {total}"
    if clipped:
        label += f" (line {last} clipped)"
    header = label
    if name:
        # The file's own name, clipped so a long path cannot widen (and shrink) the page.
        shown = _visible(name.replace("\\", "/").rsplit("/", 1)[-1])
        room = max(8, limits.TEXT_WRAP_COLUMNS - len(label) - 3)
        shown = shown if len(shown) <= room else shown[: room - 1] + _CLIPPED
        header = f"{shown} · {label}"
    image = _draw(header, rows, cols, len(str(last)), max_edge, max_pixels)
    return TextPage(image, first + 1, last, total)


@dataclass(frozen=True, slots=True)
class _Grid:
    """Where glyphs go: font size, column count and the pixel geometry they imply."""

    size: int
    columns: int
    rows_per_column: int
    char_w: float
    line_h: int
    pad: int
    width: int
    height: int

    @classmethod
    def of(cls, size: int, columns: int, rows: int, block: int, header: int) -> _Grid:
        char_w = _font(size, False).getlength("0")
        line_h = math.ceil(size * _LINE_SPACING)
        pad = max(4, size // 2)
        per_column = math.ceil(rows / columns)
        chars = max(header, columns * block + (columns - 1) * _COLUMN_GAP)
        width = math.ceil(2 * pad + chars * char_w)
        height = pad + line_h + pad + per_column * line_h + pad
        return cls(size, columns, per_column, char_w, line_h, pad, width, height)

    def shown_size(self, max_edge: int, max_pixels: int) -> float:
        """The glyph size after fitting shrinks the render into the bounds."""
        w, _ = target_size(self.width, self.height, max_edge, max_pixels)
        return self.size * w / self.width


def _choose_grid(rows: int, block: int, header: int, max_edge: int, max_pixels: int) -> _Grid:
    """The font size and column count whose glyphs end up largest after fitting.

    A tall page of short lines fills a wide target better in side-by-side columns;
    ties go to fewer columns (one column reads most naturally).
    """
    best: _Grid | None = None
    best_shown = -1.0
    for columns in range(1, min(_MAX_COLUMNS, rows) + 1):
        for size in range(_FONT_MAX, _FONT_MIN - 1, -1):
            grid = _Grid.of(size, columns, rows, block, header)
            shown = grid.shown_size(max_edge, max_pixels)
            if shown > best_shown + 0.25:
                best, best_shown = grid, shown
            if shown == size:
                break  # the largest size that fits unshrunk for this column count
    assert best is not None
    return best


def _draw(
    header: str,
    rows: list[tuple[int | None, list[Run]]],
    cols: int,
    digits: int,
    max_edge: int,
    max_pixels: int,
) -> Image.Image:
    gutter = digits + 2
    block = gutter + cols
    g = _choose_grid(len(rows), block, len(header), max_edge, max_pixels)
    im = Image.new("RGB", (g.width, g.height), _BACKGROUND)
    draw = ImageDraw.Draw(im)
    draw.rectangle((0, 0, g.width, g.pad + g.line_h), fill=_HEADER_BACKGROUND)
    draw.text((g.pad, g.pad // 2 + 1), header, font=_font(g.size, True), fill=_INK)
    top = g.pad + g.line_h + g.pad
    regular = _font(g.size, False)
    for c in range(g.columns):
        left = g.pad + c * (block + _COLUMN_GAP) * g.char_w
        rule_x = left + (digits + 1) * g.char_w - g.char_w / 2
        draw.line((rule_x, top - g.pad // 2, rule_x, g.height), fill=_RULE)
        if c:
            sep_x = left - _COLUMN_GAP * g.char_w / 2
            draw.line((sep_x, top - g.pad // 2, sep_x, g.height), fill=_SEPARATOR)
        for r, (number, runs) in enumerate(
            rows[c * g.rows_per_column : (c + 1) * g.rows_per_column]
        ):
            y = top + r * g.line_h
            if number is not None:
                draw.text((left, y), str(number).rjust(digits), font=regular, fill=_GUTTER)
            # One draw call per style and row, not per token: on the monospace grid a
            # style's runs, padded with spaces between them, land on the same pixels,
            # and a page of 48k tiny tokens draws in 1/20 of the time.
            x = left + gutter * g.char_w
            for (colour, bold), line in _by_style(runs).items():
                _draw_piece(draw, (x, y), line, g.size, bold, colour)
    return im


def _by_style(runs: list[Run]) -> dict[tuple[tuple[int, int, int], bool], str]:
    """A row's runs merged per style: each style's text at its columns, spaces elsewhere."""
    parts: dict[tuple[tuple[int, int, int], bool], list[str]] = {}
    filled: dict[tuple[tuple[int, int, int], bool], int] = {}
    col = 0
    for piece, ttype in runs:
        if not piece.isspace():
            style = _colour(ttype)
            gap = col - filled.get(style, 0)
            parts.setdefault(style, []).append(" " * gap + piece if gap else piece)
            filled[style] = col + len(piece)
        col += len(piece)
    return {style: "".join(p) for style, p in parts.items()}
