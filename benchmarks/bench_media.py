"""visus.media against the strongest baselines, per source, fitted for a Claude model.

Methods (each source where it applies):

- ``visus``: ``media.load`` (svg, text and pdf render in the budgeted worker process);
- ``plain``: plain Pillow: open, ``convert("RGB")``, ``thumbnail(LANCZOS)``, save (PDF
  and SVG render at 300 dpi / their own canvas first);
- ``best``: the best Pillow path: JPEG ``draft`` (DCT scaling) + ``resize(LANCZOS,
  reducing_gap=2)`` (box ``reduce`` first), save; PDF and SVG rendered straight at the
  fitted size;
- ``vips``: libvips ``thumbnail_buffer`` (shrink-on-load) + save, through pyvips with
  the ``pyvips-binary`` wheel (no PDF loader in that build: "-");
- ``floor``: the decode floor: Pillow's decode alone (JPEG drafted to the fitted size),
  no resize, no encode.

Time: one process per source runs every method in interleaved rounds (machine load
hits them alike) after one warm-up each; median and spread (min-max). Peak memory: a
fresh process per source and method, one warm-up call, then the kernel's peak-RSS mark
(``VmHWM``, reset just before the call) minus the resident size before it, summed
over the process and, for visus, its render worker. Quality: SSIM (luma, 7x7 windows)
and PSNR of the output against a full-resolution LANCZOS reference of the same size
(for PDF and SVG, a 300 dpi / 4x render reduced with LANCZOS).

``python -m benchmarks media`` (``VISUS_BENCH_ROUNDS`` rounds, default 5;
``VISUS_BENCH_ONLY=svg`` runs the sources whose label contains that text).
"""

from __future__ import annotations

import io
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

_ROUNDS = int(os.environ.get("VISUS_BENCH_ROUNDS", "5"))
_PROFILE = {"max_edge": 1568, "max_pixels": 1_150_000, "max_bytes": 5 * 1024 * 1024}
_METHODS = ("visus", "plain", "best", "vips", "floor")


