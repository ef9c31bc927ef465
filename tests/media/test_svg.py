from __future__ import annotations

import base64
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import resvg_py
from media_corpus import CLAUDE, decoded, encode, near, pixel, png_header_only
from PIL import Image, ImageChops

from tests.timing import within
from visus import limits
from visus.errors import TooLargeError, UndecodableError, UnsupportedTypeError
from visus.media import Profile, load, probe
from visus.media.svg import parse_svg

NS = 'xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink"'


def svg(body: str, attrs: str = 'width="200" height="100"') -> bytes:
    return f"<svg {NS} {attrs}>{body}</svg>".encode()


def test_renders_at_intrinsic_size_with_right_pixels() -> None:
    f = load(svg('<rect width="100" height="100" fill="#ff0000"/>'), profile=CLAUDE)
    assert (f.source_kind, f.width, f.height) == ("svg", 200, 100)
    assert (f.source_width, f.source_height) == (200, 100)
    out = decoded(f.data).convert("RGBA")
    assert pixel(out, (50, 50)) == (255, 0, 0, 255)
    assert pixel(out, (150, 50))[3] == 0  # transparent where nothing was drawn
    assert f.media_type == "image/png"


def test_units_and_viewbox_give_the_size() -> None:
    assert probe(svg("", 'width="2in" height="1in"')).width == 192
    assert (probe(svg("", 'viewBox="0 0 300 150"')).width, 150) == (300, 150)
    assert probe(svg("", 'width="50%" viewBox="0 0 400 100"')).width == 200


def _local_png(tmp_path: Path) -> Path:
    path = tmp_path / "secret.png"
    path.write_bytes(encode(Image.new("RGB", (100, 100), (0, 200, 0)), "PNG"))
    return path


@pytest.mark.parametrize("form", ["{path}", "file://{path}"])
@pytest.mark.parametrize("attr", ["href", "xlink:href"])
def test_local_file_references_never_reach_the_renderer(
    tmp_path: Path, form: str, attr: str
) -> None:
    ref = form.format(path=_local_png(tmp_path))
    doc = svg(f'<image {attr}="{ref}" width="200" height="100"/>')
    if form == "{path}":
        # The danger is real: resvg itself reads the file and paints it green.
        raw = Image.open(__import__("io").BytesIO(resvg_py.svg_to_bytes(svg_string=doc.decode())))
        assert near(pixel(raw.convert("RGB"), (100, 50)), (0, 200, 0), 10)
    f = load(doc, profile=CLAUDE)
    assert pixel(decoded(f.data).convert("RGBA"), (100, 50))[3] == 0
    parsed = parse_svg(doc)
    assert parsed is not None
    assert str(tmp_path) not in parsed.text


def test_etc_passwd_and_remote_references_are_stripped() -> None:
    doc = svg(
        '<image href="/etc/passwd" width="10" height="10"/>'
        '<image xlink:href="http://example.com/x.png" width="10" height="10"/>'
        '<use href="other.svg#shape"/>'
        '<feImage href="https://example.com/i.png"/>'
        "<style>@import url(https://example.com/a.css); rect { fill: url(/etc/x#p) }</style>"
        '<rect width="10" height="10" style="fill:url(file:///etc/y)"/>'
        '<rect x="20" width="10" height="10" fill="url(#grad)"/>'
    )
    parsed = parse_svg(doc)
    assert parsed is not None
    for needle in ("/etc/", "example.com", "other.svg", "@import"):
        assert needle not in parsed.text
    assert "url(#grad)" in parsed.text  # internal references survive
    f = load(doc, profile=CLAUDE)
    assert f.source_kind == "svg"


def test_raster_data_uri_renders_but_nested_svg_data_uri_is_dropped(tmp_path: Path) -> None:
    png = base64.b64encode(encode(Image.new("RGB", (4, 4), (0, 0, 255)), "PNG")).decode()
    inner = svg(f'<image href="{_local_png(tmp_path)}" width="200" height="100"/>')
    nested = base64.b64encode(inner).decode()
    doc = svg(
        f'<image href="data:image/png;base64,{png}" width="100" height="100"/>'
        f'<image x="100" href="data:image/svg+xml;base64,{nested}" width="100" height="100"/>'
    )
    out = decoded(load(doc, profile=CLAUDE).data).convert("RGBA")
    assert near(pixel(out, (50, 50)), (0, 0, 255, 255), 10)
    assert pixel(out, (150, 50))[3] == 0


