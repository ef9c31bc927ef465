from __future__ import annotations

import io

import pytest
from media_corpus import (
    CLAUDE,
    decoded,
    encode,
    near,
    photo,
    pixel,
    png_header_only,
    screenshot,
)
from PIL import Image, ImageChops, ImageFile

from visus.errors import TooLargeError, UndecodableError
from visus.media import Profile, fit, load, probe
from visus.media import _vips as vips_mod
from visus.media import raster as raster_mod

SMALL = Profile(max_edge=256, max_pixels=256 * 256, max_bytes=2 * 1024 * 1024)


def _fmt_bytes(fmt: str) -> bytes:
    im = photo(320, 200)
    if fmt in ("GIF", "BMP", "TIFF", "PNG", "WEBP", "AVIF", "JPEG", "TGA", "PPM", "ICO"):
        return encode(im, fmt)
    raise AssertionError(fmt)


@pytest.mark.parametrize(
    "fmt", ["PNG", "JPEG", "GIF", "WEBP", "BMP", "TIFF", "AVIF", "TGA", "PPM", "ICO"]
)
def test_every_pillow_format_loads_and_fits(fmt: str) -> None:
    data = _fmt_bytes(fmt)
    f = load(data, profile=SMALL)
    assert f.source_kind == "raster"
    header = probe(data)
    assert (f.source_width, f.source_height) == (header.width, header.height)
    # ICO keeps only icon sizes up to 256, so Pillow stores a smaller entry.
    assert (header.width, header.height) == ((128, 80) if fmt == "ICO" else (320, 200))
    assert max(f.width, f.height) <= 256
    assert f.width * f.height <= 256 * 256
    out = decoded(f.data)
    assert out.size == (f.width, f.height)
    assert out.mode in ("RGB", "RGBA")
    assert f.frame_count == 1


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP"])
def test_exif_orientation_is_applied(fmt: str) -> None:
    # Red left half, blue right half, stored with orientation 6 (rotate 90 CW to view).
    im = Image.new("RGB", (200, 100), (255, 0, 0))
    im.paste((0, 0, 255), (100, 0, 200, 100))
    exif = Image.Exif()
    exif[0x0112] = 6
    data = encode(im, fmt, exif=exif, quality=95)
    f = load(data, profile=CLAUDE)
    assert (f.source_width, f.source_height) == (100, 200)
    out = decoded(f.data).convert("RGB")
    assert out.size == (100, 200)
    # Rotating 90 degrees clockwise puts the stored left (red) half on top.
    assert near(pixel(out, (50, 20)), (255, 0, 0))
    assert near(pixel(out, (50, 180)), (0, 0, 255))
    assert probe(data).width == 100


def test_cmyk_jpeg_becomes_rgb_with_right_colour() -> None:
    cmyk = Image.new("CMYK", (300, 200), (0, 255, 255, 0))  # pure red in CMYK
    data = encode(cmyk, "JPEG", quality=95)
    assert decoded(data).mode == "CMYK"
    f = load(data, profile=CLAUDE)
    out = decoded(f.data).convert("RGB")
    assert near(pixel(out, (150, 100)), (255, 0, 0))


def test_16bit_grey_png_is_scaled_not_clipped() -> None:
    im = Image.new("I;16", (64, 64), 0)
    im.paste(Image.new("I;16", (32, 64), 32768), (32, 0))
    data = encode(im, "PNG")
    assert decoded(data).mode.startswith("I")
    assert decoded(data).getpixel((50, 10)) == 32768
    f = load(data, profile=CLAUDE)
    out = decoded(f.data).convert("RGB")
    assert out.getpixel((10, 10)) == (0, 0, 0)
    mid = out.getpixel((50, 10))
    assert isinstance(mid, tuple)
    assert 120 <= mid[0] <= 135  # 32768/65535 of white, not clipped to 255


def test_palette_png_with_transparency_keeps_alpha() -> None:
    im = Image.new("P", (80, 80), 0)
    im.putpalette([255, 0, 0, 0, 255, 0] + [0] * 762)
    im.paste(1, (40, 0, 80, 80))
    data = encode(im, "PNG", transparency=0)
    f = load(data, profile=CLAUDE)
    assert f.media_type == "image/png"
    out = decoded(f.data)
    assert out.mode == "RGBA"
    assert out.getpixel((10, 10))[3] == 0  # type: ignore[index]
    assert out.getpixel((60, 10)) == (0, 255, 0, 255)