_CHILD = r"""
import gc, io, json, statistics, sys, time
task, kind, path, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[5])
profile_args = json.loads(sys.argv[4])
methods = json.loads(sys.argv[6])
from PIL import Image
from visus.media import Profile, load, target_size
import pypdfium2 as pdfium
import resvg_py
import pyvips

profile = Profile(**profile_args)
data = open(path, "rb").read()
RASTER = kind in ("jpeg", "png")

def box(w, h):
    return target_size(w, h, profile.max_edge, profile.max_pixels)

def save(im):
    out = io.BytesIO()
    if kind == "jpeg":
        im.save(out, "JPEG", quality=85)
    else:
        im.save(out, "PNG")
    return out.getvalue()

def pdf_render(scale):
    doc = pdfium.PdfDocument(data)
    page = doc[0]
    bitmap = page.render(scale=scale)
    im = bitmap.to_pil().convert("RGB")
    w, h = page.get_size()
    bitmap.close(); page.close(); doc.close()
    return im, (w, h)

def svg_size():
    import re
    m = re.search(rb'width="(\d+)" height="(\d+)"', data)
    return int(m.group(1)), int(m.group(2))

def flat(im):
    # Transparent areas on white, for every method and the reference alike (dropping
    # alpha would show straight-alpha edge colours at full strength on black).
    if im.mode == "RGB":
        return im
    im = im.convert("RGBA")
    base = Image.new("RGB", im.size, (255, 255, 255))
    base.paste(im, mask=im.getchannel("A"))
    return base

def resvg(**kwargs):
    png = bytes(resvg_py.svg_to_bytes(**kwargs))
    return flat(Image.open(io.BytesIO(png)))

def visus():
    f = load(data, profile=profile, name="module.py" if kind == "text" else None)
    return f.data

def plain():
    if RASTER:
        im = Image.open(io.BytesIO(data)).convert("RGB")
    elif kind == "pdf":
        im, _ = pdf_render(300 / 72)
    else:
        im = resvg(svg_string=data.decode())
    im.thumbnail(box(*im.size), Image.Resampling.LANCZOS)
    return save(im)

def best():
    if RASTER:
        im = Image.open(io.BytesIO(data))
        size = box(*im.size)
        if im.format == "JPEG":
            im.draft("RGB", size)
        im = im.convert("RGB").resize(size, Image.Resampling.LANCZOS, reducing_gap=2.0)
    elif kind == "pdf":
        doc = pdfium.PdfDocument(data)
        w, h = doc[0].get_size(); doc.close()
        tw, th = box(round(w * 8), round(h * 8))
        im, _ = pdf_render(tw / w)
    else:
        tw, th = box(*svg_size()) if max(svg_size()) > profile.max_edge else svg_size()
        im = resvg(svg_string=data.decode(), width=tw, height=th)
    return save(im)

def vips():
    if RASTER:
        head = pyvips.Image.new_from_buffer(data, "")
        w, h = box(head.width, head.height)
    else:
        w, h = box(*svg_size())
    im = pyvips.Image.thumbnail_buffer(data, w, height=h, size="down")
    if im.bands == 4:
        im = im.flatten(background=255)
    return im.write_to_buffer(".jpg[Q=85]" if kind == "jpeg" else ".png")

def floor():
    im = Image.open(io.BytesIO(data))
    if im.format == "JPEG":
        im.draft("RGB", box(*im.size))
    im.load()
    return b""

FNS = {"visus": visus, "plain": plain, "best": best, "vips": vips, "floor": floor}

def status(pid, field):
    with open(f"/proc/{pid}/status") as f:
        line = next(l for l in f if l.startswith(field + ":"))
    return int(line.split()[1]) * 1024

def worker_pids():
    from visus.media import _worker
    pool = _worker._POOL
    return [w.proc.pid for w in pool.idle] if pool is not None else []

if task == "memory":
    fn = FNS[methods[0]]
    fn()
    gc.collect()
    pids = ["self", *worker_pids()]
    before = {}
    for pid in pids:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        before[pid] = status(pid, "VmRSS")
    fn()
    peak = sum(status(pid, "VmHWM") - before[pid] for pid in pids)
    print(json.dumps({"peak": peak}))
    raise SystemExit

def reference(size):
    if RASTER:
        im = Image.open(io.BytesIO(data)).convert("RGB")
    elif kind == "pdf":
        im, _ = pdf_render(300 / 72)
    else:
        w, h = svg_size()
        im = resvg(svg_string=data.decode(), width=w * 4, height=h * 4)
    return im.resize(size, Image.Resampling.LANCZOS)

def quality(out):
    import numpy as np
    im = flat(Image.open(io.BytesIO(out)))
    ref = reference(im.size)
    a = np.asarray(im.convert("L"), dtype=np.float64)
    b = np.asarray(ref.convert("L"), dtype=np.float64)
    diff = np.asarray(im, dtype=np.float64) - np.asarray(ref, dtype=np.float64)
    mse = float(np.mean(diff ** 2))
    psnr = 99.0 if mse == 0 else 10 * np.log10(255 ** 2 / mse)
    def mean7(x):
        c = np.cumsum(np.cumsum(np.pad(x, ((1, 0), (1, 0))), 0), 1)
        return (c[7:, 7:] - c[:-7, 7:] - c[7:, :-7] + c[:-7, :-7]) / 49
    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    ma, mb = mean7(a), mean7(b)
    va, vb, cov = mean7(a * a) - ma * ma, mean7(b * b) - mb * mb, mean7(a * b) - ma * mb
    ssim = ((2 * ma * mb + c1) * (2 * cov + c2)) / ((ma * ma + mb * mb + c1) * (va + vb + c2))
    return float(ssim.mean()), float(psnr), im.size, len(out)

times = {m: [] for m in methods}
outputs = {}
for m in methods:
    outputs[m] = FNS[m]()
for _ in range(rounds):
    for m in methods:
        t = time.perf_counter(); FNS[m](); times[m].append(time.perf_counter() - t)
result = {}
for m in methods:
    xs = times[m]
    q = quality(outputs[m]) if outputs[m] and kind != "text" else None
    size = Image.open(io.BytesIO(outputs[m])).size if outputs[m] else None
    result[m] = {
        "median": statistics.median(xs), "min": min(xs), "max": max(xs),
        "ssim": q[0] if q else None, "psnr": q[1] if q else None,
        "size": size, "bytes": len(outputs[m]),
    }
print(json.dumps(result))
"""


