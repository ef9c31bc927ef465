"""Issue 33, item 1: every parse of a document's bytes runs under the render budget.

Probing a PDF (its page count, its first page's size) opened it with PDFium in the
calling process: a 2 MB PDF whose object stream inflates to 2 GB took a server to
3.5 GB. Now a probe of anything that is not a raster, and deciding the type of a
document whose rendering is withheld, run in the render worker: this process's memory
stays put, and the bomb ends in ``too_large`` naming the worker's bound.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.media.bombs import objstm_pdf
from visus import limits
from visus.errors import TooLargeError, UnsupportedTypeError
from visus.media import Profile, load, probe

MB = 1024 * 1024
PROFILE = Profile(1568, 1_150_000, 5 * MB)


def _peak() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def _parse(data: bytes, how: str) -> object:
    return probe(data) if how == "probe" else load(data, profile=PROFILE, render=False)


@pytest.fixture(scope="module")
def bomb() -> bytes:
    # Past the worker's 2 GB address space: its cap stops it whatever the machine's speed.
    return objstm_pdf(2048 * MB)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["probe", "load with rendering withheld"])
def test_a_pdf_object_stream_bomb_is_parsed_in_the_worker(
    bomb: bytes, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "RENDER_TIME_BUDGET_SECONDS", 5.0)
    Path("/proc/self/clear_refs").write_text("5")
    before = _peak()
    with pytest.raises(TooLargeError, match=r"RENDER_TIME_BUDGET_SECONDS|RENDER_MAX_MEMORY") as e:
        _parse(bomb, how)
    assert "RENDER" in str(e.value)
    assert _peak() - before < 200 * MB  # it took 3 GB in this process


def test_probing_documents_still_tells_them_apart() -> None:
    small = objstm_pdf(64 * 1024)
    found = probe(small)
    assert (found.kind, found.page_count, found.width, found.height) == ("pdf", 1, 612, 792)
    svg = b'<svg xmlns="http://www.w3.org/2000/svg" width="30" height="20"/>'
    assert (probe(svg).kind, probe(svg).width) == ("svg", 30)
    assert probe(b"a\nb\n").line_total == 2
    with pytest.raises(UnsupportedTypeError, match="withheld"):
        load(small, profile=PROFILE, render=False)
    with pytest.raises(UnsupportedTypeError):
        probe(b"\x00\x01\x02 binary")
