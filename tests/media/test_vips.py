"""The libvips engine (media/_vips.py): what it decodes, what it refuses, and how."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from media_corpus import CLAUDE, encode, photo, png_header_only, screenshot
from PIL import Image, ImageChops, ImageOps

from tests.timing import within
from visus.errors import TooLargeError, UndecodableError, UnsupportedTypeError
from visus.media import Profile, fit, load, probe
from visus.media import _vips as vips_mod
from visus.media import raster as raster_mod

SMALL = Profile(max_edge=256, max_pixels=256 * 256, max_bytes=1_000_000)


def _shrinks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The format of every source libvips shrinks from now on."""
    seen: list[str] = []
    real = vips_mod.shrink

    def spy(data: bytes, fmt: str, *args: object, **kwargs: object) -> Image.Image:
        seen.append(fmt)
        return real(data, fmt, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(vips_mod, "shrink", spy)
    return seen


def _px(im: Image.Image, xy: tuple[int, int]) -> tuple[int, ...]:
    value = im.getpixel(xy)
    assert isinstance(value, tuple)
    return tuple(int(v) for v in value)


def _max_diff(a: Image.Image, b: Image.Image) -> int:
    return max(hi for _, hi in ImageChops.difference(a, b).getextrema())


def test_large_png_and_jpeg_are_shrunk_by_libvips(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _shrinks(monkeypatch)
    png = load(encode(screenshot(3000, 2000), "PNG"), profile=CLAUDE)
    jpeg = load(encode(photo(3000, 2000), "JPEG"), profile=CLAUDE)
    assert seen == ["PNG", "JPEG"]
    # Screenshots stay PNG (lossless, unsoftened); photos JPEG; both at the fitted size.
    assert (png.media_type, png.width, png.height) == ("image/png", 1313, 875)
    assert (jpeg.media_type, jpeg.width, jpeg.height) == ("image/jpeg", 1313, 875)


def test_screenshot_stays_crisp_and_matches_pillow_lanczos() -> None:
    src = screenshot(2400, 1600)
    f = load(encode(src, "PNG"), profile=SMALL)
    out = Image.open(io.BytesIO(f.data))
    assert out.format == "PNG"
    ref = src.resize(out.size, Image.Resampling.LANCZOS)
    # Same kernel as Pillow's Lanczos: flat areas exact, edges within rounding.
    assert out.convert("RGB").getpixel((5, 100)) == (250, 250, 250)
    assert _max_diff(out.convert("RGB"), ref) <= 48
    hist = ImageChops.difference(out.convert("RGB"), ref).convert("L").histogram()
    assert sum(hist[:4]) / sum(hist) > 0.9


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation_is_applied_when_shrinking(fmt: str, orientation: int) -> None:
    # Four coloured quadrants, so every one of the eight orientations looks different.
    im = Image.new("RGB", (800, 400), (255, 0, 0))
    im.paste((0, 0, 255), (400, 0, 800, 200))
    im.paste((0, 255, 0), (0, 200, 400, 400))
    im.paste((255, 255, 0), (400, 200, 800, 400))
    exif = Image.Exif()
    exif[0x0112] = orientation
    data = encode(im, fmt, exif=exif, quality=95)
    f = load(data, profile=SMALL)
    expected = ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB")
    out = Image.open(io.BytesIO(f.data)).convert("RGB")
    assert (f.width, f.height) == ((256, 128) if orientation < 5 else (128, 256))
    ref = expected.resize(out.size, Image.Resampling.LANCZOS)
    for x, y in ((20, 20), (out.width - 20, 20), (20, out.height - 20)):
        got, want = _px(out, (x, y)), _px(ref, (x, y))
        assert all(abs(a - b) < 40 for a, b in zip(got, want, strict=True)), (got, want)


def test_transparency_survives_the_shrink() -> None:
    rgba = Image.new("RGBA", (1200, 600), (0, 0, 0, 0))
    rgba.paste((200, 30, 30, 255), (0, 0, 600, 600))
    pal = rgba.convert("RGB").quantize(8)
    pal.info["transparency"] = pal.getpixel((900, 300))
    for data in (encode(rgba, "PNG"), encode(pal, "PNG", transparency=pal.info["transparency"])):
        out = Image.open(io.BytesIO(load(data, profile=SMALL).data))
        assert out.mode == "RGBA"
        assert out.getpixel((200, 60))[3] == 0
        assert out.getpixel((40, 60)) == (200, 30, 30, 255)


def test_sixteen_bit_and_cmyk_stay_with_pillow(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _shrinks(monkeypatch)
    grey16 = Image.linear_gradient("L").resize((1200, 600)).convert("I;16")
    cmyk = Image.new("CMYK", (1200, 600), (0, 255, 255, 0))
    for data in (encode(grey16, "PNG"), encode(cmyk, "JPEG")):
        f = load(data, profile=SMALL)
        assert (f.width, f.height) == (256, 128)
    assert seen == []


def test_bomb_header_never_reaches_libvips(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _shrinks(monkeypatch)
    data = png_header_only(20_000, 20_000)
    for call in (lambda: load(data, profile=CLAUDE), lambda: fit(data, CLAUDE)):
        with pytest.raises(TooLargeError, match="past the decode bound"):
            call()
    with pytest.raises(TooLargeError):
        probe(data)
    assert seen == []


def test_header_inside_bounds_without_pixels_fails_fast() -> None:
    # 9000 x 9000 (81 MP) is inside the bounds, but the stream holds 64 bytes of rows.
    data = png_header_only(9000, 9000)
    t0 = time.monotonic()
    with pytest.raises(UndecodableError, match="could not be decoded"):
        load(data, profile=CLAUDE)
    assert time.monotonic() - t0 < within(10)


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_truncated_source_is_undecodable(fmt: str) -> None:
    data = encode(photo(1600, 1200), fmt)
    cut = data[: len(data) * 2 // 3]
    with pytest.raises(UndecodableError, match="could not be decoded"):
        load(cut, profile=CLAUDE)
    with pytest.raises(UndecodableError):
        fit(cut, SMALL)


@pytest.fixture(scope="module")
def vips_native(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A tiny image in libvips's own ``.v`` format (a libvips-only loader)."""
    pyvips = vips_mod.engine()
    path = tmp_path_factory.mktemp("v") / "x.v"
    pyvips.Image.black(8, 8).write_to_file(str(path))
    return path.read_bytes()


def test_libvips_only_formats_are_refused(vips_native: bytes) -> None:
    matrix = b"2 2\n1 0\n0 1\n"
    with pytest.raises(UnsupportedTypeError):
        load(vips_native, profile=CLAUDE)
    for data in (vips_native, matrix, b"1,2,3\n4,5,6\n"):
        with pytest.raises(UnsupportedTypeError):
            fit(data, CLAUDE)
    # Text stays text: a matrix or CSV file is rendered as lines, never decoded as pixels.
    assert load(matrix, profile=CLAUDE).source_kind == "text"


def test_engine_blocks_every_other_loader(vips_native: bytes) -> None:
    pyvips = vips_mod.engine()
    for data in (vips_native, encode(Image.new("RGB", (8, 8)), "TIFF")):
        with pytest.raises(pyvips.Error):
            pyvips.Image.new_from_buffer(data, "").avg()
    source = pyvips.Source.new_from_memory(b"2 2\n1 0\n0 1\n")
    with pytest.raises(pyvips.Error):
        pyvips.Image.matrixload_source(source).avg()
    # The allowed ones still load.
    assert pyvips.Image.new_from_buffer(encode(Image.new("RGB", (8, 8)), "PNG"), "").width == 8
    assert pyvips.cache_get_max() == 0
    assert 1 <= pyvips.concurrency_get() <= 4


def test_png_encoder_is_lossless() -> None:
    im = photo(300, 200).convert("RGBA")
    out = Image.open(io.BytesIO(vips_mod.png(im)))
    assert out.mode == "RGBA"
    assert ImageChops.difference(out, im).getbbox() is None


def test_missing_pyvips_is_a_clear_error(tmp_path: Path) -> None:
    # A process where pyvips cannot be imported (as if the wheel were broken).
    script = (
        "import sys; sys.modules['pyvips'] = None\n"
        "from visus.media import load, Profile\n"
        "from PIL import Image; import io\n"
        "b = io.BytesIO(); Image.new('RGB', (3000, 2000)).save(b, 'PNG')\n"
        "try:\n"
        "    load(b.getvalue(), profile=Profile(1568, 1_150_000, 5_000_000))\n"
        "except ImportError as e:\n"
        "    print('ImportError:', e)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60
    )
    assert "ImportError: visus decodes large PNG and JPEG images with libvips" in out.stdout
    assert "pip install" in out.stdout


def test_raster_module_routes_by_header() -> None:
    im = Image.open(io.BytesIO(encode(photo(100, 100), "GIF")))
    header = raster_mod.read_header(im)
    assert not raster_mod.by_vips(header, (50, 50))


def test_jpeg_header_claiming_more_than_its_data_ends_fast() -> None:
    # SOF says 9000 x 9000 (inside the bounds); the scan holds 64 x 64. libjpeg pads the
    # missing rows (as Pillow does): an answer in well under a second, no hang.
    import struct

    data = bytearray(encode(Image.new("RGB", (64, 64), "red"), "JPEG"))
    sof = data.index(b"\xff\xc0")
    data[sof + 5 : sof + 9] = struct.pack(">HH", 9000, 9000)
    t0 = time.monotonic()
    f = load(bytes(data), profile=CLAUDE)
    assert (f.source_width, f.source_height) == (9000, 9000)
    assert time.monotonic() - t0 < within(10)