def _photo(w: int, h: int) -> bytes:
    from PIL import Image, ImageFilter

    rng = random.Random(12)
    noise = Image.frombytes("RGB", (w // 4, h // 4), rng.randbytes(w * h * 3 // 16))
    noise = noise.resize((w, h), Image.Resampling.BICUBIC).filter(ImageFilter.GaussianBlur(1))
    grad = Image.linear_gradient("L").resize((w, h))
    base = Image.merge("RGB", (grad, grad.transpose(Image.Transpose.FLIP_LEFT_RIGHT), grad))
    fine = Image.frombytes("RGB", (w, h), rng.randbytes(w * h * 3))
    im = Image.blend(Image.blend(base, noise, 0.5), fine, 0.08)
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=90)
    return buf.getvalue()


def _screenshot(w: int, h: int) -> bytes:
    from PIL import Image, ImageDraw, ImageFont

    im = Image.new("RGB", (w, h), (246, 247, 249))
    d = ImageDraw.Draw(im)
    d.rectangle((0, 0, w, 60), fill=(36, 41, 47))
    d.rectangle((0, 60, 320, h), fill=(230, 233, 238))
    font = ImageFont.load_default(18)
    for i, y in enumerate(range(90, h - 40, 28)):
        d.text(
            (360, y),
            f"Row {i}: the quick brown fox jumps over the lazy dog {i * 37}",
            fill=(20, 20, 20),
            font=font,
        )
        d.text((20, y), f"Item {i}", fill=(60, 60, 60), font=font)
    d.rectangle((w - 900, 200, w - 100, 700), fill=(52, 120, 246))
    buf = io.BytesIO()
    im.save(buf, "PNG")
    return buf.getvalue()


def _pdf() -> bytes:
    from matplotlib.backends.backend_pdf import FigureCanvasPdf
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8.5, 11))
    FigureCanvasPdf(fig)
    ax = fig.add_subplot(2, 1, 1)
    rng = random.Random(3)
    for k in range(5):
        ax.plot([rng.gauss(0, 1) + k for _ in range(400)], linewidth=0.8, label=f"series {k}")
    ax.legend()
    ax.set_title("Quarterly measurements")
    fig.text(
        0.08,
        0.42,
        "\n".join(f"Line {i}: body text of the report, paragraph {i}." for i in range(30)),
        fontsize=9,
        va="top",
    )
    buf = io.BytesIO()
    fig.savefig(buf, format="pdf")
    return buf.getvalue()


def _svg() -> bytes:
    """A map-like drawing: thousands of small shapes, as exported by drawing tools."""
    rng = random.Random(5)
    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="2400" height="1800">']
    while sum(map(len, parts)) < 500_000:
        cx, cy = rng.uniform(0, 2400), rng.uniform(0, 1800)
        points = " ".join(
            f"{cx + rng.uniform(-40, 40):.1f},{cy + rng.uniform(-40, 40):.1f}" for _ in range(6)
        )
        colour = f"#{rng.randrange(0x1000000):06x}"
        parts.append(f'<polygon points="{points}" fill="{colour}" stroke="#333"/>')
    parts.append('<text x="40" y="80" font-size="64">Benchmark SVG</text></svg>')
    return "".join(parts).encode()


def _source() -> bytes:
    lines = []
    for i in range(400):
        lines += [
            f"def handler_{i}(request, *, retries: int = 3) -> dict[str, int]:",
            f'    """Handle request {i} and return counters."""',
            f"    total = sum(item.size for item in request.items if item.kind == {i % 7})",
            f"    return {{'total': total, 'retries': retries, 'id': {i}}}  # handler {i}",
            "",
        ]
    return ("\n".join(lines) + "\n").encode()


