"""Perception of one image: words, positions, ink colours; and the grid generator."""

from __future__ import annotations

import io

import pytest
from PIL import Image, ImageDraw, ImageFont

from visus.errors import UndecodableError
from visus.reference.grid import GRID_COLOURS, _font_path, make_grid, score_grid
from visus.reference.palette import PALETTE, hex_of, nearest_colour, to_hex
from visus.reference.vision import decode_size, perceive

from .conftest import Grid


def _png(image: Image.Image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def test_every_palette_entry_names_itself() -> None:
    for name, rgb in PALETTE.items():
        assert nearest_colour(rgb) == name
    assert hex_of("white") == "#ffffff"
    assert to_hex((300, -4, 15.6)) == "#ff0010"


def test_cielab_separates_what_rgb_distance_confuses() -> None:
    # A dark desaturated teal is nearer "green" in RGB terms for some weightings; in
    # CIELAB it is teal. A dark orange-brown must not read as red.
    assert nearest_colour((25, 115, 110)) == "teal"
    assert nearest_colour((120, 70, 30)) == "brown"
    assert nearest_colour((110, 110, 115)) == "grey"


def test_grid_is_reproducible_by_seed_and_varies_between_seeds() -> None:
    png_a, exp_a = make_grid(2, 2, seed=11)
    png_b, exp_b = make_grid(2, 2, seed=11)
    _, exp_c = make_grid(2, 2, seed=12)
    assert png_a == png_b
    assert exp_a == exp_b
    assert [w for w, *_ in exp_a] != [w for w, *_ in exp_c]
    assert [(r, c) for _, r, c, _ in exp_a] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all(colour in GRID_COLOURS for *_, colour in exp_a)
    assert len({w for w, *_ in exp_a}) == 4
    with pytest.raises(ValueError, match="at least one"):
        make_grid(0, 2, seed=1)


def test_score_grid_counts_only_words_in_their_own_cell() -> None:
    expected = [("bados", 0, 0, "red"), ("kufam", 0, 1, "blue")]
    right = [
        {"text": "bados", "x": 0.2, "y": 0.5, "color": "red"},
        {"text": "KUFAM", "x": 0.8, "y": 0.5, "color": "green"},
    ]
    assert score_grid(expected, right, 1, 2) == (2, 1)
    swapped = [
        {"text": "bados", "x": 0.8, "y": 0.5, "color": "red"},
        {"text": "kufam", "x": 0.2, "y": 0.5, "color": "blue"},
    ]
    assert score_grid(expected, swapped, 1, 2) == (0, 0)


def test_perceives_every_word_of_a_3x3_grid_in_place_and_colour(grid3: Grid) -> None:
    seen = perceive(grid3.png)
    assert (seen.width, seen.height) == decode_size(grid3.png)[:2]
    words = [{"text": w.text, "x": w.x, "y": w.y, "color": w.color} for w in seen.words]
    assert score_grid(grid3.expected, words, 3, 3) == (9, 9), (grid3.seed, grid3.expected, words)
    for w in seen.words:
        assert 0 <= w.box[0] < w.box[2] <= seen.width
        assert w.hex.startswith("#")
        assert len(w.hex) == 7


def test_colour_is_the_ink_not_the_background() -> None:
    image = Image.new("RGB", (520, 140), (30, 60, 200))
    font = ImageFont.truetype(_font_path(), 44)
    draw = ImageDraw.Draw(image)
    draw.text((30, 40), "hobdam", font=font, fill=(250, 250, 250))
    draw.text((280, 40), "pundak", font=font, fill=(245, 135, 25))
    seen = perceive(_png(image))
    by_text = {w.text: w for w in seen.words}
    assert by_text["hobdam"].color == "white"
    assert by_text["pundak"].color == "orange"
    # Two words on one OCR line are split and each gets its own half of the box.
    assert by_text["hobdam"].x < 0.5 < by_text["pundak"].x


def test_blank_image_has_no_words_and_garbage_is_undecodable() -> None:
    assert perceive(_png(Image.new("RGB", (64, 32), "white"))).words == ()
    with pytest.raises(UndecodableError):
        perceive(b"definitely not an image")
    with pytest.raises(UndecodableError):
        decode_size(make_grid(1, 1, seed=2)[0][:200])  # truncated PNG


@pytest.mark.parametrize("size", [(2100, 10), (10, 3000), (1, 2)])
def test_thin_and_tiny_images_are_perceived_without_crashing(size: tuple[int, int]) -> None:
    image = Image.new("RGB", size, "white")
    image.putpixel((0, 0), (0, 0, 0))  # not one flat colour, so OCR really runs
    seen = perceive(_png(image))
    assert (seen.width, seen.height, seen.words) == (*size, ())


def test_a_large_image_is_read_at_its_own_coordinates() -> None:
    png, expected = make_grid(2, 2, seed=5)
    big = Image.open(io.BytesIO(png)).resize((2400, 1040))  # past OCR's 2000 px working size
    seen = perceive(_png(big))
    assert (seen.width, seen.height) == (2400, 1040)
    words = [{"text": w.text, "x": w.x, "y": w.y, "color": w.color} for w in seen.words]
    assert score_grid(expected, words, 2, 2)[0] == 4
    assert all(w.box[2] > 1000 for w in seen.words if w.x > 0.5)
