"""view end to end over the bad-input corpus: the right perception or refusal, never a raise."""

from __future__ import annotations

import hashlib
import http.server
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from visus.limits import MAX_SOURCE_BYTES, MAX_TEXT_BYTES
from visus.models import ModelSpec, get_model, image_tokens
from visus.perception import REFUSAL_REASONS, Perception, Reach, Refusal, view

from . import corpus

CLAUDE = get_model("claude-sonnet-4-6")


def perceive(result: Perception | Refusal, spec: ModelSpec = CLAUDE) -> Perception:
    """Assert ``result`` is a perception that fits ``spec`` in every bound and is honest."""
    assert isinstance(result, Perception), result
    assert result.kind == "perception"
    assert result.media_type in spec.media_types
    assert max(result.width, result.height) <= spec.max_edge
    assert result.width * result.height <= spec.max_pixels
    assert result.size == len(result.data) <= spec.max_image_bytes
    img = corpus.decode(result.data)
    assert img.size == (result.width, result.height)
    assert Image_mime(img.format) == result.media_type
    assert result.digest == hashlib.sha256(result.data).hexdigest()
    assert result.tagged_digest == f"sha256:{result.digest}"
    assert result.tokens == image_tokens(spec, result.width, result.height)
    assert result.model == spec.name
    return result


def Image_mime(fmt: str | None) -> str:
    return {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp", "GIF": "image/gif"}[
        fmt or ""
    ]


def refused(result: Perception | Refusal, reason: str) -> Refusal:
    assert isinstance(result, Refusal), result
    assert result.kind == "refusal"
    assert result.reason == reason, result.message
    assert result.message
    return result


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    r.mkdir()
    return r


def put(root: Path, name: str, data: bytes) -> str:
    (root / name).write_bytes(data)
    return name


# --- rasters ----------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", corpus.RASTER_FORMATS)
def test_every_raster_format(root: Path, fmt: str) -> None:
    name = put(root, f"img.{fmt}", corpus.raster(fmt, 96, 64))
    p = perceive(view(name, reach=Reach([root])))
    assert p.source_kind == "raster"
    assert (p.source_width, p.source_height) == (96, 64)
    assert (p.width, p.height) == (96, 64)  # small images are not resized
    assert p.source == name
    assert p.path == (root / name).resolve()


@pytest.fixture(scope="module")
def big_png() -> bytes:
    return corpus.encode(corpus.noise_image(4000, 2000), "png", compress_level=1)


@pytest.mark.parametrize("model", ["claude-sonnet-4-6", "gpt-4o", "gemini-2.5-flash", "llava"])
def test_large_raster_is_fitted_per_model(root: Path, model: str, big_png: bytes) -> None:
    spec = get_model(model)
    name = put(root, "big.png", big_png)
    p = perceive(view(name, reach=Reach([root]), model=model), spec)
    assert (p.source_width, p.source_height) == (4000, 2000)
    assert max(p.width, p.height) < 4000
    # Aspect kept within rounding.
    assert abs(p.width / p.height - 2) < 0.02


def test_model_spec_object_accepted(root: Path) -> None:
    spec = get_model("gpt-4.1-mini")
    name = put(root, "a.png", corpus.raster("png"))
    assert perceive(view(name, reach=Reach([root]), model=spec), spec).model == "gpt-4.1-mini"


def test_exif_rotation_applied(root: Path) -> None:
    name = put(root, "rot.jpg", corpus.exif_rotated_jpeg())
    p = perceive(view(name, reach=Reach([root])))
    assert (p.width, p.height) == (100, 200)
    img = corpus.decode(p.data).convert("RGB")
    top, bottom = img.getpixel((50, 20)), img.getpixel((50, 180))
    assert isinstance(top, tuple)
    assert isinstance(bottom, tuple)
    assert top[0] > 150 > top[2]  # red on top
    assert bottom[2] > 150 > bottom[0]  # blue below


