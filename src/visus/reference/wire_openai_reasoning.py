"""Reasoning items on the reference server's Responses wire, as OpenAI documents them.

A reasoning model (catalog ``reasoning``) starts its output with a ``reasoning`` item.
Its content travels back in one of two ways: encrypted in the item (``include:
["reasoning.encrypted_content"]``, what a stateless caller with ``store: false`` must
ask for), or by ``id`` when the response was stored (``store`` is true unless set
false). An item sent back that carries neither is refused as the API refuses it ("Item
with id '...' not found. Items are not persisted when `store` is set to false.").

On the newer frontier models (catalog ``preserved_thinking``: OpenAI "Keep the prefix
unchanged", "Preserved reasoning") each item is bound to the conversation before it
(``instructions``, ``tools``, ``text``, every earlier input item): after a change there,
the API "will drop reasoning items that follow a prefix change"; the request still
succeeds, the dropped items are not billed, and the model "may have to redo some
reasoning", which shows in ``output_tokens_details.reasoning_tokens``
(:mod:`visus.reference.binding`).

Example:
    >>> _summary({"reasoning": {"summary": "auto"}})
    [{'type': 'summary_text', 'text': 'Reading what the request holds before answering.'}]
"""

from __future__ import annotations

import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from visus.models.spec import ModelSpec
from visus.reference.binding import (
    Item,
    Mode,
    Tampered,
    Verdict,
    judge,
    mint,
    prefix,
    reasoning_tokens,
)

__all__ = ["check", "effort", "output_item", "pair_calls", "reasoning_items", "require_pairs"]

#: What the wire raises for a refused request: (message, param) -> exception.
Refuse = Callable[[str, str], Exception]

_SUMMARY_TEXT = "Reading what the request holds before answering."
#: Reasoning of stored responses, by item id (bounded: the oldest go first).
_STORED: OrderedDict[str, str] = OrderedDict()
_STORED_MAX = 4096
_LOCK = threading.Lock()
#: Each function_call item id this server gave out with a reasoning item: that item's id.
_PAIRED: OrderedDict[str, str] = OrderedDict()


def effort(body: Mapping[str, Any]) -> str | None:
    """``reasoning.effort`` as sent, if any."""
    reasoning = body.get("reasoning")
    value = reasoning.get("effort") if isinstance(reasoning, dict) else None
    return value if isinstance(value, str) else None


def _summary(body: Mapping[str, Any]) -> list[dict[str, str]]:
    reasoning = body.get("reasoning")
    wanted = reasoning.get("summary") if isinstance(reasoning, dict) else None
    return [{"type": "summary_text", "text": _SUMMARY_TEXT}] if wanted else []


def reasoning_items(body: Mapping[str, Any], refuse: Refuse) -> tuple[dict[str, Any], list[Item]]:
    """The request as the prefix check reads it: ``instructions``, ``tools`` and ``text``
    as the head, then each input item; reasoning items carry their encrypted content
    (or, stored, what their id names)."""
    head = {k: body.get(k) for k in ("instructions", "tools", "text")}
    raw = body.get("input")
    seq = [{"role": "user", "content": raw}] if isinstance(raw, str) else raw or []
    out: list[Item] = []
    for i, item in enumerate(seq if isinstance(seq, list) else []):
        path = f"input[{i}]"
        if not (isinstance(item, dict) and item.get("type") == "reasoning"):
            out.append(Item(path, item))
            continue
        token = item.get("encrypted_content")
        if not isinstance(token, str) or not token:
            with _LOCK:
                token = _STORED.get(str(item.get("id")))
        if token is None:
            raise refuse(
                f"Item with id '{item.get('id')}' not found. Items are not persisted when "
                "`store` is set to false. Try again with `store` set to true, or remove this "
                "item from your input.",
                path,
            )
        out.append(Item(path, None, token))
    return head, out


def check(
    head: Mapping[str, object], items: list[Item], spec: ModelSpec, refuse: Refuse
) -> Verdict:
    """Judge the request's reasoning items: reasoning after a changed prefix is dropped
    on the models that bind it (no error); content this server did not encrypt is a 400."""
    mode: Mode = "drop" if spec.preserved_thinking else "off"
    try:
        return judge(head, items, spec, mode)
    except Tampered as e:
        raise refuse(
            "The encrypted content for this reasoning item could not be verified.", e.path
        ) from None


def output_item(
    body: Mapping[str, Any],
    spec: ModelSpec,
    verdict: Verdict,
    head: Mapping[str, object],
    items: list[Item],
) -> tuple[dict[str, Any] | None, int]:
    """The reply's reasoning item (None on a model that does not reason) and the
    reasoning tokens it spent, reasoning the request lost done again included."""
    if not spec.reasoning:
        return None, 0
    own = reasoning_tokens(effort(body))
    spent = own + verdict.dropped_tokens  # an item dropped later costs ``own`` again
    digest = prefix(head, [i.value for i in items if not i.reasoning])
    token, block_id = mint(spec, digest, spent, previous=verdict.last, count=verdict.count, own=own)
    item: dict[str, Any] = {"type": "reasoning", "id": f"rs_{block_id}{secrets.token_hex(4)}"}
    item["summary"] = _summary(body)
    include = body.get("include")
    if isinstance(include, list) and "reasoning.encrypted_content" in include:
        item["encrypted_content"] = token
    if body.get("store", True) is not False:
        with _LOCK:
            _STORED[item["id"]] = token
            while len(_STORED) > _STORED_MAX:
                _STORED.popitem(last=False)
    return item, spent


def pair_calls(output: list[dict[str, Any]]) -> None:
    """Remember which reasoning item each of a reply's function calls came with."""
    reasoning = next((o["id"] for o in output if o.get("type") == "reasoning"), None)
    if reasoning is None:
        return
    with _LOCK:
        for o in output:
            if o.get("type") == "function_call":
                _PAIRED[str(o["id"])] = str(reasoning)
        while len(_PAIRED) > _STORED_MAX:
            _PAIRED.popitem(last=False)


def require_pairs(body: Mapping[str, Any], refuse: Refuse) -> None:
    """A function_call item sent back with the item id a reasoning reply gave it needs
    that reply's reasoning item in the input too, as the API answers otherwise
    ("Item 'fc_...' of type 'function_call' was provided without its required
    'reasoning' item: 'rs_...'", seen on gpt-5.5, cline issue #12242); a call without
    an item id (only its call_id) needs none."""
    raw = body.get("input")
    seq = raw if isinstance(raw, list) else []
    sent = {i.get("id") for i in seq if isinstance(i, dict) and i.get("type") == "reasoning"}
    for n, item in enumerate(seq):
        if not (isinstance(item, dict) and item.get("type") == "function_call"):
            continue
        with _LOCK:
            needed = _PAIRED.get(str(item.get("id")))
        if needed is not None and needed not in sent:
            raise refuse(
                f"Item '{item.get('id')}' of type 'function_call' was provided without its "
                f"required 'reasoning' item: '{needed}'.",
                f"input[{n}]",
            )
