"""The savings ledger: what ``visus proxy`` saved and what it cost, per model and per day.

Each request the proxy edits adds to its model's row for the day (UTC): requests,
images, bytes and image tokens saved, dollars saved (the saved tokens priced as input
at the model's list price, :func:`visus.models.prices.cost_usd`, as ``visus usage``
prices a session; a model no price is known for saves $0) and the seconds the proxy
added before forwarding (reading, editing and writing the body). The proxy's
``/metrics`` exports the same rows since it started; the ledger file
(``<data>/proxy/ledger.json``) keeps every day across restarts, and ``visus usage
--proxy`` reads it. Several proxies may share one data folder: each adds what it
counted since its last write under a file lock.

Example:
    >>> ledger = Ledger(None)
    >>> ledger.add("claude-sonnet-4-6", images=2, bytes_saved=900_000, tokens_saved=1_000_000,
    ...            seconds=0.01, day="2026-01-02")
    >>> round(ledger.totals()["claude-sonnet-4-6"].usd_saved, 2)  # $3 per million input
    3.0
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from visus import limits
from visus.errors import InvalidInputError, VisusError
from visus.models import get_model
from visus.models.prices import cost_usd
from visus.paths import locked

__all__ = ["Ledger", "Row", "read_ledger", "usd_saved", "usd_spent"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Row:
    """One model's savings (and added latency) over some requests."""

    requests: int = 0
    images: int = 0
    bytes_saved: int = 0
    tokens_saved: int = 0
    usd_saved: float = 0.0
    added_seconds: float = 0.0
    #: Reasoning blocks the upstream dropped because an edit changed their prefix
    #: (what the model may do again: its cost).
    reasoning_dropped: int = 0
    #: What the replies said the requests used (input counts the cached tokens), and
    #: its price (:func:`usd_spent`).
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    usd_spent: float = 0.0

    def merge(self, other: Row) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def as_json(self) -> dict[str, float]:
        found = asdict(self)
        found["usd_saved"] = round(self.usd_saved, 8)
        found["added_seconds"] = round(self.added_seconds, 6)
        found["usd_spent"] = round(self.usd_spent, 8)
        return found


def usd_saved(model: str, tokens: int) -> float:
    """``tokens`` input tokens of ``model`` at its list price (0 for an unknown model)."""
    if tokens <= 0 or not model:
        return 0.0
    return usd_spent(model, input_tokens=tokens, output_tokens=0)


def usd_spent(
    model: str,
    *,
    input_tokens: int,
    output_tokens: int,
    cache_read_tokens: int = 0,
    cache_write_tokens: int = 0,
) -> float:
    """One reply's usage of ``model`` at its list prices, as ``visus usage`` prices a
    step (0 for a model no price is known for).

    Example:
        >>> usd_spent("claude-sonnet-4-6", input_tokens=1_000_000, output_tokens=0,
        ...           cache_read_tokens=1_000_000)  # a tenth of the input price
        0.3
    """
    try:
        spec = get_model(model or "unknown")
    except InvalidInputError:
        return 0.0
    return cost_usd(
        spec,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cache_read_tokens=cache_read_tokens,
        cache_write_tokens=cache_write_tokens,
    )


def _today() -> str:
    return time.strftime("%Y-%m-%d", time.gmtime())


class Ledger:
    """Rows by (day, model), since the process started (:meth:`totals`, ``/metrics``) and
    not yet written (:meth:`flush` to ``path``; None keeps them in memory only)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._since_start: dict[str, Row] = {}
        self._pending: dict[tuple[str, str], Row] = {}

    def add(
        self,
        model: str,
        *,
        images: int,
        bytes_saved: int,
        tokens_saved: int,
        seconds: float,
        day: str | None = None,
    ) -> None:
        """Count one request to ``model``."""
        row = Row(1, images, bytes_saved, tokens_saved, usd_saved(model, tokens_saved), seconds)
        self._merge(model, row, day)

    def dropped(self, model: str, blocks: int, *, day: str | None = None) -> None:
        """Count reasoning blocks the upstream dropped from a request to ``model``."""
        self._merge(model, Row(reasoning_dropped=blocks), day)

    def used(
        self,
        model: str,
        *,
        input_tokens: int,
        output_tokens: int,
        cache_read_tokens: int,
        cache_write_tokens: int,
        usd: float,
        day: str | None = None,
    ) -> None:
        """Count what one reply of ``model`` said it used, and its price."""
        row = Row(
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cache_read_tokens=cache_read_tokens,
            cache_write_tokens=cache_write_tokens,
            usd_spent=usd,
        )
        self._merge(model, row, day)

    def _merge(self, model: str, row: Row, day: str | None) -> None:
        with self._lock:
            model = self._bounded(model)
            self._since_start.setdefault(model, Row()).merge(row)
            self._pending.setdefault((day or _today(), model), Row()).merge(row)

    def _bounded(self, model: str) -> str:
        """A client names the model: a few distinct names, each not too long."""
        if not model:
            return "unknown"
        if len(model) > limits.PROXY_LEDGER_MODEL_CHARS or not model.isprintable():
            return "other"
        known = model in self._since_start
        return (
            model if known or len(self._since_start) < limits.PROXY_LEDGER_MAX_MODELS else "other"
        )

    def totals(self) -> dict[str, Row]:
        """Each model's row since this process started."""
        with self._lock:
            return {m: Row(**asdict(r)) for m, r in self._since_start.items()}

    def flush(self) -> None:
        """Add what was counted since the last flush to the ledger file."""
        with self._lock:
            pending, self._pending = self._pending, {}
        if self.path is None or not pending:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            with locked(self.path.with_suffix(".lock")):
                days = _read(self.path)
                for (day, model), row in pending.items():
                    days.setdefault(day, {}).setdefault(model, Row()).merge(row)
                _write(self.path, days)
        except BaseException:
            with self._lock:  # kept for the next flush
                for key, row in pending.items():
                    self._pending.setdefault(key, Row()).merge(row)
            raise

    async def keep_written(self) -> None:
        """Flush every ``PROXY_LEDGER_FLUSH_SECONDS`` until cancelled (a failed write is
        logged; its rows wait for the next)."""
        while True:
            await asyncio.sleep(limits.PROXY_LEDGER_FLUSH_SECONDS)
            try:
                await asyncio.to_thread(self.flush)
            except (OSError, VisusError) as e:
                log.warning("could not write the savings ledger: %s", e)


def _read(path: Path) -> dict[str, dict[str, Row]]:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except ValueError as e:
        raise InvalidInputError(f"{path}: not a savings ledger ({e})") from e
    known = {f.name for f in fields(Row)}
    return {
        day: {m: Row(**{k: v for k, v in r.items() if k in known}) for m, r in models.items()}
        for day, models in raw.get("days", {}).items()
    }


def _write(path: Path, days: Mapping[str, Mapping[str, Row]]) -> None:
    shaped = {
        "days": {d: {m: r.as_json() for m, r in sorted(days[d].items())} for d in sorted(days)}
    }
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(shaped, f, indent=1)
    os.replace(tmp, path)


def read_ledger(path: Path) -> dict[str, dict[str, Row]]:
    """The ledger file's rows by day, then model (empty when there is none yet)."""
    return _read(path)