@pytest.mark.parametrize("mode", ["LA", "1", "L", "P"])
def test_other_modes_normalise_to_rgb_or_rgba(mode: str) -> None:
    im = Image.new(mode, (40, 30))
    f = load(encode(im, "PNG"), profile=CLAUDE)
    assert decoded(f.data).mode == ("RGBA" if mode == "LA" else "RGB")


@pytest.mark.parametrize("fmt", ["GIF", "WEBP", "PNG"])
def test_animation_gives_first_frame_and_frame_count(fmt: str) -> None:
    frames = [Image.new("RGB", (60, 40), c) for c in ((255, 0, 0), (0, 255, 0), (0, 0, 255))]
    data = encode(frames[0], fmt, save_all=True, append_images=frames[1:], duration=100, loop=0)
    f = load(data, profile=CLAUDE)
    assert f.frame_count == 3
    out = decoded(f.data).convert("RGB")
    assert near(pixel(out, (30, 20)), (255, 0, 0))
    assert probe(data).frame_count == 3
    # Animated sources are never handed on as-is, even when small enough.
    assert getattr(decoded(f.data), "n_frames", 1) == 1


def _refuse_decoding(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []

    def no_load(self: ImageFile.ImageFile) -> None:
        calls.append("load")
        raise AssertionError("a bomb was decoded")

    def no_vips(*args: object, **kwargs: object) -> None:
        calls.append("vips")
        raise AssertionError("a bomb was handed to libvips")

    monkeypatch.setattr(ImageFile.ImageFile, "load", no_load)
    monkeypatch.setattr(vips_mod, "shrink", no_vips)
    return calls


@pytest.mark.parametrize(
    ("w", "h"), [(40_000, 40_000), (12_000, 12_000), (30_001, 10), (10, 31_000)]
)
def test_bomb_header_is_refused_before_decoding(
    monkeypatch: pytest.MonkeyPatch, w: int, h: int
) -> None:
    data = png_header_only(w, h)
    assert len(data) < 200
    calls = _refuse_decoding(monkeypatch)
    with pytest.raises(TooLargeError):
        load(data, profile=CLAUDE)
    with pytest.raises(TooLargeError):
        probe(data)
    with pytest.raises(TooLargeError):
        fit(data, CLAUDE)
    assert calls == []


def _jpeg_loads(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, object]]:
    """The options of every libvips JPEG load from now on."""
    pyvips = vips_mod.engine()
    seen: list[dict[str, object]] = []
    real = pyvips.Image.jpegload_buffer

    def spy(buf: bytes, **kwargs: object) -> object:
        seen.append(kwargs)
        return real(buf, **kwargs)

    monkeypatch.setattr(pyvips.Image, "jpegload_buffer", spy)
    return seen


def test_big_jpeg_is_decoded_reduced_by_dct_scaling(monkeypatch: pytest.MonkeyPatch) -> None:
    data = encode(photo(4000, 3000), "JPEG", quality=90)
    seen = _jpeg_loads(monkeypatch)
    f = load(data, profile=CLAUDE)
    # 4000x3000 fitted to 1.15 MP is 1238x928: libjpeg decoded at 1/2 (2000x1500, the
    # smallest DCT scale still covering it) by libvips, streamed, never full size.
    assert [(k["shrink"], k["access"], k["fail_on"]) for k in seen] == [
        (2, "sequential", "truncated")
    ]
    assert (f.width, f.height) == (1238, 928)
    assert (f.source_width, f.source_height) == (4000, 3000)
    assert f.media_type == "image/jpeg"


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "WEBP"])
def test_small_fitting_image_passes_through_unchanged(fmt: str) -> None:
    data = encode(screenshot(300, 200), fmt)
    f = load(data, profile=CLAUDE)
    assert f.data == data
    # Grey JPEGs, GIFs and formats the profile does not take are re-encoded.
    grey = encode(screenshot(300, 200).convert("L"), "JPEG")
    assert load(grey, profile=CLAUDE).data != grey
    gif = encode(screenshot(300, 200), "GIF")
    assert load(gif, profile=CLAUDE).data != gif
    no_webp = Profile(1568, 1_150_000, 5_000_000, frozenset({"image/png", "image/jpeg"}))
    assert fit(data, no_webp).data != data or fmt != "WEBP"
    # A 16-bit PNG that also "fits" is re-encoded to 8 bits, not handed on.
    deep = encode(Image.new("I;16", (30, 20), 4000), "PNG")
    assert load(deep, profile=CLAUDE).data != deep


