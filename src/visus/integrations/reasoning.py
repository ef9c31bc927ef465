"""The reasoning a framework's request goes with: what visus adds to its settings.

* :func:`bound_thinking`: the ``thinking`` object that lets a model which binds its
  reasoning to the history (Anthropic "Preserved thinking": Opus 5.5, Sonnet 5.5,
  Haiku 5.5, Fable 5.x) take visus's evictions. Replacing an old image by its
  descriptor edits the history before later thinking blocks; a framework that replays
  them (pydantic-ai, LangChain) would meet a 400 at the first eviction. With
  ``block_binding.prefix_mismatch_behavior: "drop_block"`` (and its beta, which each
  framework adds or :data:`BINDING_BETA` names) the API drops the stale blocks instead,
  lists them in ``input_transformations`` and the model redoes that reasoning, as
  visus's own wire asks on every request to such a model
  (:func:`visus.wire.thinking_config`);
* :func:`checked_effort`: the ``effort`` a caller gave the integration, refused with
  the levels the model takes when the catalog says it takes others (as
  ``build_agent(effort=)`` refuses it).

Which replies go without their reasoning after an eviction is the request's
(:meth:`visus.integrations.window.Window.stale`).

Example:
    >>> from visus.models import get_model
    >>> bound_thinking(get_model("claude-opus-5-5"), None)
    {'type': 'adaptive', 'block_binding': {'prefix_mismatch_behavior': 'drop_block'}}
    >>> bound_thinking(get_model("claude-sonnet-4-6"), None) is None
    True
    >>> checked_effort(get_model("claude-opus-5-5"), "low")
    'low'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from visus.errors import ConfigError
from visus.models import ModelSpec
from visus.wire._thinking import BINDING_BETA

__all__ = ["BINDING_BETA", "DROP_BLOCK", "bound_thinking", "checked_effort"]


#: What a stale thinking block does on request (Anthropic "Preserved thinking": "Set
#: the mismatch behavior"): dropped and listed, not a 400.
DROP_BLOCK: Mapping[str, str] = {"prefix_mismatch_behavior": "drop_block"}


def bound_thinking(spec: ModelSpec, thinking: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``thinking`` (the caller's, else adaptive) with ``block_binding`` set to drop stale
    blocks, for a model that binds its reasoning to the prefix; None when there is
    nothing to add: the model does not bind, the caller chose a binding of their own
    (an explicit ``"error"`` is theirs to keep), or the thinking is not adaptive (the
    only kind ``block_binding`` goes with).

    Example:
        >>> from visus.models import get_model
        >>> opus = get_model("claude-opus-5-5")
        >>> bound_thinking(opus, {"type": "adaptive", "display": "summarized"})["display"]
        'summarized'
        >>> bound_thinking(opus, {"block_binding": {}}) is None
        True
    """
    if not spec.preserved_thinking or spec.provider not in ("anthropic", "bedrock"):
        return None
    given = dict(thinking or {"type": "adaptive"})
    if "block_binding" in given or given.get("type", "adaptive") != "adaptive":
        return None
    return {"type": "adaptive", **given, "block_binding": dict(DROP_BLOCK)}


def checked_effort(spec: ModelSpec, effort: str | None) -> str | None:
    """``effort`` to send ``spec``'s model: refused (:class:`~visus.errors.ConfigError`,
    naming the levels) when the catalog lists the levels the model takes and this is
    not one; a model the catalog lists none for gets it as given (its provider judges).

    Example:
        >>> from visus.models import get_model
        >>> checked_effort(get_model("claude-opus-5-5"), "ultra")
        Traceback (most recent call last):
        ...
        visus.errors.ConfigError: claude-opus-5-5 takes no effort 'ultra' (its levels: ...)
    """
    if effort is None or not spec.efforts or effort in spec.efforts:
        return effort
    levels = ", ".join(spec.efforts)
    raise ConfigError(f"{spec.name} takes no effort {effort!r} (its levels: {levels})")
