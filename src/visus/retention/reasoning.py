"""Reasoning an eviction already cost: not sent again.

A model that binds its reasoning to the prefix (Anthropic "Preserved thinking",
``ModelSpec.preserved_thinking``) checks each reasoning block sent back against
everything before it as it was when the block was made. An append-only history changes
that prefix only at an eviction: the request that evicts sends every block as it came,
the provider drops those made before the change point and after it (``drop_block``:
listed in ``input_transformations``, counted in ``Usage.reasoning_dropped``, reasoning
the model does again), and answers with a block made over the new prefix, which follows
the last block it kept. Sending the dropped blocks again on every later request would
have them dropped, and counted and redone, at every step until the next eviction; so
from the request after the eviction on they are left out (the assistant turn goes as the
record's text and calls), and the blocks the provider kept and the new ones stay one
unbroken run, as the reference server (:mod:`visus.reference.binding`) checks it.

Which blocks: an assistant message at record position ``p`` was answered to the request
that held the images before it; its block is stale when an image before it that was live
in that request has left since. The plan is the same pure arithmetic as the view
(:func:`visus.retention.plan_tool_images` over the images before ``p``), so this needs
no state: the same record gives the same answer on every surface.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import replace

from visus.record.messages import AssistantMessage, Message
from visus.retention.batches import ImageFate, Shown

__all__ = ["bound_reasoning", "drop_stale_reasoning", "leading_evicted", "sealed_reasoning"]

#: The fates of the first ``k`` tool images as the request holding only them planned.
Plan = Callable[[Sequence[Shown]], tuple[ImageFate, ...]]


def bound_reasoning(message: AssistantMessage) -> int:
    """The tokens of reasoning ``message`` holds bound to the prefix: its reply's output
    tokens when it carries reasoning items (its provider state) and its usage is known,
    else 0. Output tokens count the reasoning with the reply's visible text and calls
    (Anthropic and OpenAI bill thinking as output): a little more than an eviction
    drops, the side that keeps reasoning.

    Example:
        >>> from visus.record.messages import ProviderState, Usage
        >>> state = ProviderState("anthropic", "[]")
        >>> bound_reasoning(AssistantMessage(usage=Usage(10, 900), provider_state=state))
        900
        >>> bound_reasoning(AssistantMessage(usage=Usage(10, 900)))  # nothing bound
        0
    """
    state = message.provider_state
    if state is None or state.left_out or message.usage is None:
        return 0
    return message.usage.output_tokens


def sealed_reasoning(*sealed: object) -> int:
    """The reasoning tokens a reasoning item stands for, estimated from its sealed
    payloads (an Anthropic thinking block's ``signature`` or a redacted block's
    ``data``, which hold the full thinking encrypted, Bedrock's "Thinking encryption";
    a Responses reasoning item's encrypted content), where no usage says it: base64
    of about the plaintext's bytes, about four bytes a token, so ~3 tokens per 16
    characters. Other values count nothing.

    Example:
        >>> sealed_reasoning("A" * 16_000), sealed_reasoning(None, 7)
        (3000, 0)
    """
    return sum(len(s) * 3 // 16 for s in sealed if isinstance(s, str))


def leading_evicted(fates: Sequence[ImageFate]) -> int:
    """How many of the oldest images a plan evicted (an append-only plan evicts only a
    run of the oldest).

    Example:
        >>> leading_evicted([ImageFate("evicted"), ImageFate("live"), ImageFate("evicted")])
        1
    """
    n = 0
    for fate in fates:
        if fate.kind != "evicted":
            break
        n += 1
    return n


def drop_stale_reasoning(
    view: list[Message], image_at: Sequence[int], shown: Sequence[Shown], plan: Plan
) -> None:
    """Leave out, in place, the reasoning of the assistant messages of ``view`` whose
    blocks an earlier request already had dropped (module docstring). ``image_at`` is the
    view position of each tool image in ``shown`` (oldest first); ``plan`` plans the
    images of a shorter request.

    Example:
        >>> from visus.record.messages import ProviderState, ToolResult
        >>> said = AssistantMessage(provider_state=ProviderState("anthropic", "[]"))
        >>> shot = ToolResult("c", "view", ())
        >>> view: list[Message] = [shot, said, shot, said, shot, said, shot]
        >>> def plan(s):  # a request with three images or more evicts the oldest
        ...     return tuple(ImageFate("evicted" if len(s) >= 3 and i == 0 else "live")
        ...                  for i in range(len(s)))
        >>> drop_stale_reasoning(view, [0, 2, 4, 6], [Shown(d) for d in "abcd"], plan)
        >>> [view[p].provider_state.left_out for p in (1, 3, 5)]  # the third made after
        [True, True, False]
        >>> view = [shot, said, shot, said, shot]  # this request evicts the oldest
        >>> drop_stale_reasoning(view, [0, 2, 4], [Shown(d) for d in "abc"], plan)
        >>> [view[p].provider_state.invalidated for p in (1, 3)]
        [True, True]
    """
    said = [i for i, m in enumerate(view) if isinstance(m, AssistantMessage)]
    if not said or not shown:
        return
    memo: dict[int, int] = {}

    def evicted(count: int) -> int:  # the oldest evicted by the request with ``count``
        if count not in memo:
            memo[count] = leading_evicted(plan(shown[:count])) if count else 0
        return memo[count]

    # The previous request held the images before the latest assistant message.
    before = evicted(bisect.bisect_left(image_at, said[-1]))
    now = evicted(len(shown))
    for p in said:
        message = view[p]
        assert isinstance(message, AssistantMessage)
        state = message.provider_state
        if state is None or state.left_out:
            continue
        count = bisect.bisect_left(image_at, p)
        if min(before, count) > evicted(count) and p != said[-1]:
            state = replace(state, left_out=True)
        elif min(now, count) > evicted(count):
            state = replace(state, invalidated=True)  # by this request's eviction
        else:
            continue
        view[p] = replace(message, provider_state=state)