def test_jpeg_with_exif_rotation_is_not_passed_through() -> None:
    exif = Image.Exif()
    exif[0x0112] = 3
    data = encode(photo(100, 60), "JPEG", exif=exif)
    f = load(data, profile=CLAUDE)
    assert f.data != data
    assert decoded(f.data).getexif().get(0x0112) is None


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "GIF", "WEBP", "BMP", "TIFF"])
def test_truncated_raster_is_undecodable(fmt: str) -> None:
    data = encode(photo(300, 300), fmt)
    with pytest.raises(UndecodableError):
        load(data[: len(data) // 2], profile=CLAUDE)


def test_corrupt_png_crc_is_undecodable() -> None:
    data = bytearray(encode(photo(50, 50), "PNG"))
    data[len(data) // 2] ^= 0xFF  # inside IDAT's compressed pixels: the CRC no longer matches
    with pytest.raises(UndecodableError):
        load(bytes(data), profile=CLAUDE)


def test_fit_refits_an_encoded_raster() -> None:
    big = load(encode(photo(2000, 1000), "PNG"), profile=CLAUDE)
    small = fit(big.data, SMALL)
    assert (small.width, small.height) == (256, 128)
    assert (small.source_width, small.source_height) == (big.width, big.height)


@pytest.mark.parametrize(("fmt", "media_type"), [("JPEG", "image/jpeg"), ("PNG", "image/png")])
def test_probe_reads_header_only(
    monkeypatch: pytest.MonkeyPatch, fmt: str, media_type: str
) -> None:
    data = encode(photo(640, 480), fmt)
    calls = _refuse_decoding(monkeypatch)
    p = probe(data)
    assert (p.kind, p.media_type, p.width, p.height) == ("raster", media_type, 640, 480)
    assert calls == []


def test_output_is_deterministic() -> None:
    data = encode(photo(3000, 2000), "PNG")
    assert load(data, profile=CLAUDE).data == load(data, profile=CLAUDE).data


def test_decoded_jpeg_stays_small_in_memory() -> None:
    # The reduced decode keeps the largest buffer at a quarter of the full frame.
    data = encode(photo(2400, 1800), "JPEG")
    im = Image.open(io.BytesIO(data))
    header = raster_mod.read_header(im)
    out = raster_mod.decode(header, SMALL)
    assert out.size == (300, 225)  # 1/8 scale: 2400/8 >= 256


def _mean_diff(a: Image.Image, b: Image.Image) -> float:
    diff = ImageChops.difference(a.convert("RGB"), b.convert("RGB")).convert("L")
    return sum(i * n for i, n in enumerate(diff.histogram())) / (a.width * a.height)


def test_mpo_phone_photo_is_decoded_reduced_too(monkeypatch: pytest.MonkeyPatch) -> None:
    frames = [photo(2000, 1500), photo(2000, 1500, seed=2)]
    data = encode(frames[0], "MPO", save_all=True, append_images=frames[1:])
    assert decoded(data).format == "MPO"
    seen = _jpeg_loads(monkeypatch)
    f = load(data, profile=SMALL)
    assert [k["shrink"] for k in seen] == [4]  # 1/4 DCT scale (500x375), not 2000x1500
    assert (f.width, f.height, f.frame_count) == (256, 192, 2)
    # The first (primary) image is the one shown.
    out = decoded(f.data).convert("RGB")
    assert _mean_diff(out, frames[0].resize(out.size)) < _mean_diff(out, frames[1].resize(out.size))


def test_avif_decodes_with_pillow_alone() -> None:
    # Pillow 13 carries libavif; no plugin package is installed or imported for it.
    import sys

    from PIL import features

    assert features.check("avif")
    buf = io.BytesIO()
    Image.new("RGB", (64, 48), (200, 30, 30)).save(buf, "AVIF")
    f = load(buf.getvalue(), profile=CLAUDE)
    assert (f.source_width, f.source_height) == (64, 48)
    assert near(decoded(f.data).convert("RGB").getpixel((32, 24)), (200, 30, 30), 12)
    assert "pillow_avif" not in sys.modules