def test_cmyk_jpeg(root: Path) -> None:
    p = perceive(view(put(root, "cmyk.jpg", corpus.cmyk_jpeg()), reach=Reach([root])))
    img = corpus.decode(p.data)
    assert img.mode in {"RGB", "RGBA"}
    px = img.convert("RGB").getpixel((40, 30))
    assert isinstance(px, tuple)
    assert px[0] > 150 > px[1]  # magenta + yellow ink: red, not inverted


def test_16bit_png(root: Path) -> None:
    p = perceive(view(put(root, "deep.png", corpus.png_16bit()), reach=Reach([root])))
    assert (p.width, p.height) == (64, 48)
    assert corpus.decode(p.data).mode in {"RGB", "RGBA"}


def test_palette_png_with_transparency(root: Path) -> None:
    p = perceive(view(put(root, "pal.png", corpus.palette_png_transparent()), reach=Reach([root])))
    assert p.media_type in {"image/png", "image/webp"}  # alpha needs a format that keeps it
    img = corpus.decode(p.data).convert("RGBA")
    opaque, clear = img.getpixel((5, 15)), img.getpixel((35, 15))
    assert isinstance(opaque, tuple)
    assert isinstance(clear, tuple)
    assert clear[3] == 0  # the transparent index stays transparent
    assert opaque[3] == 255
    assert opaque[2] > 200 > opaque[0]  # the opaque half is blue


def test_la_png(root: Path) -> None:
    perceive(view(put(root, "la.png", corpus.la_png()), reach=Reach([root])))


@pytest.mark.parametrize("fmt", ["gif", "webp", "png"])
def test_animations_first_frame_and_count(root: Path, fmt: str) -> None:
    name = put(root, f"anim.{fmt}", corpus.animated(fmt, frames=3))
    p = perceive(view(name, reach=Reach([root])))
    assert p.frame_count == 3
    px = corpus.decode(p.data).convert("RGB").getpixel((24, 16))
    assert isinstance(px, tuple)
    assert px[0] > 150 > px[2]  # the first frame (red)


# --- bad rasters --------------------------------------------------------------------------


def test_png_bomb_refused_without_decoding(root: Path) -> None:
    name = put(root, "bomb.png", corpus.png_bomb(40_000, 40_000))
    started = time.perf_counter()
    r = refused(view(name, reach=Reach([root])), "too_large")
    # Decoding 40000 x 40000 RGB would take 4.8 GB and far longer than this.
    assert time.perf_counter() - started < 2.0
    assert "bomb.png" in r.message


@pytest.mark.parametrize("fmt", corpus.RASTER_FORMATS)
def test_truncated_rasters(root: Path, fmt: str) -> None:
    data = corpus.truncated(corpus.raster(fmt, 160, 120))
    result = view(put(root, f"cut.{fmt}", data), reach=Reach([root]))
    if fmt == "avif":
        # Half an AVIF is not even identified by its decoder (the container's boxes
        # are cut), so no decoder claims it: unsupported, like any unknown binary.
        refused(result, "unsupported_type")
    else:
        r = refused(result, "undecodable")
        # One sentence, said once: not "cut.png could not be decoded: source could not be
        # decoded: ...".
        assert r.message.count("could not be decoded") == 1, r.message
        assert r.message.startswith(f"cut.{fmt} could not be decoded: "), r.message


def test_zero_bytes(root: Path) -> None:
    refused(view(put(root, "empty.png", b""), reach=Reach([root])), "undecodable")


def test_random_binary(root: Path) -> None:
    r = refused(
        view(put(root, "blob.bin", corpus.random_binary()), reach=Reach([root])), "unsupported_type"
    )
    assert "blob.bin" in r.message


def test_type_is_decided_by_content_not_name(root: Path) -> None:
    reach = Reach([root])
    png = perceive(view(put(root, "really.txt", corpus.raster("png")), reach=reach))
    assert png.source_kind == "raster"
    text = perceive(view(put(root, "notes.png", b"just some text\nline two\n"), reach=reach))
    assert text.source_kind == "text"
    assert (text.line_start, text.line_end, text.line_total) == (1, 2, 2)