# A nested document librsvg would load from a data: URL: a green gradient and a green
# flood filter. Drawn, it paints the rect green; cleaned away, the rect is not green.
_NESTED = svg(
    '<linearGradient id="g"><stop offset="0" stop-color="#00c800"/>'
    '<stop offset="1" stop-color="#00c800"/></linearGradient>'
    '<filter id="f"><feFlood flood-color="#00c800"/></filter>'
)
_NESTED_URI = "data:image/svg+xml;base64," + base64.b64encode(_NESTED).decode()
_RECT = '<rect width="200" height="100"/>'
#: Every way (issue 23) a stylesheet reached librsvg uncleaned, each naming the nested
#: document; before the fix each one painted the nested gradient.
CSS_BYPASSES = {
    "style text after a child element": f"<style>rect{{}}<x/>rect{{fill:url({_NESTED_URI}#g)}}"
    f"</style>{_RECT}",
    "second CDATA after a child": f"<style><![CDATA[rect{{}}]]><x/><![CDATA[rect{{fill:url("
    f"{_NESTED_URI}#g)}}]]></style>{_RECT}",
    "escape in <style>": f"<style>rect{{fill:u\\72l({_NESTED_URI}#g)}}</style>{_RECT}",
    "escape in a presentation attribute": f'<rect width="200" height="100" '
    f'fill="u\\72l({_NESTED_URI}#g)"/>',
    "escape in a style attribute": f'<rect width="200" height="100" '
    f'style="fill:u\\72 l({_NESTED_URI}#g)"/>',
    "escaped filter": f'<rect width="200" height="100" style="filter:\\75rl({_NESTED_URI}#f)"/>',
    "unterminated url at the end": f"<style>rect{{fill:url({_NESTED_URI}#g</style>{_RECT}",
    "style in another namespace": '<h:style xmlns:h="http://www.w3.org/1999/xhtml">'
    f"rect{{fill:url({_NESTED_URI}#g)}}</h:style>{_RECT}",
}


@pytest.mark.parametrize("body", list(CSS_BYPASSES.values()), ids=list(CSS_BYPASSES))
def test_no_stylesheet_spelling_hands_the_renderer_a_nested_document(body: str) -> None:
    doc = svg(body)
    parsed = parse_svg(doc)
    assert parsed is not None
    # What is left names no outside url, in any spelling librsvg would read.
    assert "\\" not in parsed.text
    assert not re.search(r"url\(\s*['\"]?\s*(?!#)", parsed.text, re.IGNORECASE)
    out = decoded(load(doc, profile=CLAUDE).data).convert("RGBA")
    assert not near(pixel(out, (100, 50)), (0, 200, 0, 255), 30)


def test_escaped_import_and_stylesheet_processing_instruction_are_dropped() -> None:
    doc = b'<?xml-stylesheet href="https://example.com/a.css" type="text/css"?>' + svg(
        '<style>@\\69mport "https://example.com/b.css"; rect { fill: red }</style>' + _RECT
    )
    parsed = parse_svg(doc)
    assert parsed is not None
    assert "example.com" not in parsed.text
    assert "fill: red" in parsed.text  # the rest of the stylesheet is kept
    out = decoded(load(doc, profile=CLAUDE).data).convert("RGBA")
    assert pixel(out, (100, 50)) == (255, 0, 0, 255)


def test_fragment_urls_survive_cleaning_quoted_or_not() -> None:
    doc = svg(
        '<linearGradient id="b"><stop offset="0" stop-color="#0000ff"/>'
        '<stop offset="1" stop-color="#0000ff"/></linearGradient>'
        "<style>.q { fill: url('#b') }</style>"
        '<rect class="q" width="100" height="100"/><rect x="100" width="100" height="100" '
        'fill="url( #b )"/>'
    )
    out = decoded(load(doc, profile=CLAUDE).data).convert("RGBA")
    assert pixel(out, (50, 50)) == pixel(out, (150, 50)) == (0, 0, 255, 255)


