"""Reasoning bound to its prefix, as the providers document it (the reference server's).

Newer models sign each reasoning block they return over everything before it
(Anthropic "Preserved thinking" and "Prefix checks on thinking blocks"; OpenAI "Keep the
prefix unchanged"). A block sent back later is checked against the request it comes
back in:

- The signature must be one this server made, over this very block (a changed
  ``thinking`` text or a made-up signature): otherwise always a 400, whatever the
  request asks (Anthropic: "A tampered or undecryptable signature is a different
  failure. It always returns a 400").
- The model must read the producer's blocks (its own, and a listed few): otherwise the
  block is dropped without an error (``model_binding_mismatch``).
- Its prefix (top-level ``system``, ``tools``, every earlier message and the content
  before it in its own turn, compared as JSON values with ``cache_control`` markers left
  out; earlier reasoning blocks are not part of it) must be what it was when the block
  was made, and the blocks kept must be an unbroken run of the original sequence:
  blocks may go from the start or the end, not from between others, and one left out
  may not come back. Each block is checked against its own prefix and its own
  predecessor: a failing block is not kept, so every later block made before the
  change fails with it (its prefix holds the change, or its predecessor is gone), while
  a block the model made after the change, following the blocks kept then, stays
  valid (Anthropic "Prefix checks on thinking blocks").

What a failure costs is the caller's mode (:data:`Mode`): ``error`` (Anthropic's default
on new accounts: a 400 naming the first failing block), ``drop`` (``drop_block``, and
OpenAI's newer models: the failing blocks are left out and listed), ``record`` (an older
account with the beta header: each failing block is listed, and kept), ``off`` (a model
that does not run the check).

What reasoning costs (the reference's own model; the providers document only that a
dropped block's reasoning is lost and the model "may have to redo" it, at a cost in
tokens): each block's signature records two counts. ``tokens`` is what the block holds
(the reply's own reasoning plus any reasoning it redid), billed as input while the block
is kept. ``own`` is the reasoning the reply did for itself (its effort's tokens): a
block left out by the check costs that much again, as output of the reply, in every
request it is dropped from. The redo a block carries is not billed again when the block
is dropped, because the blocks it redid are billed themselves wherever they are
dropped; counting both made a block resent and dropped at every request cost twice
what the one before it did (a client that keeps resending dropped blocks paid
exponentially, ``benchmarks/RESULTS.md`` "economics").

Example:
    >>> spec_free = ModelSpec(name="m", provider="anthropic")
    >>> token, _ = mint(spec_free, prefix(HEAD, []), 12, previous=None, count=0)
    >>> v = judge(HEAD, [Item("messages.1.content.0", None, token, "")], spec_free, "error")
    >>> v.kept_tokens, v.dropped
    (12, ())
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias

from visus.models.spec import ModelSpec
from visus.reference.fingerprint import fingerprint

__all__ = [
    "BINDING_BETA",
    "DISPLAY_BETA",
    "HEAD",
    "Item",
    "Mode",
    "Signed",
    "Tampered",
    "Verdict",
    "judge",
    "mint",
    "prefix",
    "reasoning_tokens",
]

#: The Anthropic beta that adds ``thinking.block_binding`` and ``input_transformations``.
BINDING_BETA = "thinking-binding-controls-2026-08-01"
#: The Anthropic beta that allows ``thinking.display: "updates"``.
DISPLAY_BETA = "thinking-display-updates-2026-08-18"

#: What a failed prefix check does (module docstring).
Mode: TypeAlias = Literal["error", "drop", "record", "off"]

_MARKERS = frozenset({"cache_control"})

#: An empty head (no system, no tools): the doctests' and simple callers' prefix start.
HEAD: Mapping[str, object] = {}

#: This process's signing key: a block is valid on the server process that made it.
_KEY = os.urandom(32)

#: Reasoning tokens the reference model spends on a reply, by effort (its own numbers,
#: not a provider's: enough to make kept and dropped reasoning visible in usage).
_EFFORT_TOKENS = {"low": 16, "medium": 48, "high": 96, "xhigh": 160, "max": 256}


def reasoning_tokens(effort: object) -> int:
    """The reasoning tokens a reply spends at ``effort`` (medium when not one of them).

    Example:
        >>> reasoning_tokens("low"), reasoning_tokens(None)
        (16, 48)
    """
    return _EFFORT_TOKENS.get(effort, 48) if isinstance(effort, str) else 48


def _canonical(value: object) -> bytes:
    """``value``'s fingerprint without ``cache_control`` markers (never part of the
    prefix): "JSON formatting and key order don't matter; the values do" (Preserved
    thinking, FAQ); :mod:`visus.reference.fingerprint`."""
    return fingerprint(value, skip=_MARKERS)


class _Prefix:
    """A running hash of a request's prefix: the head, then each non-reasoning item."""

    def __init__(self, head: Mapping[str, object]) -> None:
        self._hash = hashlib.sha256(_canonical(dict(head)))

    def add(self, value: object) -> None:
        self._hash.update(b"\x1e" + _canonical(value))

    def digest(self) -> str:
        return self._hash.copy().hexdigest()[:32]


