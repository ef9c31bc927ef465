"""Secrets shown as their kind and tail only (``sk-…abcd``), for ``visus config show``
and every place that prints a configuration.

Example:
    >>> plain({"key": SecretStr("sk-proj-0123456789abcd"), "roots": (Path("/srv"),)})
    {'key': 'sk-…abcd', 'roots': ['/srv']}
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import SecretStr

__all__ = ["mask_literal", "mask_secret", "plain"]


#: ``${NAME}``: a ``[[mcp.servers]]`` header or env value read from the environment.
_ENV_REFERENCE = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}")


def mask_literal(value: str) -> str:
    """A header or env value masked, unless it names its secret by ``${NAME}``.

    Example:
        >>> mask_literal("Bearer ${DOCS_TOKEN}"), mask_literal("Bearer sk-live-0123456789")
        ('Bearer ${DOCS_TOKEN}', 'Bea…6789')
    """
    return value if _ENV_REFERENCE.search(value) else mask_secret(value)


def plain(value: Any) -> Any:
    if isinstance(value, SecretStr):
        return mask_secret(value.get_secret_value())
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | frozenset | set):
        items = sorted(value) if isinstance(value, frozenset | set) else value
        return [plain(v) for v in items]
    if isinstance(value, Path):
        return str(value)
    return value


def mask_secret(secret: str) -> str:
    """Show a secret's kind and tail only: ``sk-…abcd``; short secrets are hidden whole.

    Example:
        >>> mask_secret("sk-proj-0123456789abcd"), mask_secret("short")
        ('sk-…abcd', '****')
    """
    if len(secret) < 12:
        return "****"
    return f"{secret[:3]}…{secret[-4:]}"
