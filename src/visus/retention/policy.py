"""How much of a record keeps its pixels: :class:`RetentionPolicy` (the knobs are
described in :mod:`visus.retention`'s docstring)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType

from visus import limits
from visus.errors import InvalidInputError
from visus.models.prices import relative_prices
from visus.models.spec import ModelSpec
from visus.retention.batches import Ceiling, Hold, ImageFate, Shown, evicted_over, plan_images

__all__ = [
    "APPEND_ONLY_FAMILIES",
    "AppendOnly",
    "RetentionPolicy",
    "plan_tool_images",
    "policy_for",
]


@dataclass(frozen=True, slots=True)
class AppendOnly:
    """How an append-only history sheds images, for one model family: past ``tokens``
    of live tool images (the break-even measured for the family) the oldest ``share``
    of what fits leaves in one batch."""

    tokens: int
    share: float


#: The append-only break-even of each family of models that bind their reasoning to the
#: prefix, by a part of the model id (Bedrock and Vertex ids and dated snapshots contain
#: it too; the first part an id contains decides), chosen by ``python -m benchmarks
#: economics`` (benchmarks/RESULTS.md "economics", "The accounting fixed, every strategy
#: to 300 steps" and "Every binding family measured", 2026-11-29): on Sonnet 5.5 and
#: Opus 5.5 (cache reads 0.05x input, writes 1.25x) an eviction rewrites what stays live
#: after it, so it pays when little stays: the oldest 90% leave. Append-only with a
#: history of up to 10k image tokens (1-5 screenshots of 1568x980 live) cost least at 100
#: and 300 steps of the break-evens measured (Opus: 6k $1.275 / $3.716, 10k $1.257 /
#: $3.674, 20k $1.401 / $4.505, 40k $1.625 / $5.345, 200k with half leaving $2.284 /
#: $12.802; hermes-agent $2.284 / $63.223), and sees about as many screens as the count
#: window of the other families. Each eviction drops the reasoning since the one before
#: (each block once over a run, whatever the break-even); measured with the reference's
#: 48 reasoning tokens a reply, an early eviction stops paying within 100 steps if a
#: reply reasons more than ~530 tokens. Every catalog model that binds is listed (Claude
#: 5.5, Fable 5.x, Mythos 5.2, GPT-5.6, GPT-6.x), each family measured on its own prices
#: (RESULTS.md "Every binding family measured", with the first eviction's reasoning hold):
#: the Claude families keep 10k; on the GPT families 6k cost least (4k and 8k dearer on
#: gpt-6.1-sol), 1-4 screenshots live. An id no part matches (a future family, taken by
#: its nearest listed model) takes ``limits.RETENTION_APPEND_ONLY_TOKENS``/``_SHARE``.
#: Dollars at steps 100 / 300 (300-step runs, the reference's 48 reasoning tokens a reply):
APPEND_ONLY_FAMILIES: Mapping[str, AppendOnly] = MappingProxyType(
    {
        "claude-opus-5": AppendOnly(10_000, 0.9),
        "claude-sonnet-5": AppendOnly(10_000, 0.9),
        # Haiku 5.5, 10k/0.9 $0.037 / $0.112 against the fallback's $0.089 / $0.301.
        "claude-haiku-5": AppendOnly(10_000, 0.9),
        # Fable 5.2: 10k/0.9 $2.305 / $6.566; 6k/0.9 $2.384 / $6.760; 20k/0.9 $2.469 /
        # $7.950; the fallback (60k/0.5) $4.007 / $14.557; hermes-agent $3.108 /
        # $116.385; Claude Code's rule $4.376 / $28.509. Fable 5.1's list prices are
        # 5.2's times 1.25 on every part (input, output, cache reads and writes): the
        # same order.
        "claude-fable-5": AppendOnly(10_000, 0.9),
        # Mythos 5.2: Fable 5.2's prices on every part, its thinking and cache minimum:
        # Fable 5.2's figures.
        "claude-mythos-5": AppendOnly(10_000, 0.9),
        # GPT-5.6 (sol, terra, luna: cache reads 0.1x input), gpt-5.6-sol: 6k/0.9
        # $1.192 / $3.721; 10k/0.9 $1.229 / $3.906; the fallback $2.782 / $9.744.
        "gpt-5.6": AppendOnly(6_000, 0.9),
        # GPT-6 and 6.1 (astra, sol, terra, luna: this part is in every gpt-6.x id and
        # in no other catalog id). gpt-6.1-sol (cache reads 0.05x): 4k/0.9 $0.528 /
        # $1.563; 6k/0.9 $0.516 / $1.545; 8k/0.9 $0.517 / $1.556; 10k/0.9 $0.518 /
        # $1.573; 20k/0.9 $0.566 / $1.730; the fallback $1.000 / $3.433; hermes-agent
        # $0.878 / $25.941; Claude Code's rule $1.219 / $13.731. gpt-6-sol (reads
        # 0.1x): 6k/0.9 $0.596 / $1.860; 10k/0.9 $0.615 / $1.952; the fallback $1.391 /
        # $4.872. After the Responses fix (no reasoning redone after an eviction,
        # RESULTS.md "Every binding family measured"), gpt-6.1-sol: 2k-3k/0.9 (one
        # screenshot live) $0.340 / $1.018; 4k $0.356 / $1.067; 6k $0.364 / $1.093; 8k
        # $0.383 / $1.154; 10k $0.395 / $1.194. 6k stays: within 7% of one screenshot
        # live, it keeps up to three in view, as the other families' windows do.
        "gpt-6": AppendOnly(6_000, 0.9),
    }
)


def _family(model: ModelSpec | None) -> AppendOnly:
    name = model.name if model is not None else ""
    for part, chosen in APPEND_ONLY_FAMILIES.items():
        if part in name:
            return chosen
    return AppendOnly(limits.RETENTION_APPEND_ONLY_TOKENS, limits.RETENTION_APPEND_ONLY_SHARE)


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """How much of the record keeps its pixels. See :mod:`visus.retention` for each knob.

    Example:
        >>> p = RetentionPolicy(live_turns=2, chunk=4)
        >>> [p.first_live_turn(t) for t in (2, 3, 5, 6, 9, 10, 13)]
        [1, 1, 1, 5, 5, 9, 9]
        >>> RetentionPolicy(live_images=8).image_batch  # the window leaves whole
        8
        >>> RetentionPolicy(live_images=8, image_chunk=2).image_batch
        2
    """

    live_turns: int = 1
    chunk: int = 1
    image_token_budget: int | None = None
    #: Turns an attached (pasted) image keeps its pixels; ``None``: forever.
    attachments_live_turns: int | None = limits.RETENTION_ATTACHMENTS_LIVE_TURNS
    #: Distinct tool images live at most (the newest); ``None``: bounded by turns alone.
    live_images: int | None = limits.RETENTION_LIVE_IMAGES
    #: Images that leave together when ``live_images`` is passed; ``None``: the whole
    #: window but the newest. A larger number than ``live_images`` counts as it.
    image_chunk: int | None = None
    #: Keep the history append-only: no turn or count window; images leave only at a
    #: ceiling (:meth:`ceiling`), the oldest in one batch. ``None``: the model decides
    #: (those that bind their reasoning to the prefix, ``ModelSpec.preserved_thinking``).
    append_only: bool | None = None
    #: Append-only: the live image tokens past which the oldest leave (the break-even);
    #: ``None``: the model family's, measured (:data:`APPEND_ONLY_FAMILIES`).
    append_tokens: int | None = None
    #: Append-only: the share of what fits that leaves at a ceiling; ``None``: the
    #: model family's.
    append_share: float | None = None
    #: Otherwise: the share of what fits that leaves at a provider's limit.
    limit_share: float = limits.RETENTION_LIMIT_SHARE
    #: Append-only: the first eviction past the break-even waits until the reads the
    #: images cost cover the reasoning it would drop (:class:`~visus.retention.batches.
    #: Hold`). Off by default: measured (benchmarks/RESULTS.md "Weighing the reasoning
    #: an eviction drops"), it is the cheaper choice only for runs that end before
    #: ~100 steps with replies reasoning ~800 tokens or more, and up to 43% dearer at
    #: 300 steps; evicting at the break-even is never more than 21% above the cheapest.
    weigh_reasoning: bool = False

    def __post_init__(self) -> None:
        optional = ("attachments_live_turns", "live_images", "image_chunk", "append_tokens")
        for name in ("live_turns", "chunk", *optional):
            value = getattr(self, name)
            if value is None and name in optional:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInputError(f"retention {name} must be an integer >= 1, got {value!r}")
        budget = self.image_token_budget
        if budget is not None and (
            isinstance(budget, bool) or not isinstance(budget, int) or budget < 0
        ):
            raise InvalidInputError(
                f"retention image_token_budget must be an integer >= 0 or None, got {budget!r}"
            )
        for name in ("append_share", "limit_share"):
            share = getattr(self, name)
            if share is None and name == "append_share":
                continue
            if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 1:
                raise InvalidInputError(f"retention {name} must be in (0, 1], got {share!r}")

    @property
    def image_batch(self) -> int:
        """Images that leave together: ``image_chunk`` (else the window), at most
        ``live_images``."""
        cap = self.live_images
        chunk = self.image_chunk if self.image_chunk is not None else (cap or 1)
        return chunk if cap is None else min(chunk, cap)

    @property
    def share(self) -> float:
        """The share of what fits that leaves at a ceiling."""
        if not self.append_only:
            return self.limit_share
        return self.append_share if self.append_share is not None else _family(None).share

    def for_model(self, model: ModelSpec | None) -> RetentionPolicy:
        """This policy with what it left to the model decided for ``model``: whether the
        history is append-only (models that bind their reasoning to the prefix), and
        then the family's break-even and batch share (:data:`APPEND_ONLY_FAMILIES`).

        Example:
            >>> from visus.models import get_model
            >>> RetentionPolicy().for_model(get_model("claude-opus-5-5")).append_only
            True
            >>> RetentionPolicy().for_model(get_model("claude-sonnet-4-6")).append_only
            False
        """
        append_only = self.append_only
        if append_only is None:
            append_only = bool(model is not None and model.preserved_thinking)
        family = _family(model)
        tokens = self.append_tokens if self.append_tokens is not None else family.tokens
        share = self.append_share if self.append_share is not None else family.share
        same = (self.append_only, self.append_tokens, self.append_share)
        if (append_only, tokens, share) == same:
            return self
        return replace(self, append_only=append_only, append_tokens=tokens, append_share=share)

    def ceiling(self, model: ModelSpec | None) -> Ceiling:
        """What the live tool images may come to whatever the windows: the model's
        images per request and a share of its context (``limits.RETENTION_CONTEXT_SHARE``).
        """
        if model is None:
            return Ceiling()
        tokens = int(model.context_tokens * limits.RETENTION_CONTEXT_SHARE)
        return Ceiling(images=model.max_images, image_tokens=tokens)

    def hold(self, model: ModelSpec | None) -> Hold | None:
        """Append-only: the break-even (``append_tokens``, the family's when unset)
        past which images leave; with ``weigh_reasoning``, the first time only once the
        reads they cost cover the reasoning leaving drops, priced for ``model``
        (:class:`~visus.retention.batches.Hold`). None for a history with windows.

        Example:
            >>> from visus.models import get_model
            >>> opus = get_model("claude-opus-5-5")
            >>> RetentionPolicy().for_model(opus).hold(opus)  # reasoning priced at nothing
            Hold(tokens=10000, read=0.05, redo=0.0)
            >>> RetentionPolicy(weigh_reasoning=True).for_model(opus).hold(opus)
            Hold(tokens=10000, read=0.05, redo=5.0)
        """
        if not self.append_only:
            return None
        tokens = self.append_tokens or _family(model).tokens
        if model is None:
            return Hold(tokens)
        read, redo = relative_prices(model)
        return Hold(tokens, read, redo if self.weigh_reasoning else 0.0)

    def first_live_turn(self, current: int) -> int:
        """The earliest turn whose images stay live when ``current`` is the latest turn
        (append-only: 1, images leave only at a ceiling)."""
        if self.append_only:
            return 1
        return max(1, ((current - self.live_turns) // self.chunk) * self.chunk + 1)

    def first_live_attachment_turn(self, current: int) -> int:
        """The earliest turn whose attachments stay live (1 when they never leave).

        Example:
            >>> RetentionPolicy(attachments_live_turns=3).first_live_attachment_turn(10)
            8
            >>> RetentionPolicy(attachments_live_turns=None).first_live_attachment_turn(10)
            1
        """
        keep = self.attachments_live_turns
        if keep is None or self.append_only:
            return 1
        return max(1, ((current - keep) // self.chunk) * self.chunk + 1)


def plan_tool_images(
    images: Sequence[Shown],
    policy: RetentionPolicy,
    *,
    model: ModelSpec | None = None,
    ceiling: Ceiling | None = None,
) -> tuple[ImageFate, ...]:
    """The fate of each tool image a request carries (oldest first, those the turn
    window keeps) under ``policy`` resolved for ``model``: the count window (not for an
    append-only history), then the ceiling (the policy's for the model, tightened by a
    provider's ``ceiling``: images per request, request bytes) met by one batch.

    The one plan every surface applies: the agent's :func:`model_view`, the
    integrations and the proxy.

    Example:
        >>> from visus.models import get_model
        >>> shots = [Shown(f"{n:064x}", 200_000, 500) for n in range(15)]
        >>> opus = get_model("claude-opus-5-5")
        >>> fates = plan_tool_images(shots, RetentionPolicy(), model=opus)
        >>> sum(f.kind == "live" for f in fates)  # append-only, under its break-even
        15
        >>> more = [Shown(f"{n:064x}", 200_000, 500) for n in range(25)]  # past 10k tokens
        >>> sum(f.kind == "live" for f in plan_tool_images(more, RetentionPolicy(), model=opus))
        5
        >>> many = [Shown(f"{n:064x}", 200_000, 1600) for n in range(40)]
        >>> fates = plan_tool_images(many, RetentionPolicy(), model=get_model("claude-sonnet-4-6"))
        >>> sum(f.kind == "live" for f in fates)  # the count window
        4
    """
    policy = policy.for_model(model)
    limit = policy.ceiling(model)
    if ceiling is not None:
        limit = limit.tighter(ceiling)
    at_least = evicted_over(images, limit, share=policy.share, hold=policy.hold(model))
    window = None if policy.append_only else policy.live_images
    digests = [i.digest for i in images]
    return plan_images(digests, live_images=window, chunk=policy.image_batch, at_least=at_least)


def policy_for(model: ModelSpec | None, policy: RetentionPolicy | None = None) -> RetentionPolicy:
    """The retention visus applies for ``model``, for any surface that sends its history
    (the agent, the proxy, the integrations): ``policy`` (default: visus's defaults)
    with what it leaves open decided per model family. A model that binds its reasoning
    to the prefix (Claude 5.x: Anthropic "Preserved thinking"; ``ModelSpec.
    preserved_thinking``) gets an append-only history: no turn or count window, images
    leave only near a ceiling (the provider's images per request, a share of the
    context, the family's measured break-even in image tokens), the oldest in one large
    batch, so the prefix and the reasoning bound to it change rarely. Other models keep
    the count window (``live_images`` in batches). Apply it with :func:`plan_tool_images`
    (fates of a request's tool images) or :func:`visus.retention.model_view`.

    Example:
        >>> from visus.models import get_model
        >>> opus = policy_for(get_model("claude-opus-5-5"))
        >>> opus.append_only, opus.append_tokens is not None
        (True, True)
        >>> policy_for(get_model("gpt-5")).append_only
        False
        >>> policy_for(get_model("claude-opus-5-5"), RetentionPolicy(append_only=False)).append_only
        False
    """
    return (policy if policy is not None else RetentionPolicy()).for_model(model)
