"""The one point where decoder errors become visus errors.

Pillow, libvips, pypdfium2 and Pygments raise whatever they like (``OSError``,
``struct.error``, ``ValueError``, ``MemoryError``, pyo3 ``PanicException`` which is a
``BaseException``...). Every public ``media`` entry point runs inside
:func:`translated`, so only :class:`~visus.errors.MediaError` subclasses and
:class:`~visus.errors.InvalidInputError` leave the package (and ``ImportError`` when a
core dependency such as libvips cannot load: a broken install is not bad input).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from PIL import Image

from visus.errors import TooLargeError, UndecodableError, VisusError

__all__ = ["translated"]

_TOO_LARGE = (MemoryError, Image.DecompressionBombError, Image.DecompressionBombWarning)


def _line(e: BaseException) -> str:
    """The decoder's words on one line. libvips stacks its messages on lines, the first
    often its generic "unable to write to memory" (the loader under it failed), which
    says nothing about the input.

    Example:
        >>> _line(OSError("unable to write to memory\\n  vipspng: libpng read error\\n"))
        'vipspng: libpng read error'
    """
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    useful = [ln for ln in lines if ln != "unable to write to memory"] or lines
    return "; ".join(useful)


@contextmanager
def translated(what: str) -> Iterator[None]:
    """Re-raise any decoder failure inside the block as a ``MediaError`` naming ``what``."""
    try:
        yield
    except (VisusError, ImportError):
        # An ImportError is a broken install (libvips missing), not bad input: say so.
        raise
    except _TOO_LARGE as e:
        raise TooLargeError(f"{what} is too large to decode: {e}") from e
    except Exception as e:
        raise UndecodableError(
            f"{what} could not be decoded: {type(e).__name__}: {_line(e)}"
        ) from e
    except BaseException as e:
        # Rust panics surface as pyo3's PanicException (a BaseException); real
        # interpreter exits (KeyboardInterrupt, SystemExit, CancelledError) pass.
        if type(e).__name__ != "PanicException":
            raise
        raise UndecodableError(f"{what} could not be decoded: the renderer panicked: {e}") from e