def _page(w: int, h: int) -> bytes:
    """A long document page (a scrolled web page or a PDF export): text rows, rules."""
    from PIL import Image, ImageDraw, ImageFont

    im = Image.new("RGB", (w, h), (255, 255, 255))
    d = ImageDraw.Draw(im)
    font = ImageFont.load_default(22)
    rng = random.Random(7)
    y = 40
    while y < h - 60:
        if rng.random() < 0.08:
            d.rectangle((80, y, w - 80, y + 160), fill=(235, 240, 250), outline=(120, 140, 200))
            y += 190
            continue
        words = " ".join(
            rng.choice(["lorem", "ipsum", "dolor", "amet", "visus", "page"]) for _ in range(18)
        )
        d.text((80, y), words, fill=(25, 25, 25), font=font)
        y += 34
    buf = io.BytesIO()
    im.save(buf, "PNG")
    return buf.getvalue()


def _methods(kind: str) -> list[str]:
    if kind == "text":
        return ["visus"]
    if kind == "pdf":
        return ["visus", "plain", "best"]
    if kind == "svg":
        return ["visus", "plain", "best", "vips"]
    return list(_METHODS)


def _run(task: str, kind: str, path: Path, methods: list[str]) -> dict[str, object]:
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            _CHILD,
            task,
            kind,
            str(path),
            json.dumps(_PROFILE),
            str(_ROUNDS),
            json.dumps(methods),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode:
        raise RuntimeError(f"{task} {kind} {methods}: {proc.stderr[-2000:]}")
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    cases = {
        "12 MP JPEG photo": ("jpeg", lambda: _photo(4000, 3000)),
        "24 MP JPEG photo": ("jpeg", lambda: _photo(6000, 4000)),
        "4K PNG screenshot": ("png", lambda: _screenshot(3840, 2160)),
        "2000x12000 PNG page": ("png", lambda: _page(2000, 12000)),
        "PDF page (letter)": ("pdf", _pdf),
        "~500 KB SVG": ("svg", _svg),
        "2000-line source": ("text", _source),
    }
    print(f"profile: {_PROFILE}; time: median [min-max] of {_ROUNDS} interleaved rounds")
    print("peak: VmHWM - VmRSS before, fresh process per cell (visus: + its render worker)")
    print("ratio: visus time / method time (<1: visus faster); quality vs full-res LANCZOS")
    print(
        f"{'source':22} {'method':6} {'time':>22} {'visus/x':>7} {'peak MB':>8} "
        f"{'SSIM':>6} {'PSNR':>6}  output"
    )
    only = os.environ.get("VISUS_BENCH_ONLY", "")
    with tempfile.TemporaryDirectory() as tmp:
        for label, (kind, make) in cases.items():
            if only and only.lower() not in label.lower():
                continue
            path = Path(tmp) / label.replace(" ", "_")
            data = make()
            path.write_bytes(data)
            methods = _methods(kind)
            timing = _run("time", kind, path, methods)
            mine = timing["visus"]
            assert isinstance(mine, dict)
            for m in methods:
                row = timing[m]
                assert isinstance(row, dict)
                peak = int(_run("memory", kind, path, [m])["peak"]) / 1e6  # type: ignore[call-overload]
                t = float(row["median"])
                cell = f"{t * 1000:6.0f} [{row['min'] * 1000:.0f}-{row['max'] * 1000:.0f}]ms"
                ratio = float(mine["median"]) / t if m != "visus" else 1.0
                ssim = f"{row['ssim']:.3f}" if row["ssim"] is not None else "-"
                psnr = f"{row['psnr']:.1f}" if row["psnr"] is not None else "-"
                out = (
                    f"{row['size'][0]}x{row['size'][1]} {row['bytes'] // 1024} KB"
                    if row["size"]
                    else "-"
                )
                name = f"{label} [{len(data) // 1024} KB]" if m == methods[0] else ""
                print(
                    f"{name:22} {m:6} {cell:>22} {ratio:6.2f}x {peak:8.1f} "
                    f"{ssim:>6} {psnr:>6}  {out}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
