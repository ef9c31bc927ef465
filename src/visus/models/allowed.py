"""The models a server's clients may pick: an operator's allow-list, read once at start.

A client of ``visus serve`` names a model when it creates an instance or asks ``/mcp``'s
``vision_analyze`` (or an agent's ``vision_analyze``/``video_analyze``) for one; each
answer is paid with the operator's provider keys. :class:`AllowedModels` is the list of
those a client may name: a reference is compared by what it names (``claude-sonnet-4-6``
and ``anthropic:claude-sonnet-4-6`` are one model), every spelling of the offline
reference model is one entry, and ``"*"`` allows any model.

Example:
    >>> allowed = AllowedModels.of(["anthropic:claude-haiku-4-5", "reference"])
    >>> allowed.allows("claude-haiku-4-5"), allowed.allows("reference-pdf")
    (True, True)
    >>> allowed.check("claude-opus-4-1")
    Traceback (most recent call last):
    ...
    visus.errors.PolicyError: model: 'claude-opus-4-1' is not a model this server's operator lets clients pick; allowed: anthropic:claude-haiku-4-5, reference ([server] models in visus.toml)
"""  # noqa: E501

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from visus.errors import PolicyError, VisusError
from visus.models.registry import parse_model_ref

__all__ = ["ANY_MODEL", "AllowedModels"]

#: The entry that allows every model.
ANY_MODEL = "*"


def _key(ref: str) -> tuple[str, str] | None:
    """What ``ref`` names: ``(provider, model)``, the reference model as one entry, or
    None when it names nothing."""
    try:
        provider, name = parse_model_ref(ref)
    except VisusError:
        return None
    return (provider, "*") if provider == "reference" else (provider, name)


@dataclass(frozen=True, slots=True)
class AllowedModels:
    """The models clients may name (``refs`` as the operator wrote them)."""

    refs: tuple[str, ...]

    @classmethod
    def of(cls, listed: Iterable[str], *always: str | None) -> AllowedModels:
        """The operator's ``listed`` models and the server's own (``always``: the web
        chat's and the vision model, which it runs anyway), without repeats."""
        refs = [r.strip() for r in (*listed, *always) if r and r.strip()]
        return cls(tuple(dict.fromkeys(refs)))

    @property
    def any(self) -> bool:
        """Whether every model is allowed (``"*"`` listed)."""
        return ANY_MODEL in self.refs

    def allows(self, ref: str) -> bool:
        """Whether a client may name ``ref``."""
        if self.any:
            return True
        key = _key(ref)
        return key is not None and key in {_key(r) for r in self.refs}

    def check(self, ref: str, *, field: str = "model") -> None:
        """Raise :class:`PolicyError` naming the allowed models unless ``ref`` is one."""
        if not self.allows(ref):
            shown = ref if len(ref) <= 100 else ref[:100] + "..."
            raise PolicyError(
                f"{field}: {shown!r} is not a model this server's operator lets clients "
                f"pick; allowed: {', '.join(self.refs) or 'none'} ([server] models in "
                "visus.toml)"
            )