# --- svg ----------------------------------------------------------------------------------


def test_svg_rendered(root: Path) -> None:
    p = perceive(view(put(root, "d.svg", corpus.svg()), reach=Reach([root])))
    assert p.source_kind == "svg"
    px = corpus.decode(p.data).convert("RGB").getpixel((p.width // 2, p.height // 2))
    assert isinstance(px, tuple)
    assert abs(px[0] - 0x1F) < 40
    assert abs(px[1] - 0x8A) < 40  # the teal rect


def _no_red(p: Perception) -> bool:
    img = corpus.decode(p.data).convert("RGB")
    colors = img.getcolors(maxcolors=1 << 20) or []
    return not any(r > 180 and g < 80 and b < 80 for _, (r, g, b) in colors)


def test_svg_local_file_references_not_followed(root: Path, tmp_path: Path) -> None:
    red = tmp_path / "red.png"
    red.write_bytes(corpus.encode(corpus.halves(corpus.RED, corpus.RED, (120, 80)), "png"))
    reach = Reach([root])
    for i, href in enumerate([red.as_uri(), str(red), "../red.png"]):
        result = view(put(root, f"ref{i}.svg", corpus.svg_with_href(href)), reach=reach)
        if isinstance(result, Perception):
            assert _no_red(result), f"{href} was loaded into the render"
        else:
            assert result.reason in {"unsupported_type", "invalid_input", "undecodable"}


class _Counter(http.server.BaseHTTPRequestHandler):
    hits = 0

    def do_GET(self) -> None:
        type(self).hits += 1
        body = corpus.encode(corpus.halves(corpus.RED, corpus.RED, (120, 80)), "png")
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def counting_server() -> Iterator[tuple[str, type[_Counter]]]:
    handler = type("Handler", (_Counter,), {"hits": 0})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/red.png", handler
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_svg_http_reference_not_fetched(
    root: Path, counting_server: tuple[str, type[_Counter]]
) -> None:
    url, handler = counting_server
    result = view(put(root, "net.svg", corpus.svg_with_href(url)), reach=Reach([root]))
    time.sleep(0.1)
    assert handler.hits == 0
    if isinstance(result, Perception):
        assert _no_red(result)


def test_svg_entity_expansion_is_harmless(root: Path) -> None:
    started = time.perf_counter()
    result = view(put(root, "lol.svg", corpus.svg_billion_laughs()), reach=Reach([root]))
    assert time.perf_counter() - started < 5.0
    if isinstance(result, Refusal):
        assert result.reason in {"unsupported_type", "invalid_input", "undecodable", "too_large"}
    else:
        perceive(result)


def test_svg_external_entity_not_resolved(root: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET")
    result = view(
        put(root, "xxe.svg", corpus.svg_external_entity(str(secret))), reach=Reach([root])
    )
    assert isinstance(result, (Perception, Refusal))
    if isinstance(result, Perception):
        perceive(result)


# --- text and pdf -------------------------------------------------------------------------


def test_text_rendered_with_line_window(root: Path) -> None:
    name = put(root, "code.py", corpus.source_code(300))
    reach = Reach([root])
    first = perceive(view(name, reach=reach))
    assert first.source_kind == "text"
    assert first.line_start == 1
    assert first.line_total == 300
    assert first.line_end is not None
    assert first.line_end < 300
    window = perceive(view(name, reach=reach, offset=120, limit=50))
    assert (window.line_start, window.line_end, window.line_total) == (121, 170, 300)
    assert window.digest != first.digest


@pytest.fixture(scope="module")
def pdf_2000() -> bytes:
    return corpus.pdf(pages=2000)


def test_pdf_2000_pages(root: Path, pdf_2000: bytes) -> None:
    name = put(root, "long.pdf", pdf_2000)
    reach = Reach([root])
    p = perceive(view(name, reach=reach))
    assert p.source_kind == "pdf"
    assert (p.page, p.page_count) == (1, 2000)
    last = perceive(view(name, reach=reach, page=2000))
    assert (last.page, last.page_count) == (2000, 2000)
    r = refused(view(name, reach=reach, page=2001), "invalid_input")
    assert "2001" in r.message
    refused(view(name, reach=reach, page=0), "invalid_input")


def test_pdf_bytes_are_checked_like_files(pdf_2000: bytes) -> None:
    p = perceive(view(pdf_2000, reach=Reach([]), name="long.pdf"))
    assert p.page_count == 2000
    assert p.source == "long.pdf"
    assert p.path is None


# --- reach, render capability, model ------------------------------------------------------


def test_reach_refusals(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.png"
    outside.write_bytes(corpus.raster("png"))
    (root / "link.png").symlink_to(outside)
    (root / "sub").mkdir()
    reach = Reach([root])
    refused(view("link.png", reach=reach), "outside_reach")
    refused(view("../outside.png", reach=reach), "outside_reach")
    refused(view(str(outside), reach=reach), "outside_reach")
    refused(view("missing.png", reach=reach), "not_found")
    refused(view("sub", reach=reach), "invalid_input")
    refused(view("https://example.com/a.png", reach=reach), "invalid_input")
    os.mkfifo(root / "fifo")
    refused(view("fifo", reach=reach), "unsupported_type")


def test_render_withheld(root: Path, pdf_2000: bytes) -> None:
    reach = Reach([root], render=False)
    for name, data in [
        ("d.svg", corpus.svg()),
        ("code.py", corpus.source_code(10)),
        ("doc.pdf", pdf_2000),
    ]:
        r = refused(view(put(root, name, data), reach=reach), "unsupported_type")
        assert "render" in r.message.lower()
    text = refused(view("code.py", reach=reach), "unsupported_type")
    assert "read('code.py')" in text.message
    perceive(view(put(root, "ok.png", corpus.raster("png")), reach=reach))
    perceive(view(put(root, "ok.jpg", corpus.raster("jpeg")), reach=reach))


def test_model_without_vision(root: Path) -> None:
    name = put(root, "a.png", corpus.raster("png"))
    for model in ["openai-compatible:text-only-model", ModelSpec(name="blind", provider="openai")]:
        r = refused(view(name, reach=Reach([root]), model=model), "unsupported_type")
        assert "cannot see images" in r.message


def test_oversized_file_refused_before_reading(root: Path) -> None:
    with (root / "huge.png").open("wb") as f:
        f.truncate(MAX_SOURCE_BYTES + 1)  # sparse: costs no disk
    r = refused(view("huge.png", reach=Reach([root])), "too_large")
    assert str(MAX_SOURCE_BYTES) in r.message


def test_bytes_ref_needs_no_reach() -> None:
    data = corpus.raster("webp", 50, 40)
    for ref in [data, bytearray(data), memoryview(data)]:
        p = perceive(view(ref, reach=Reach([])))
        assert p.path is None
        assert (p.source_width, p.source_height) == (50, 40)
    refused(view(b"", reach=Reach([])), "undecodable")
    refused(view(b"x" * (MAX_SOURCE_BYTES + 1), reach=Reach([])), "too_large")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"page": "1"},
        {"page": True},
        {"offset": -1},
        {"limit": 0},
        {"model": 123},
        {"model": ""},
        {"reach": None},
        {"name": 5},
    ],
)
def test_bad_arguments_are_refusals(root: Path, kwargs: dict[str, object]) -> None:
    name = put(root, "a.png", corpus.raster("png"))
    args: dict[str, object] = {"reach": Reach([root]), **kwargs}
    refused(view(name, **args), "invalid_input")  # type: ignore[arg-type]


@pytest.mark.parametrize("ref", [123, None, 4.5, ["a.png"], "", "a\x00b.png"])
def test_bad_refs_are_refusals(root: Path, ref: object) -> None:
    refused(view(ref, reach=Reach([root])), "invalid_input")  # type: ignore[arg-type]


def test_tokens_follow_the_target_model(root: Path) -> None:
    name = put(root, "wide.png", corpus.encode(corpus.noise_image(1024, 1024), "png"))
    reach = Reach([root])
    claude = perceive(view(name, reach=reach, model="claude-sonnet-4-6"))
    gpt = perceive(view(name, reach=reach, model="gpt-4o"), get_model("gpt-4o"))
    assert claude.tokens == image_tokens(CLAUDE, claude.width, claude.height)
    assert gpt.tokens == image_tokens(get_model("gpt-4o"), gpt.width, gpt.height)
    assert claude.tokens <= 1568


def test_perception_json_and_describe(root: Path) -> None:
    p = perceive(view(put(root, "a.png", corpus.raster("png", 96, 64)), reach=Reach([root])))
    j = p.to_json()
    assert j["ok"] is True
    assert j["digest"] == p.tagged_digest
    assert (j["width"], j["height"], j["bytes"], j["tokens"]) == (
        p.width,
        p.height,
        p.size,
        p.tokens,
    )
    assert p.describe() == "a.png: 96x64, sent 96x64"
    assert "region" not in j  # the whole image


@settings(
    max_examples=int(os.environ.get("VISUS_FUZZ_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    base=st.sampled_from(["png", "jpeg", "gif", "webp", "bmp", "tiff"]),
    cut=st.integers(0, 400),
    flips=st.lists(st.tuples(st.integers(0, 399), st.integers(0, 255)), max_size=8),
)
def test_mutated_inputs_never_raise(base: str, cut: int, flips: list[tuple[int, int]]) -> None:
    data = bytearray(corpus.raster(base, 24, 16))
    for pos, value in flips:
        if pos < len(data):
            data[pos] = value
    result = view(bytes(data[: max(cut, len(data) // 2)]), reach=Reach([]))
    assert isinstance(result, (Perception, Refusal))
    if isinstance(result, Perception):
        perceive(result)


def test_text_window_past_the_end(root: Path) -> None:
    name = put(root, "short.py", corpus.source_code(10))
    refused(view(name, reach=Reach([root]), offset=10_000), "invalid_input")


def test_pathlike_ref_and_absolute_path(root: Path) -> None:
    put(root, "a.gif", corpus.raster("gif"))
    p = perceive(view(root / "a.gif", reach=Reach([root])))
    assert p.source == str(root / "a.gif")
    assert p.path == (root / "a.gif").resolve()


def test_every_refusal_reason_is_reachable(root: Path) -> None:
    put(root, "bomb.png", corpus.png_bomb())
    put(root, "cut.png", corpus.truncated(corpus.raster("png", 160, 120)))
    put(root, "blob.bin", corpus.random_binary())
    reach = Reach([root])
    seen = {
        refused(view(ref, reach=reach), reason).reason
        for ref, reason in [
            ("", "invalid_input"),
            ("nope.png", "not_found"),
            ("/", "outside_reach"),
            ("blob.bin", "unsupported_type"),
            ("bomb.png", "too_large"),
            ("cut.png", "undecodable"),
        ]
    }
    assert seen == set(REFUSAL_REASONS)
    r = refused(view("nope.png", reach=reach), "not_found")
    assert r.to_json() == {"ok": False, "reason": "not_found", "message": r.message}
    assert r.source == "nope.png"


def test_text_too_large_to_render_points_to_read(root: Path) -> None:

    line = b"x = 1  # padding padding padding padding padding padding padding padding\n"
    (root / "huge.py").write_bytes(line * (MAX_TEXT_BYTES // len(line) + 1))
    r = refused(view("huge.py", reach=Reach([root])), "too_large")
    assert "read('huge.py', offset=" in r.message