def prefix(head: Mapping[str, object], values: Sequence[object]) -> str:
    """The digest of a prefix: ``head`` then ``values`` (content, no reasoning) in order.

    Example:
        >>> prefix(HEAD, [{"a": 1, "cache_control": {}}]) == prefix(HEAD, [{"a": 1}])
        True
    """
    running = _Prefix(head)
    for v in values:
        running.add(v)
    return running.digest()


@dataclass(frozen=True, slots=True)
class Signed:
    """What a reasoning block's signature records."""

    model: str
    prefix: str
    previous: str | None
    count: int
    tokens: int
    text: str
    id: str
    #: The reasoning the block's own reply did (``tokens`` less the redo it carries).
    own: int


def mint(
    spec: ModelSpec,
    digest: str,
    tokens: int,
    *,
    previous: str | None,
    count: int,
    text: str = "",
    own: int | None = None,
) -> tuple[str, str]:
    """A signature for a new reasoning block, and the block's id: made by ``spec``'s
    model, after the prefix ``digest``, following block ``previous`` (the last one kept
    in the request, of ``count``), holding ``tokens`` reasoning tokens of which ``own``
    (all of them when None) are the reply's own rather than redone, showing ``text``."""
    block_id = secrets.token_hex(8)
    record = {
        "m": spec.name,
        "p": digest,
        "q": previous,
        "n": count,
        "k": tokens,
        "o": tokens if own is None else own,
        "t": hashlib.sha256(text.encode()).hexdigest()[:16],
        "i": block_id,
    }
    body = base64.urlsafe_b64encode(json.dumps(record, separators=(",", ":")).encode())
    mac = hmac.new(_KEY, body, hashlib.sha256).hexdigest()[:32]
    return f"{body.decode()}.{mac}", block_id


def _open(token: object) -> Signed | None:
    if not isinstance(token, str) or token.count(".") != 1:
        return None
    body, mac = token.split(".")
    expected = hmac.new(_KEY, body.encode(), hashlib.sha256).hexdigest()[:32]
    if not hmac.compare_digest(mac, expected):
        return None
    try:
        r = json.loads(base64.urlsafe_b64decode(body.encode()))
        return Signed(
            str(r["m"]),
            str(r["p"]),
            r["q"],
            int(r["n"]),
            int(r["k"]),
            str(r["t"]),
            str(r["i"]),
            int(r["o"]),
        )
    except (ValueError, KeyError, TypeError):
        return None


@dataclass(frozen=True, slots=True)
class Item:
    """One item of a request, in order: content (``value``, part of the prefix) or a
    reasoning block (``token``: its signature, data or encrypted content; ``text``: the
    thinking text it shows, None where the wire has none)."""

    path: str
    value: object
    token: str | None = None
    text: str | None = None

    @property
    def reasoning(self) -> bool:
        return self.token is not None


