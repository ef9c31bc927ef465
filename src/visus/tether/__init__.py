"""Tether: images in and out of an agent over HTTP, under hard limits.

Frames (:mod:`.frames`), the limit checks (:mod:`.limits`), the per-instance ring
(:mod:`.ring`), the runner seam to the agent (:mod:`.runner`), the FastAPI server
(:mod:`.server`) and the httpx client (:mod:`.client`).

Example:
    >>> from visus.tether import Frame, UserMessagePayload, encode_frame
    >>> encode_frame(Frame(UserMessagePayload("hi"), msg_id="m", seq=1, ts="t"))[:24]
    b'{"v":1,"type":"user.mess'
"""

from __future__ import annotations

from visus.tether.client import PollResult, TetherClient, TetherHTTPError
from visus.tether.frames import (
    AssistantDelta,
    AssistantDone,
    ErrorPayload,
    Frame,
    Image,
    Payload,
    UserMessagePayload,
    decode_frame,
    encode_frame,
)
from visus.tether.limits import FrameError, TetherLimitError, check_images
from visus.tether.ring import Page, Ring
from visus.tether.runner import ImageIn, InstanceConfig, RunnerFactory, TurnOutput, TurnRunner
from visus.tether.server import create_app, serve

__all__ = [
    "AssistantDelta",
    "AssistantDone",
    "ErrorPayload",
    "Frame",
    "FrameError",
    "Image",
    "ImageIn",
    "InstanceConfig",
    "Page",
    "Payload",
    "PollResult",
    "Ring",
    "RunnerFactory",
    "TetherClient",
    "TetherHTTPError",
    "TetherLimitError",
    "TurnOutput",
    "TurnRunner",
    "UserMessagePayload",
    "check_images",
    "create_app",
    "decode_frame",
    "encode_frame",
    "serve",
]
