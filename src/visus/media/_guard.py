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
        raise UndecodableError(f"{what} could not be decoded: {type(e).__name__}: {e}") from e
    except BaseException as e:
        # Rust panics surface as pyo3's PanicException (a BaseException); real
        # interpreter exits (KeyboardInterrupt, SystemExit, CancelledError) pass.
        if type(e).__name__ != "PanicException":
            raise
        raise UndecodableError(f"{what} could not be decoded: the renderer panicked: {e}") from e
