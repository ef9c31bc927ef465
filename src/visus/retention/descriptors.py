"""The text an image becomes when it leaves the live window, or repeats a live one.

Short and byte-stable: a long run carries one per step, read again at every later step,
and a descriptor depends only on its part and turn, so it is the same bytes every time
it is sent (prompt caches keep hitting). It names one digest, the image's own.
"""

from __future__ import annotations

import json

from visus import limits
from visus.record.messages import AttachmentOrigin, DocumentPart, ImagePart

__all__ = ["elided_descriptor", "repeat_descriptor"]


def _short(digest: str) -> str:
    return f"sha256:{digest[: limits.DESCRIPTOR_DIGEST_CHARS]}"


def elided_descriptor(part: ImagePart | DocumentPart, turn: int) -> str:
    """The text an image (or document) becomes once it leaves the live window.

    A tool image names the one digest that shows exactly it again (``view`` takes a
    digest prefix; a path may hold other bytes by now) and nothing else: its call and
    the view's own line beside it (:meth:`~visus.perception.Perception.describe`) say
    what it was, and a long run carries one descriptor per step, read again at every
    later step. A pasted image says what and when, since no call of the model's made
    it. A document names the call that re-creates it. The text depends only on the
    part and its turn, so it never changes between boundary moves (prompt caches keep
    hitting).

    Example:
        >>> from visus.record.messages import PerceptionOrigin
        >>> shot = ImagePart("ab" * 32, "image/png", 10, 64, 64,
        ...                  PerceptionOrigin("r.pdf", tool="view", page=3))
        >>> elided_descriptor(shot, 2)
        '[image elided: call view("sha256:abababababababab") to see it again]'
        >>> doc = DocumentPart("ab" * 32, "application/pdf", 10, 4,
        ...                    PerceptionOrigin("r.pdf", tool="fetch_pdf"))
        >>> print(elided_descriptor(doc, 2))
        [document elided: r.pdf (4 pages) in turn 2; call fetch_pdf("r.pdf") to see it again]
        >>> pasted = ImagePart("ab" * 32, "image/png", 10, 64, 64, AttachmentOrigin("cat.png"))
        >>> elided_descriptor(pasted, 1).split(";")[0]
        '[image elided: cat.png pasted in turn 1'
    """
    origin = part.origin
    if isinstance(origin, AttachmentOrigin):
        what = "image" if isinstance(part, ImagePart) else "document"
        name = f"{origin.filename} " if origin.filename else ""
        pages = f" ({part.page_count} pages)" if isinstance(part, DocumentPart) else ""
        page_arg = ", page=N" if isinstance(part, DocumentPart) else ""
        return (
            f"[{what} elided: {name}pasted{pages} in turn {turn}; "
            f'call view("{_short(part.digest)}"{page_arg}) to see it again]'
        )
    if isinstance(part, DocumentPart):
        args = json.dumps(origin.source, ensure_ascii=False)
        return (
            f"[document elided: {origin.source} ({part.page_count} pages) in turn {turn}; "
            f"call {origin.tool}({args}) to see it again]"
        )
    # No digest: a web image a framework passed by URL, which view fetches again.
    ref = _short(part.digest) if part.digest else origin.source
    return f"[image elided: call view({json.dumps(ref, ensure_ascii=False)}) to see it again]"


def repeat_descriptor(part: ImagePart, turn: int) -> str:
    """The text an image becomes when a live image has the same bytes (a screen that did
    not change): it names that image's digest, which is its own.

    Example:
        >>> from visus.record.messages import PerceptionOrigin
        >>> shot = ImagePart("ab" * 32, "image/png", 10, 64, 64, PerceptionOrigin("s.png"))
        >>> repeat_descriptor(shot, 4)
        '[image unchanged: the same pixels as sha256:abababababababab, shown earlier]'
    """
    if isinstance(part.origin, AttachmentOrigin):
        what = f"{part.origin.filename or 'image'} pasted in turn {turn}: "
    else:
        what = ""
    same = _short(part.digest) if part.digest else "an image"
    return f"[image unchanged: {what}the same pixels as {same}, shown earlier]"
