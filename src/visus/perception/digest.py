"""``view("sha256:<hex>")``: bring back an image already in a session's record.

Every image (or PDF) a record holds is a blob named by its sha256, so its digest is
a re-view reference that works for pasted images, attachments and tool results
alike. A ref is ``sha256:`` and the full lowercase hex digest, or an unambiguous
prefix of at least ``limits.DIGEST_MIN_PREFIX`` hex digits. Reach is the caller's
record: only digests in ``known`` (the session's own images) resolve, so one
session cannot see another's blobs even when they share a store.

Example:
    >>> known = ["ab" * 32, "cd" * 32]
    >>> match_digest("sha256:abababababab", known) == "ab" * 32
    True
    >>> is_digest_ref("sha256:abc"), is_digest_ref("shots/a.png")
    (True, False)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from visus import limits
from visus.errors import InvalidInputError, NotFoundError, VisusError
from visus.models import ModelSpec
from visus.perception.reach import Reach
from visus.perception.tools import DEFAULT_MODEL, RegionArg, view
from visus.perception.values import Perception, Refusal

__all__ = ["DIGEST_SCHEME", "is_digest_ref", "match_digest", "view_digest"]

#: What a digest ref starts with (case-insensitive).
DIGEST_SCHEME = "sha256:"

_HEX = re.compile(r"[0-9a-f]+")


def is_digest_ref(ref: object) -> bool:
    """Whether ``ref`` is meant as a digest (``sha256:...``), well formed or not."""
    return isinstance(ref, str) and ref[: len(DIGEST_SCHEME)].lower() == DIGEST_SCHEME


def match_digest(ref: str, known: Iterable[str]) -> str:
    """The one digest of ``known`` that ``ref`` names (full or prefix).

    Raises :class:`~visus.errors.InvalidInputError` for a malformed, too short or
    ambiguous ref and :class:`~visus.errors.NotFoundError` when none matches.
    """
    hex_part = ref[len(DIGEST_SCHEME) :].strip().lower()
    if not _HEX.fullmatch(hex_part) or len(hex_part) > 64:
        raise InvalidInputError(f"{ref!r} is not sha256: followed by hex digits")
    if len(hex_part) < limits.DIGEST_MIN_PREFIX:
        raise InvalidInputError(
            f"{ref!r} is too short: give at least {limits.DIGEST_MIN_PREFIX} hex digits"
        )
    found = sorted({d for d in known if d.startswith(hex_part)})
    if not found:
        raise NotFoundError(f"no image or document in this session has digest {ref}")
    if len(found) > 1:
        raise InvalidInputError(
            f"{ref!r} matches {len(found)} images of this session; give more hex digits"
        )
    return found[0]


def view_digest(
    ref: str,
    *,
    known: Iterable[str],
    load: Callable[[str], bytes],
    reach: Reach,
    model: str | ModelSpec = DEFAULT_MODEL,
    page: int | None = None,
    region: RegionArg | None = None,
) -> Perception | Refusal:
    """View the image (or PDF page) of the caller's record that ``ref`` names.

    ``known`` is the digests of the record's images and documents (the reach of a
    digest ref); ``load`` returns a blob's bytes (verified by the store). The
    perception's ``source`` is the full ``sha256:<hex>``, so re-viewing it again
    works however short the prefix was. ``region`` zooms into it (in the stored
    image's own pixels). Like :func:`~visus.perception.view` it never raises.

    Example:
        >>> import tempfile
        >>> r = view_digest("sha256:" + "0" * 12, known=[], load=bytes.fromhex,
        ...                 reach=Reach([tempfile.mkdtemp()]))
        >>> r.reason
        'not_found'
    """
    try:
        digest = match_digest(ref, known)
    except NotFoundError as e:
        return Refusal(
            "not_found",
            f"{e}. A digest ref names an image already in this conversation "
            "(elided images say which); call view with a path to see a file.",
            ref,
        )
    except VisusError as e:
        return Refusal("invalid_input", f"Cannot view {ref}: {e}", ref)
    try:
        data = load(digest)
    except VisusError as e:  # missing or damaged in the store: say so, never crash
        return Refusal("not_found", f"{ref} cannot be shown again: {e}", ref)
    return view(
        data,
        reach=reach,
        model=model,
        page=page,
        name=f"{DIGEST_SCHEME}{digest}",
        region=region,
    )