BILLION_LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE svg [
 <!ENTITY lol "lol">
 <!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol2 "&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
 <!ENTITY lol5 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
 <!ENTITY lol6 "&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;">
 <!ENTITY lol7 "&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;">
 <!ENTITY lol8 "&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;">
 <!ENTITY lol9 "&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;">
]>
<svg xmlns="http://www.w3.org/2000/svg" width="100" height="100"><text>&lol9;</text></svg>
"""

XXE = b"""<?xml version="1.0"?>
<!DOCTYPE svg [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>
<svg xmlns="http://www.w3.org/2000/svg" width="100" height="100"><text y="20">&xxe;</text></svg>
"""


@pytest.mark.parametrize("doc", [BILLION_LAUGHS, XXE], ids=["billion-laughs", "xxe"])
def test_entity_attacks_are_refused_quickly(doc: bytes) -> None:
    load(b"warm\n", profile=CLAUDE)  # starting the render worker is not the refusal
    start = time.perf_counter()
    with pytest.raises(UnsupportedTypeError, match="ENTITY"):
        load(doc, profile=CLAUDE)
    with pytest.raises(UnsupportedTypeError):
        probe(doc)
    assert time.perf_counter() - start < within(2)


def test_entity_text_that_is_not_svg_is_just_text() -> None:
    doc = b'<?xml version="1.0"?>\n<!DOCTYPE note [<!ENTITY a "b">]>\n<note>&a;</note>\n'
    f = load(doc, profile=CLAUDE)
    assert f.source_kind == "text"


def test_plain_public_doctype_is_accepted() -> None:
    doc = (
        b'<?xml version="1.0"?>\n<!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN" '
        b'"http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd">\n'
        + svg('<rect width="50" height="50" fill="red"/>')
    )
    f = load(doc, profile=CLAUDE)
    assert f.source_kind == "svg"
    assert pixel(decoded(f.data).convert("RGBA"), (10, 10)) == (255, 0, 0, 255)


def test_huge_canvas_is_rendered_scaled_down_fast() -> None:
    doc = svg(
        '<rect width="50000" height="100000" fill="blue"/>',
        'width="100000" height="100000"',
    )
    start = time.perf_counter()
    f = load(doc, profile=CLAUDE)
    assert time.perf_counter() - start < within(5)
    assert (f.source_width, f.source_height) == (100000, 100000)
    assert f.width == f.height
    assert f.width * f.height <= CLAUDE.max_pixels
    out = decoded(f.data).convert("RGBA")
    assert near(pixel(out, (f.width // 4, f.height // 2)), (0, 0, 255, 255), 5)


def test_render_is_bounded_by_the_svg_render_limit() -> None:
    huge = Profile(max_edge=100_000, max_pixels=10**10, max_bytes=10**9)
    f = load(svg("", 'width="20000" height="20000"'), profile=huge)
    assert f.width * f.height <= limits.MAX_SVG_RENDER_PIXELS


def test_oversized_svg_is_too_large() -> None:
    padding = "<!--" + "x" * limits.MAX_SVG_BYTES + "-->"
    with pytest.raises(TooLargeError):
        load(svg(padding), profile=CLAUDE)


def test_truncated_svg_is_undecodable() -> None:
    doc = svg('<rect width="50" height="50" fill="red"/>' * 20)
    with pytest.raises(UndecodableError):
        load(doc[: len(doc) // 2], profile=CLAUDE)


def test_render_withheld_refuses_svg() -> None:
    with pytest.raises(UnsupportedTypeError, match="withheld"):
        load(svg(""), profile=CLAUDE, render=False)


def test_text_in_svg_uses_bundled_fonts() -> None:
    doc = svg('<text x="10" y="60" font-size="48" font-family="Arial">Hi</text>')
    out = decoded(load(doc, profile=CLAUDE).data).convert("RGBA")
    assert out.getchannel("A").getbbox() is not None  # glyphs drawn without system fonts


def test_cjk_and_emoji_in_svg_draw_real_glyphs() -> None:
    def drawn(text: str) -> bytes:
        doc = svg(f'<text x="10" y="60" font-size="48">{text}</text>')
        return decoded(load(doc, profile=CLAUDE).data).convert("RGBA").tobytes()

    unmapped = drawn("\U000f0000\U000f0000")
    cjk, emoji = drawn("漢字"), drawn("😀🎉")
    assert len({unmapped, cjk, emoji}) == 3


_CRASH_PROBE = """
import sys
from visus.media import Profile, load
from visus.errors import MediaError
n, kind = int(sys.argv[1]), sys.argv[2]
ns = 'xmlns="http://www.w3.org/2000/svg"'
if kind == "g":
    body = "<g>" * n + '<rect width="5" height="5"/>' + "</g>" * n
else:
    parts = ['<rect id="a0" width="5" height="5"/>']
    parts += [f'<g id="a{i}" opacity="0.9"><use href="#a{i-1}"/></g>' for i in range(1, n)]
    body = "<defs>" + "".join(parts) + f'</defs><use href="#a{n-1}"/>'
doc = f'<svg {ns} width="10" height="10">{body}</svg>'
try:
    load(doc.encode(), profile=Profile(100, 10_000, 1_000_000))
    print("rendered")
except MediaError as e:
    print("refused", type(e).__name__)
"""


@pytest.mark.parametrize(("depth", "kind"), [(400, "g"), (1500, "g"), (300, "use")])
def test_deep_documents_do_not_crash_the_process(depth: int, kind: str) -> None:
    # On a default 8 MB stack resvg segfaulted near depth 250 (and 150 chained <use>);
    # librsvg (the renderer now) must not crash either.
    proc = subprocess.run(
        [sys.executable, "-c", _CRASH_PROBE, str(depth), kind],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    # Past limits.SVG_MAX_DEPTH the nesting is refused before rendering.
    expected = (
        "refused TooLargeError" if kind == "g" and depth > limits.SVG_MAX_DEPTH else "rendered"
    )
    # librsvg refuses a chain of <use> past its own nesting limit while drawing.
    refusals = ("refused UndecodableError", "refused TooLargeError")
    assert proc.stdout.strip() in (expected, *refusals)


def test_embedded_raster_bomb_is_dropped_before_the_renderer() -> None:
    # resvg would try to allocate 4.8 GB for this header (and abort the process).
    bomb = base64.b64encode(png_header_only(40_000, 40_000)).decode()
    ok = base64.b64encode(encode(Image.new("RGB", (4, 4), (0, 0, 255)), "PNG")).decode()
    doc = svg(
        f'<image href="data:image/png;base64,{bomb}" width="100" height="100"/>'
        f'<image x="100" href="data:image/png;base64,{ok}" width="100" height="100"/>'
        '<image href="data:image/png;base64,!!notbase64" width="10" height="10"/>'
    )
    parsed = parse_svg(doc)
    assert parsed is not None
    assert bomb not in parsed.text
    assert "notbase64" not in parsed.text
    assert ok in parsed.text
    out = decoded(load(doc, profile=CLAUDE).data).convert("RGBA")
    assert near(pixel(out, (150, 50)), (0, 0, 255, 255), 10)


def test_line_art_is_drawn_at_the_fitted_size_and_sent_lossless() -> None:
    from visus.media.svg import render_svg

    doc = svg(
        '<rect x="10" y="10" width="300" height="120" fill="#3366cc" stroke="black"/>'
        '<circle cx="400" cy="200" r="60" fill="orange"/>',
        'width="800" height="400"',
    )
    f = load(doc, profile=CLAUDE)
    parsed = parse_svg(doc)
    assert parsed is not None
    image = render_svg(parsed, CLAUDE.max_edge, CLAUDE.max_pixels)
    # Drawn straight at the fitted size, and exactly those pixels are what is sent.
    assert (f.width, f.height) == image.size == (800, 400)
    assert f.media_type == "image/png"
    sent = decoded(f.data).convert("RGBA")
    assert ImageChops.difference(sent, image).getbbox() is None


_FONT_PROBE = """
import os, sys
from pathlib import Path
from visus.media import _vips
pyvips = _vips.svg_engine()
conf = Path(os.environ["FONTCONFIG_FILE"]).read_text()
print("\\n".join(line.strip()[5:-6] for line in conf.splitlines() if "<dir>" in line))
"""


def test_svg_text_sees_only_visus_fonts() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _FONT_PROBE], capture_output=True, text=True, timeout=60, check=True
    )
    dirs = proc.stdout.split()
    assert dirs, proc.stderr
    from visus.media._fonts import font_dir

    # Only the shipped DejaVu and the Noto packages: never /usr/share/fonts, ~/.fonts...
    assert dirs[0] == str(font_dir())
    assert all(d == str(font_dir()) or "manimgx_fonts" in d for d in dirs), dirs


def test_a_machine_only_font_is_not_used() -> None:
    # The machine may have fonts visus does not ship (here: DejaVu Math TeX Gyre);
    # asking for one draws the shipped default, exactly as an unknown family does.
    import os

    machine = {k: v for k, v in os.environ.items() if k != "FONTCONFIG_FILE"}
    listed = subprocess.run(["fc-list", ":", "family"], capture_output=True, text=True, env=machine)
    if "DejaVu Math TeX Gyre" not in listed.stdout:
        pytest.skip("the machine has no font visus does not ship to test against")

    def drawn(family: str) -> bytes:
        doc = svg(
            f'<text x="5" y="60" font-size="48" font-family="{family}">Qx=1</text>',
            'width="300" height="100"',
        )
        return decoded(load(doc, profile=CLAUDE).data).convert("RGBA").tobytes()

    assert drawn("DejaVu Math TeX Gyre") == drawn("No Such Family") == drawn("DejaVu Sans")


def test_librsvg_alone_reads_no_local_file(tmp_path: Path) -> None:
    # The second layer: even an uncleaned document cannot make librsvg read a file,
    # because it is handed bytes with no base file.
    from visus.media import _vips

    pyvips = _vips.svg_engine()
    path = _local_png(tmp_path)
    for ref in (str(path), f"file://{path}"):
        doc = svg(f'<image href="{ref}" width="200" height="100"/>')
        im = pyvips.Image.svgload_buffer(doc)
        assert im.extract_band(3).max() == 0  # nothing painted


def test_xinclude_of_a_local_file_is_never_followed(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET")
    xi = 'xmlns:xi="http://www.w3.org/2001/XInclude"'
    doc = (
        f'<svg {NS} {xi} width="400" height="100"><text x="5" y="50" font-size="40">'
        f'<xi:include href="{secret}" parse="text"/></text></svg>'
    ).encode()
    parsed = parse_svg(doc)
    assert parsed is not None
    assert str(secret) not in parsed.text
    try:
        f = load(doc, profile=CLAUDE)
    except UndecodableError:
        return  # refused: fine, nothing was read
    # Nothing drawn: the include had no target left.
    assert decoded(f.data).convert("RGBA").getextrema()[3] == (0, 0)


_CONF_PATH = """
import os
from visus.media import _vips
vips = _vips.svg_engine()
doc = b'<svg xmlns="http://www.w3.org/2000/svg" width="40" height="20"><text y="15">Hi</text></svg>'
vips.Image.svgload_buffer(doc).avg()  # text: fontconfig starts and scans
print(os.environ["FONTCONFIG_FILE"])
"""


def _conf_path(cache_home: Path) -> Path:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache_home)}
    env.pop("FONTCONFIG_FILE", None)
    proc = subprocess.run(
        [sys.executable, "-c", _CONF_PATH], capture_output=True, text=True, timeout=60, env=env
    )
    assert proc.returncode == 0, proc.stderr
    return Path(proc.stdout.strip())


def test_workers_share_one_font_config_and_cache(tmp_path: Path) -> None:
    # Every worker start used to make (and, when killed by the budget, leak) its own
    # /tmp folder and rescan the fonts; now they share one under the user's cache.
    first, second = _conf_path(tmp_path), _conf_path(tmp_path)
    assert first == second
    assert first.parent.parent == tmp_path / "visus"
    assert "<dir>" in first.read_text()
    assert any((first.parent / "cache").iterdir())  # fontconfig's scan, kept for the next
    assert [p.name for p in first.parent.iterdir() if p.name.startswith("fonts.conf.")] == []


def test_an_unwritable_cache_falls_back_to_a_private_folder(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    conf = _conf_path(blocker / "cache")
    assert conf.parent.name.startswith("visus-fontconfig-")
    assert not conf.exists()  # removed when that process exited