class Tampered(Exception):
    """A reasoning block this server did not make as it is: always a 400."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the check decided for one request."""

    #: Paths of blocks left out, with why (``prefix_binding_mismatch``,
    #: ``model_binding_mismatch``), in request order.
    dropped: tuple[tuple[str, str], ...] = ()
    #: Paths of blocks that fail the prefix check but were let through (mode ``record``).
    allowed: tuple[str, ...] = ()
    #: The first block that failed the prefix check (mode ``error`` raises on it).
    failed: str | None = None
    #: Reasoning tokens of the blocks kept (what they hold, billed as input) and
    #: dropped (each block's own reasoning, done again: module docstring).
    kept_tokens: int = 0
    dropped_tokens: int = 0
    #: The last block kept and how many were kept: a new block follows them.
    last: str | None = None
    count: int = 0
    #: Each kept block's path and reasoning tokens (its share of the prompt).
    kept: tuple[tuple[str, int], ...] = ()


def _readable(spec: ModelSpec, producer: str) -> bool:
    return producer == spec.name or producer in spec.reads_reasoning_of


def _checks(signed: Signed, digest: str, last: str | None, count: int) -> bool:
    """The prefix check of one block: same prefix, and an unbroken run of the original
    blocks (the one before it kept, unless it is the first kept; no block put back)."""
    in_run = count == 0 or signed.previous == last
    return signed.prefix == digest and in_run and count <= signed.count


def judge(
    head: Mapping[str, object], items: Sequence[Item], spec: ModelSpec, mode: Mode
) -> Verdict:
    """Check every reasoning block of a request (module docstring); raises
    :class:`Tampered` on a block this server did not make as it is."""
    running = _Prefix(head)
    dropped: list[tuple[str, str]] = []
    allowed: list[str] = []
    failed: str | None = None
    kept = lost = count = 0
    last: str | None = None
    paths: list[tuple[str, int]] = []
    for item in items:
        if not item.reasoning:
            running.add(item.value)
            continue
        signed = _open(item.token)
        shown = hashlib.sha256((item.text or "").encode()).hexdigest()[:16]
        if signed is None or (item.text is not None and shown != signed.text):
            raise Tampered(item.path)
        if not _readable(spec, signed.model):
            dropped.append((item.path, "model_binding_mismatch"))
            lost += signed.own
            continue
        ok = mode == "off" or _checks(signed, running.digest(), last, count)
        if not ok and failed is None:
            failed = item.path
        if not ok and mode in ("error", "drop"):
            # Each block against the prefix and predecessor it was made with, not "every
            # block after the first failure". Anthropic, "Prefix checks on thinking
            # blocks" (platform.claude.com/docs/en/build-with-claude/preserved-thinking/
            # prefix-checks): "A prefix check fails if `system`, `tools`, or an earlier
            # message changed after Claude produced a block. It also fails if a thinking
            # block between others was left out or moved." Its figure note (read in the
            # stored zh-CN edition; our translation): a change invalidates only the
            # thinking already after it; thinking before it, and thinking Claude produces
            # after it, stays valid. "Preserved thinking", How it works (zh-CN/zh-TW
            # editions, translated): each thinking block records its predecessor across
            # turns; removing one from the middle invalidates every thinking block after
            # it. So a failing block never becomes the run's last: a later block that
            # followed it fails its chain (or its prefix), one made after the change
            # recorded the block kept before it and passes.
            dropped.append((item.path, "prefix_binding_mismatch"))
            lost += signed.own
            continue
        if not ok:
            allowed.append(item.path)
        kept += signed.tokens
        paths.append((item.path, signed.tokens))
        last, count = signed.id, count + 1
    return Verdict(tuple(dropped), tuple(allowed), failed, kept, lost, last, count, tuple(paths))
