"""One options value for code that embeds visus: what it may see, how long images stay live.

The integrations (pydantic-ai, the Agents SDK, LangChain) share these knobs; they are
documented here once, on :class:`VisionOptions`. ``VisionCore`` takes the value itself,
each framework's adapter the same fields as keywords (``**options:
Unpack[VisionKeywords]``). :meth:`VisionOptions.reach` and
:meth:`VisionOptions.retention` build the values the pipeline runs on.

The operator's surfaces are configured from ``visus.toml`` instead, and take those
values, not the knobs: :func:`~visus.agent.runtime.build_agent` a
:class:`~visus.perception.Reach` and a :class:`~visus.retention.RetentionPolicy`
(``[retention]`` made one by ``RetentionSettings.policy()``), the MCP server a reach
only (it holds no conversation, so no retention). The proxy's retention is its own:
off unless asked, one ``chunk`` for its turn and image windows (``ProxyConfig``).

Example:
    >>> o = VisionOptions.of(["/tmp"], live_images=8, image_chunk=4)
    >>> o.roots, o.retention().live_images, o.render
    ((PosixPath('/tmp'),), 8, True)
    >>> o.replace(render=False).reach().render
    False
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict, Unpack, cast

from visus import limits
from visus.perception import Reach
from visus.record.blobs import BlobStore
from visus.retention import RetentionPolicy

__all__ = ["PathLike", "VisionKeywords", "VisionOptions"]

#: A folder as a surface's caller may name it.
PathLike = str | os.PathLike[str]


class VisionKeywords(TypedDict, total=False):
    """:class:`VisionOptions`' fields as keyword arguments (each surface's ``**options``)."""

    render: bool
    live_turns: int
    chunk: int
    live_images: int | None
    image_chunk: int | None
    append_only: bool | None
    data: PathLike | None
    blobs: BlobStore | None
    tools: Sequence[str] | None
    allow_loopback_http: bool


@dataclass(frozen=True, slots=True)
class VisionOptions:
    """What a surface may see and how long the images it sees stay live.

    ``roots``: the folders the ``view`` and ``read`` tools may open (default: the
    working directory). ``render``: render SVG, text and PDF pages as images (False:
    decode rasters only).

    Retention (:class:`~visus.retention.RetentionPolicy`): the images of the last
    ``live_turns`` user turns keep their pixels, the window moving ``chunk`` turns at a
    time so a prompt cache keeps hitting; within it at most ``live_images`` tool images
    stay live (``None``: no bound), the oldest leaving ``image_chunk`` at a time (``None``:
    the whole window but the newest). ``append_only`` (``None``: the model decides, True
    for those that bind their reasoning to the prefix) keeps the history append-only: no
    window, images leave only at a ceiling, in one batch. An image that leaves becomes a
    one-line descriptor naming its digest, which ``view`` brings back.

    ``data``: visus's data folder (default: ``$VISUS_DATA``, else the user's data
    folder); ``blobs``: where viewed images are stored (default: under ``data``).
    ``tools``: the names of the tools to offer (None: the surface's own set).
    ``allow_loopback_http``: ``view`` may fetch plain ``http://`` from loopback (local
    tests only; a deployment never needs it).
    """

    roots: tuple[Path, ...] = (Path("."),)
    render: bool = True
    live_turns: int = 1
    chunk: int = 1
    live_images: int | None = limits.RETENTION_LIVE_IMAGES
    image_chunk: int | None = None
    append_only: bool | None = None
    data: Path | None = None
    blobs: BlobStore | None = None
    tools: tuple[str, ...] | None = None
    allow_loopback_http: bool = False

    def __post_init__(self) -> None:
        self.retention()  # checks the four retention knobs, with the policy's own words

    @classmethod
    def of(
        cls, roots: Sequence[PathLike] | PathLike = (".",), **options: Unpack[VisionKeywords]
    ) -> VisionOptions:
        """The options from a surface's arguments: ``roots`` one folder or several,
        ``data`` any path, ``tools`` any sequence of names."""
        folders = [roots] if isinstance(roots, str | os.PathLike) else list(roots)
        return cls(roots=tuple(Path(r) for r in folders)).replace(**options)

    def replace(self, **changes: Unpack[VisionKeywords]) -> VisionOptions:
        """These options with ``changes`` (``data`` and ``tools`` normalised as in :meth:`of`)."""
        fields: dict[str, object] = dict(changes)
        data, tools = changes.get("data"), changes.get("tools")
        if data is not None:
            fields["data"] = Path(data)
        if tools is not None:
            fields["tools"] = tuple(tools)
        # The keys are VisionKeywords' (checked by the signature); only the two
        # normalised above changed type.
        return dataclasses.replace(self, **cast("dict[str, Any]", fields))

    def reach(self) -> Reach:
        """What the tools may open: ``roots``, rendering or not."""
        return Reach(list(self.roots), render=self.render)

    def retention(self) -> RetentionPolicy:
        """The retention policy of ``live_turns``, ``chunk``, ``live_images``,
        ``image_chunk`` and ``append_only``."""
        return RetentionPolicy(
            live_turns=self.live_turns,
            chunk=self.chunk,
            live_images=self.live_images,
            image_chunk=self.image_chunk,
            append_only=self.append_only,
        )
