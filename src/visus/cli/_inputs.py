"""What ``visus run`` takes in besides its options: the prompt, piped stdin, ``--image``.

Not a command module (the leading underscore keeps discovery away from it).

Example:
    >>> is_url("https://example.org/a.png"), is_url("photos/a.png")
    (True, False)
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from visus.agent import PastedImage
    from visus.media import Profile

__all__ = ["fitted_images", "is_url", "pasted_images", "prompt_and_stdin"]

#: The exit code of an input visus refused (``visus --help`` lists them all).
EXIT_REFUSED = 3


def is_url(text: str) -> bool:
    """Whether ``--image`` names a URL rather than a file."""
    return text.startswith(("https://", "http://"))


def _stdin() -> bytes:
    """What was piped on stdin (nothing when stdin is a terminal)."""
    stream = sys.stdin
    if stream is None or stream.isatty():
        return b""
    buffer = getattr(stream, "buffer", None)
    return bytes(buffer.read()) if buffer is not None else stream.read().encode()


def prompt_and_stdin(prompt: str | None) -> tuple[str, list[PastedImage]]:
    """The prompt and stdin combined as ``llm`` does: stdin alone is the prompt; with a
    prompt too, piped text comes first and piped binary (an image, a PDF) is attached."""
    from visus.agent import PastedImage
    from visus.cli._common import fail

    piped = _stdin()
    if not piped.strip():
        if prompt is None:
            fail("give a prompt, or pipe one on stdin (echo hi | visus run)")
        return prompt, []
    try:
        text = piped.decode("utf-8")
    except UnicodeDecodeError:
        text = "\x00"
    if "\x00" in text:  # not UTF-8, or valid UTF-8 but binary all the same
        if prompt is None:
            fail("stdin holds binary data (an image?): give a prompt to go with it")
        return prompt, [PastedImage(piped, filename="stdin")]
    text = text.strip()
    return (text if prompt is None else f"{text}\n\n{prompt}"), []


def _refused(reason: str, message: str) -> NoReturn:
    from visus.cli._common import fail

    fail(f"refused ({reason}): {message}", EXIT_REFUSED)


def _read(source: str) -> tuple[bytes, str]:
    """The bytes ``--image`` names and the name to paste them under: a file, or a URL
    fetched through :mod:`visus.net`'s SSRF gate (https, public addresses, size cap)."""
    from visus import limits

    if is_url(source):
        from visus.errors import NetError
        from visus.net import fetch
        from visus.perception import fetch_refusal

        try:
            data = fetch(source, max_bytes=limits.MAX_SOURCE_BYTES).data
        except NetError as e:
            refusal = fetch_refusal(source, e)  # what `visus view URL` says
            _refused(refusal.reason, refusal.message)
        return data, source.rsplit("/", 1)[-1].split("?", 1)[0] or "image"
    path = Path(source).expanduser()
    try:
        return path.read_bytes(), path.name
    except FileNotFoundError:
        _refused("not_found", f"--image {source} does not exist")
    except OSError as e:
        _refused("invalid_input", f"cannot read --image {source}: {e.strerror or e}")


def _kind(data: bytes, source: str) -> str:
    """What a file is from its header (raster, pdf, svg, text); exit 3 if no decoder
    visus depends on can read it."""
    from visus.errors import MediaError, TooLargeError
    from visus.media import probe

    try:
        return probe(data).kind
    except TooLargeError as e:
        _refused("too_large", f"--image {source} is too large: {e}")
    except MediaError as e:
        _refused("undecodable", f"--image {source} cannot be decoded as an image: {e}")


def pasted_images(sources: Sequence[str]) -> list[PastedImage]:
    """``--image`` values as pasted images; exit 3 on one that cannot be read or is a
    document (a PDF or text is for the agent's view tool, which pages it)."""
    from visus.agent import PastedImage

    out: list[PastedImage] = []
    for source in sources:
        data, name = _read(source)
        kind = _kind(data, source)
        if kind != "raster":
            _refused(
                "unsupported_type",
                f"{source} is a {kind} document, not an image: name it in the prompt for "
                f"the agent to view (visus run 'what is in {name}?'), or see it as a "
                f"model would with: visus view {source}",
            )
        out.append(PastedImage(data, filename=name))
    return out


def fitted_images(pasted: Sequence[PastedImage], profile: Profile) -> list[PastedImage]:
    """``pasted`` fitted for the model (``profile``), before the turn starts: an image no
    decoder reads whole (a truncated PNG) exits 3 with one line naming it, as ``visus
    view`` does, instead of failing the turn. The fitted bytes are what the agent would
    record; fitting them again leaves them as they are.
    """
    from dataclasses import replace

    from visus.errors import MediaError, TooLargeError
    from visus.media import fit

    out: list[PastedImage] = []
    for image in pasted:
        name = "stdin" if image.filename == "stdin" else f"--image {image.filename}"
        try:
            fitted = fit(image.data, profile)
        except TooLargeError as e:
            _refused("too_large", f"{name} is too large: {e}")
        except MediaError as e:
            detail = str(e).removeprefix("image could not be decoded: ")
            _refused("undecodable", f"{name} cannot be decoded (truncated or damaged): {detail}")
        out.append(replace(image, data=fitted.data, media_type=fitted.media_type))
    return out
