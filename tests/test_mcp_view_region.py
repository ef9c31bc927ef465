"""MCP ``view`` zooms (issue 26): the result states the source's size, ``region`` in it
shows a word the plain view shrank past reading (the reference model's OCR reads it),
and a region outside the image is refused with its size."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from mcp import Client

from tests.test_mcp_view_digest import _image, _text
from tests.zoomshot import HEIGHT, REGION, WIDTH, WORDS, words_read, write_screen
from visus.mcp_server import build_server
from visus.tether.client import TetherClient


async def test_mcp_view_zooms_into_a_region(tmp_path: Path) -> None:
    write_screen(tmp_path)
    # view never calls tether: a client that would fail if it did is enough
    tc = TetherClient("http://127.0.0.1:9", transport=httpx.MockTransport(httpx.Response))
    server = build_server(tc, roots=[tmp_path])
    async with Client(server, mode="legacy") as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        region_schema = listed["view"].input_schema["properties"]["region"]
        assert "source's pixels" in str(region_schema)

        plain = await client.call_tool("view", {"path": "screen.png"})
        assert not plain.is_error, plain
        assert f"{WIDTH}x{HEIGHT}, sent 1568x882" in _text(plain)
        assert "zoom: region=[x0,y0,x1,y1]" in _text(plain)
        assert not set(WORDS) & set(words_read(_image(plain)))

        zoomed = await client.call_tool("view", {"path": "screen.png", "region": REGION})
        assert not zoomed.is_error, zoomed
        assert f"region=[{','.join(map(str, REGION))}] of {WIDTH}x{HEIGHT}, sent" in _text(zoomed)
        assert set(WORDS) <= set(words_read(_image(zoomed)))

        outside = await client.call_tool("view", {"path": "screen.png", "region": [0, 0, 9999, 5]})
        assert outside.is_error
        assert "invalid_input" in _text(outside)
        assert f"{WIDTH}x{HEIGHT}" in _text(outside)
        inverted = await client.call_tool("view", {"path": "screen.png", "region": [9, 9, 1, 1]})
        assert inverted.is_error
        assert "empty or inverted" in _text(inverted)
    await tc.aclose()


async def test_a_region_of_the_wrong_shape_is_a_typed_refusal_not_a_validation_dump(
    tmp_path: Path,
) -> None:
    """Whatever a host sends as ``region`` (three items, strings, floats, booleans, an
    object, a huge list), the result is visus's JSON refusal naming what region takes,
    as for a region outside the image; the schema a host reads still says four integers."""
    import json

    write_screen(tmp_path)
    tc = TetherClient("http://127.0.0.1:9", transport=httpx.MockTransport(httpx.Response))
    server = build_server(tc, roots=[tmp_path])
    bad: list[object] = [
        [1, 2, 3],
        ["a", "b", "c", "d"],
        "1,2,3,4",
        [1.5, 2, 3, 4],
        [True, 0, 1, 1],
        {"x0": 1},
        list(range(100_000)),
    ]
    async with Client(server, mode="legacy") as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        array = listed["view"].input_schema["properties"]["region"]["anyOf"][0]
        assert array == {
            "type": "array",
            "items": {"type": "integer"},
            "minItems": 4,
            "maxItems": 4,
        }
        for region in bad:
            result = await client.call_tool("view", {"path": "screen.png", "region": region})
            assert result.is_error, region
            refusal = json.loads(_text(result))
            assert refusal["ok"] is False
            assert refusal["reason"] == "invalid_input", refusal
            assert "region must be [x0, y0, x1, y1], four whole numbers" in refusal["message"]
            assert len(refusal["message"]) < 400, len(refusal["message"])
        for region in ([-1, 0, 5, 5], [0, 0, 10**30, 5]):
            result = await client.call_tool("view", {"path": "screen.png", "region": region})
            refusal = json.loads(_text(result))
            assert refusal["reason"] == "invalid_input"
            assert f"which is {WIDTH}x{HEIGHT}" in refusal["message"]
    await tc.aclose()


async def test_a_page_offset_or_limit_of_the_wrong_type_is_a_typed_refusal(
    tmp_path: Path,
) -> None:
    """The same for view's whole-number arguments: a string, a float, a boolean or a list
    is visus's JSON refusal naming the argument; the schema still says integer."""
    import json

    write_screen(tmp_path)
    tc = TetherClient("http://127.0.0.1:9", transport=httpx.MockTransport(httpx.Response))
    server = build_server(tc, roots=[tmp_path])
    async with Client(server, mode="legacy") as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        properties = listed["view"].input_schema["properties"]
        for name in ("page", "offset", "limit"):
            assert properties[name]["anyOf"] == [{"type": "integer"}, {"type": "null"}]
            for value in ("2", 1.5, True, [1], "x" * 10_000):
                result = await client.call_tool("view", {"path": "screen.png", name: value})
                assert result.is_error, (name, value)
                refusal = json.loads(_text(result))
                assert refusal["reason"] == "invalid_input", refusal
                assert f"{name} must be a whole number" in refusal["message"]
                assert len(refusal["message"]) < 200
    await tc.aclose()


async def test_a_strip_of_a_huge_svg_is_drawn_or_refused_in_plain_words(tmp_path: Path) -> None:
    """A region thinner than a pixel once fitted ([0,0,30000,1] of a 30000 x 30000 SVG)
    was ``undecodable`` with libvips's "unable to call svgload_buffer: zero-sized image";
    it is drawn 1 px thick as the same strip of a PNG is, and a strip no drawing can
    hold (over MAX_SOURCE_EDGE to one) is refused saying why."""
    import io

    from PIL import Image

    for side in (30_000, 100_000):
        (tmp_path / f"big{side}.svg").write_text(
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{side}" height="{side}">'
            f'<rect width="{side}" height="{side}" fill="red"/>'
            f'<rect width="{side}" height="1" fill="blue"/></svg>'
        )
    tc = TetherClient("http://127.0.0.1:9", transport=httpx.MockTransport(httpx.Response))
    async with Client(build_server(tc, roots=[tmp_path]), mode="legacy") as client:
        strips = (
            ([0, 0, 30_000, 1], (1568, 1), (0, 0, 255)),  # the blue top row, not red
            ([0, 0, 1, 30_000], (1, 1568), (255, 0, 0)),  # a column: red at its foot
        )
        for region, size, colour in strips:
            strip = await client.call_tool("view", {"path": "big30000.svg", "region": region})
            assert not strip.is_error, strip
            seen = Image.open(io.BytesIO(_image(strip))).convert("RGB")
            assert seen.size == size
            assert seen.getpixel((size[0] - 1, size[1] - 1)) == colour
        thick = await client.call_tool(
            "view", {"path": "big30000.svg", "region": [0, 0, 30_000, 3]}
        )
        assert not thick.is_error, thick
        too_thin = await client.call_tool(
            "view", {"path": "big100000.svg", "region": [0, 0, 100_000, 1]}
        )
    refusal = json.loads(_text(too_thin))
    assert refusal["reason"] == "invalid_input"
    assert "too thin to draw" in refusal["message"]
    assert "MAX_SOURCE_EDGE" in refusal["message"]
    assert "svgload" not in refusal["message"]
