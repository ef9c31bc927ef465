"""Tool arguments of the wrong shape and refusals reach the model as error outcomes.

Every built-in tool goes through :meth:`ToolRegistry.call`, which is where a bad
argument becomes ``error: ...`` (never an exception out of the loop).
"""

from __future__ import annotations

import http.server
import io
import threading
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from visus.agent import ToolContext, ToolOutcome, ToolRegistry
from visus.agent.extra_tools import attachment_tools
from visus.models import get_model
from visus.perception import Reach
from visus.record.blobs import MemoryBlobStore
from visus.record.messages import ImagePart, TextPart


def _ctx(root: Path) -> ToolContext:
    return ToolContext(
        reach=Reach([root]),
        model=get_model("claude-sonnet-4-6"),
        blobs=MemoryBlobStore(),
        session_id="s1",
    )


def _text(outcome: ToolOutcome) -> str:
    first = outcome.parts[0]
    assert isinstance(first, TextPart)
    return first.text


@pytest.mark.parametrize(
    ("tool", "args", "message"),
    [
        ("read", {}, "error: missing required argument 'path'"),
        ("read", {"path": 3}, "error: argument 'path' must be a string"),
        ("read", {"path": "a.txt", "offset": "1"}, "error: argument 'offset' must be an integer"),
        ("read", {"path": "a.txt", "limit": True}, "error: argument 'limit' must be an integer"),
        ("view", {"path": "a.png", "page": 1.5}, "error: argument 'page' must be an integer"),
        ("view", {"path": None}, "error: missing required argument 'path'"),
        ("view", {"path": "a.png", "region": [1, 2, 3]}, "error: region must be [x0, y0, x1, y1]"),
        ("view", {"path": "a.png", "region": "1,2,3,4"}, "error: region must be [x0, y0, x1, y1]"),
        ("edit", {"path": "a.txt", "old_string": "x"}, "error: missing required argument"),
        ("send_image", {"path": ["a.png"]}, "error: argument 'path' must be a string"),
    ],
)
async def test_bad_arguments_are_error_outcomes(
    tmp_path: Path, tool: str, args: dict[str, Any], message: str
) -> None:
    out = await ToolRegistry.builtin().call(tool, args, _ctx(tmp_path))
    assert out.is_error
    assert len(out.parts) == 1
    assert _text(out).startswith(message)


async def test_good_arguments_still_work(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("one\ntwo\nthree\n")
    reg = ToolRegistry.builtin()
    ctx = _ctx(tmp_path)
    out = await reg.call("read", {"path": str(tmp_path / "a.txt"), "offset": 1}, ctx)
    assert not out.is_error
    assert "two" in _text(out)
    assert "one" not in _text(out)
    edit = {"path": str(tmp_path / "a.txt"), "old_string": "two", "new_string": "2"}
    assert not (await reg.call("edit", edit, ctx)).is_error
    assert (tmp_path / "a.txt").read_text() == "one\n2\nthree\n"


async def test_view_refusal_is_an_error_outcome_naming_the_reason(tmp_path: Path) -> None:
    out = await ToolRegistry.builtin().call(
        "view", {"path": str(tmp_path / "missing.png")}, _ctx(tmp_path)
    )
    assert out.is_error
    assert _text(out).startswith("refused (not_found): ")


async def test_attachment_tools_bad_arguments_and_refusal(tmp_path: Path) -> None:
    reg = ToolRegistry(attachment_tools(tmp_path / "data"))
    ctx = _ctx(tmp_path)
    out = await reg.call("read_attachment", {"filename": 3}, ctx)
    assert (out.is_error, _text(out)) == (True, "error: filename must be a string")
    out = await reg.call("grep_attachment", {"pattern": "x", "filename": 1}, ctx)
    assert out.is_error
    assert _text(out) == "error: pattern (and filename) must be strings"
    out = await reg.call("view_attachment", {"filename": "nothing.png"}, ctx)
    assert out.is_error
    assert _text(out).startswith("refused (not_found): ")


async def test_attachment_tools_refuse_wrongly_typed_arguments(tmp_path: Path) -> None:
    reg = ToolRegistry(attachment_tools(tmp_path / "data"))
    ctx = _ctx(tmp_path)
    out = await reg.call("read_attachment", {"filename": "a.txt", "offset": "2"}, ctx)
    assert out.is_error
    assert _text(out) == "error: argument 'offset' must be an integer"


class _OneFile(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        del args


async def test_view_takes_a_url_through_the_ssrf_gate(tmp_path: Path) -> None:
    buf = io.BytesIO()
    Image.new("RGB", (40, 30), "blue").save(buf, format="PNG")
    _OneFile.body = buf.getvalue()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _OneFile)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/pic.png"
    ctx = _ctx(tmp_path)
    reg = ToolRegistry.builtin()
    try:
        # Plain http to loopback is refused unless the host allows it explicitly.
        refused = await reg.call("view", {"path": url}, ctx)
        assert refused.is_error
        assert _text(refused).startswith("refused (outside_reach)")
        ctx.allow_loopback_http = True
        seen = await reg.call("view", {"path": url}, ctx)
    finally:
        server.shutdown()
        server.server_close()
    assert not seen.is_error
    image = next(p for p in seen.parts if isinstance(p, ImagePart))
    assert (image.width, image.height) == (40, 30)
    assert image.origin.kind == "perception"
    assert image.origin.source == url  # re-viewable by the same URL
    private = await reg.call("view", {"path": "https://10.0.0.1/x.png"}, ctx)
    assert _text(private).startswith("refused (outside_reach)")


async def test_a_region_outside_the_image_is_a_refusal_naming_its_size(tmp_path: Path) -> None:
    Image.new("RGB", (300, 200), "white").save(tmp_path / "a.png")
    out = await ToolRegistry.builtin().call(
        "view", {"path": "a.png", "region": [0, 0, 400, 100]}, _ctx(tmp_path)
    )
    assert out.is_error
    assert _text(out).startswith("refused (invalid_input): ")
    assert "which is 300x200" in _text(out)
    spec = ToolRegistry.builtin().get("view")
    assert spec is not None
    assert spec.spec.parameters["properties"]["region"]["minItems"] == 4
