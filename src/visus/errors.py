"""One exception tree for visus.

Every error visus raises on purpose is a ``VisusError``. Third-party errors are
translated at one point per boundary (``raise ... from e``), so callers catch
these classes and never a library's own.

::

    VisusError
    ├── MediaError                  a source could not become a fitted image
    │   ├── UndecodableError        bytes our decoders cannot open (corrupt, truncated)
    │   ├── UnsupportedTypeError    a real file of a kind we do not turn into pixels
    │   └── TooLargeError           past a bound in limits.py (pixels, bytes, pages)
    │       └── BusyError           a shared budget (render workers, memory) stayed full
    ├── ReachError                  path outside the allowed roots (or render withheld)
    ├── PolicyError                 the operator's policy refuses it (an MCP server or a
    │                               write tool the operator did not allow)
    ├── NotFoundError               missing file, session, blob or instance
    ├── InvalidInputError           a malformed argument (bad base64, bad page number)
    ├── McpServerError              a mounted MCP server failed (start, crash, hang, bad answer)
    ├── StoreError                  the record's storage
    │   ├── IntegrityError          a blob whose bytes do not match its digest
    │   └── InvalidKeyError         a digest or session id that is not well formed
    ├── WireError                   a view that cannot be lowered onto a wire
    ├── ProviderError               a model provider failed or refused
    │   ├── AuthError               missing or rejected credentials
    │   ├── RateLimitError          429 after retries
    │   ├── ContextLengthError      the request is over the model's context window
    │   └── ImageRejectedError      the provider refused an image (size, format)
    ├── NetError                    fetching a URL failed
    │   ├── BlockedURLError         the SSRF gate refused the target
    │   ├── UnreachableError        no server answered (name, connection, TLS)
    │   └── HTTPStatusError         the server answered an error status (404, ...)
    ├── LimitError                  a protocol bound (tether frame, image count) was broken
    ├── ConfigError                 an invalid configuration file or value
    └── AnalyzeError                vision_analyze / video_analyze failed (``code`` prefix)

Example:
    >>> from visus.errors import TooLargeError, MediaError
    >>> issubclass(TooLargeError, MediaError)
    True
"""

from __future__ import annotations

__all__ = [
    "AnalyzeError",
    "AuthError",
    "BlockedURLError",
    "BusyError",
    "ConfigError",
    "ContextLengthError",
    "HTTPStatusError",
    "ImageRejectedError",
    "IntegrityError",
    "InvalidInputError",
    "InvalidKeyError",
    "LimitError",
    "McpServerError",
    "MediaError",
    "NetError",
    "NotFoundError",
    "PolicyError",
    "ProviderError",
    "RateLimitError",
    "ReachError",
    "StoreError",
    "TooLargeError",
    "UndecodableError",
    "UnreachableError",
    "UnsupportedTypeError",
    "VisusError",
    "WireError",
    "os_reason",
]


class VisusError(Exception):
    """Base of every error visus raises on purpose."""


class MediaError(VisusError):
    """A source could not become a fitted image."""


class UndecodableError(MediaError):
    """The bytes claim to be a kind we decode but cannot be opened (corrupt, truncated)."""


class UnsupportedTypeError(MediaError):
    """A real source of a kind visus does not turn into pixels."""


class TooLargeError(MediaError):
    """A source is past a bound in :mod:`visus.limits`."""


class BusyError(TooLargeError):
    """A budget the whole process shares (render workers, decode and body memory) stayed
    full past its wait: refused as ``too_large`` (nothing is wrong with the input
    itself), and worth trying again shortly."""


class ReachError(VisusError):
    """A path outside the allowed roots, or a capability the host withheld."""


class PolicyError(VisusError):
    """The operator's policy, read when the server started, refuses what a client asked
    for: an MCP server it did not configure, a program to start, a write tool it left
    off. A request may narrow the policy, never widen it."""


class NotFoundError(VisusError):
    """A file, session, blob or instance that does not exist."""


class McpServerError(VisusError):
    """A mounted MCP server failed: it did not start, crashed, hung or answered badly."""


class InvalidInputError(VisusError):
    """A malformed argument: bad base64, a page number out of range, two sources at once."""


class StoreError(VisusError):
    """The record's durable storage failed."""


class IntegrityError(StoreError):
    """A stored blob whose bytes do not hash to its key."""


class InvalidKeyError(StoreError):
    """A digest or session id that is not well formed (and might traverse paths)."""


class WireError(VisusError):
    """A model view that cannot be lowered onto the requested wire."""


class ProviderError(VisusError):
    """A model provider failed or refused the request.

    ``status`` is the HTTP status when there was one; ``provider`` names the wire.
    """

    def __init__(self, message: str, *, provider: str = "", status: int | None = None) -> None:
        super().__init__(message)
        self.provider = provider
        self.status = status


class AuthError(ProviderError):
    """Credentials are missing or were rejected."""


class RateLimitError(ProviderError):
    """The provider kept answering 429 after our retries."""


class ContextLengthError(ProviderError):
    """The request does not fit the model's context window."""


class ImageRejectedError(ProviderError):
    """The provider refused an image in the request (too large, bad format)."""


class NetError(VisusError):
    """Fetching a URL failed (timeout, size cap, bad status)."""


class BlockedURLError(NetError):
    """The SSRF gate refused the URL (scheme, address, redirect)."""


class UnreachableError(NetError):
    """No server answered: the name did not resolve, the connection was refused or
    failed (TLS included). Unlike :class:`HTTPStatusError`, nothing was said back."""


class HTTPStatusError(NetError):
    """The server answered with an error status (``status``: 404, 500, ...)."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


class LimitError(VisusError):
    """A protocol bound from :mod:`visus.limits` was broken; the message names it."""


class ConfigError(VisusError):
    """An invalid configuration file or value; the message names the key."""


class AnalyzeError(VisusError):
    """vision_analyze or video_analyze failed; ``str()`` starts with ``code``.

    ``code`` is one of the documented prefixes (``INVALID_INPUT``, ``FILE_NOT_FOUND``,
    ``URL_BLOCKED``, ``FILE_TOO_LARGE``, ``UNSUPPORTED_FILE_TYPE``,
    ``VISION_NOT_SUPPORTED``, ``PDF_NOT_SUPPORTED``, ``PDF_TOO_MANY_PAGES``,
    ``VIDEO_NOT_SUPPORTED``, ``LLM_ERROR``, ``RESPONSE_NOT_JSON``).

    Example:
        >>> str(AnalyzeError("INVALID_INPUT", "prompt is empty"))
        'INVALID_INPUT: prompt is empty'
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message

    @property
    def reason(self) -> str:
        """The code as the servers and the CLI spell every refusal reason (lower case,
        as ``view``'s): ``FILE_NOT_FOUND`` -> ``file_not_found``.

        Example:
            >>> AnalyzeError("URL_BLOCKED", "private address").reason
            'url_blocked'
        """
        return self.code.lower()


def os_reason(e: BaseException) -> str:
    """What went wrong in ``e`` without the path an OS error names: a refusal a client
    reads says what failed, not where the server keeps its files.

    Example:
        >>> os_reason(FileNotFoundError(2, "No such file or directory", "/srv/data/x"))
        'No such file or directory'
        >>> os_reason(RuntimeError("Symlink loop from '/srv/data/a'"))
        'a symbolic link loop'
    """
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return "a symbolic link loop" if isinstance(e, RuntimeError) else type(e).__name__
