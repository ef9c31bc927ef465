"""The view and read tools' contract: ``Perception``, ``Refusal``, ``Reach``.

``view`` turns a file (or bytes) into an image fitted for a model; ``read`` turns
a text file into numbered lines. Both return a typed refusal instead of raising.

Example:
    >>> import tempfile
    >>> from visus.perception import Reach, view
    >>> r = view("../etc/passwd", reach=Reach([tempfile.mkdtemp()]))
    >>> r.kind, r.reason
    ('refusal', 'outside_reach')
"""

from __future__ import annotations

from visus.perception.digest import DIGEST_SCHEME, is_digest_ref, match_digest, view_digest
from visus.perception.reach import Reach
from visus.perception.tools import (
    DEFAULT_MODEL,
    RegionArg,
    as_region,
    fetch_refusal,
    read,
    refusal_from,
    view,
)
from visus.perception.values import (
    REFUSAL_REASONS,
    Perception,
    ReadResult,
    Refusal,
    RefusalReason,
    content_digest,
)

__all__ = [
    "DEFAULT_MODEL",
    "DIGEST_SCHEME",
    "REFUSAL_REASONS",
    "Perception",
    "Reach",
    "ReadResult",
    "Refusal",
    "RefusalReason",
    "RegionArg",
    "as_region",
    "content_digest",
    "fetch_refusal",
    "is_digest_ref",
    "match_digest",
    "read",
    "refusal_from",
    "view",
    "view_digest",
]
