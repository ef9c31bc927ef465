"""Progress on stderr while a long step runs, only when stderr is a terminal.

A spinner with a label (rich's ``Status``, redrawn from its own thread, so it keeps
moving while a big fit or a PDF render blocks the event loop). When stderr is a pipe
or a file nothing is drawn: logs and ``2>file`` stay clean.

Example:
    >>> with Progress(enabled=False) as p:
    ...     p.update("waiting for the model")
    >>> p.labels
    ['waiting for the model']
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import Any

__all__ = ["Progress"]


class Progress:
    """A stderr spinner whose label says what is being waited for."""

    def __init__(self, *, enabled: bool | None = None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.labels: list[str] = []
        self._status: Any = None

    def __enter__(self) -> Progress:
        return self

    def update(self, label: str) -> None:
        """Show ``label`` (starting the spinner if it is not shown)."""
        self.labels.append(label)
        if not self.enabled:
            return
        if self._status is None:
            from rich.console import Console

            self._status = Console(stderr=True).status(label, spinner="dots")
            self._status.start()
        else:
            # Naming the spinner redraws at once; a bare text update waits for the next
            # tick, so a phase shorter than a tick (a small fit) would never show.
            self._status.update(label, spinner="dots")

    def stop(self) -> None:
        """Clear the spinner (before printing to the terminal); ``update`` shows it again."""
        if self._status is not None:
            self._status.stop()
            self._status = None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
