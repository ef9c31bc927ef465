"""An async client for the tether API (httpx), checking limits before it sends.

Example:
    >>> async def main():                                   # doctest: +SKIP
    ...     async with TetherClient("http://127.0.0.1:8750") as tc:
    ...         inst = await tc.create_instance("reference")
    ...         png = open("chart.png", "rb").read()
    ...         await tc.send(inst["id"], "what is this?", [ImageIn("image/png", png)])
    ...         page = await tc.poll(inst["id"], wait=30)
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Required, TypedDict

import httpx

from visus import limits
from visus.errors import (
    ConfigError,
    InvalidInputError,
    LimitError,
    NotFoundError,
    VisusError,
)
from visus.tether.frames import (
    Frame,
    UserMessagePayload,
    decode_frame,
    encode_outgoing,
    image_from_bytes,
    new_msg_id,
)
from visus.tether.limits import check_images, check_wire, load_json
from visus.tether.runner import ImageIn

__all__ = ["PollResult", "TetherClient", "TetherHTTPError"]


class TetherHTTPError(VisusError):
    """The tether server answered with an error status none of the tree's classes fits."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class PollResult:
    """A poll answer: ``raw`` is the parsed JSON exactly as the server sent it."""

    frames: tuple[Frame, ...]
    next_seq: int
    gap: bool
    raw: Mapping[str, Any]


def _raise_for(resp: httpx.Response) -> None:
    if resp.is_success:
        return
    try:
        err = resp.json().get("error", {})
        message = str(err.get("message") or resp.text)
    except (ValueError, AttributeError):
        message = resp.text
    message = f"{resp.status_code}: {message}"
    if resp.status_code == 404:
        raise NotFoundError(message)
    if resp.status_code in (413, 429):
        raise LimitError(message)
    if resp.status_code == 400:
        raise InvalidInputError(message)
    if resp.status_code == 401:
        raise ConfigError(f"{message} (check the tether token)")
    raise TetherHTTPError(message, status=resp.status_code)


class NewInstance(TypedDict, total=False):
    """``POST /v1/instances``' body as this client sends it (the server's
    ``InstanceCreate``, whose ``mcp_servers`` it does not send)."""

    model: Required[str]
    tools: list[str]
    roots: list[str]


class PollQuery(TypedDict, total=False):
    """``GET /v1/instances/{id}/tether/poll``'s query."""

    after_seq: Required[int]
    wait: Required[float]
    session: str
    limit: int
    max_bytes: int


class TetherClient:
    """Talks to one tether server. ``transport`` lets tests or an in-process host
    pass ``httpx.ASGITransport(app)``; the network is not needed then."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: float = 30.0,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.base_url = base_url.rstrip("/")
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=headers,
            transport=transport,
            timeout=httpx.Timeout(timeout, read=timeout + limits.TETHER_POLL_MAX_WAIT_SECONDS),
        )

    async def __aenter__(self) -> TetherClient:
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _json(self, method: str, url: str, **kw: Any) -> Any:
        try:
            resp = await self._http.request(method, url, **kw)
        except httpx.HTTPError as e:
            raise TetherHTTPError(
                f"tether server unreachable at {self.base_url}: {e}", status=0
            ) from e
        _raise_for(resp)
        # A server's answer is bounded in depth like any body visus reads.
        return None if resp.status_code == 204 else load_json(resp.content, "response")

    # --- instances ------------------------------------------------------------------

    async def create_instance(
        self, model: str, *, tools: Sequence[str] | None = None, roots: Sequence[str] | None = None
    ) -> dict[str, Any]:
        body: NewInstance = {"model": model}
        if tools is not None:
            body["tools"] = list(tools)
        if roots is not None:
            body["roots"] = list(roots)
        result: dict[str, Any] = await self._json("POST", "/v1/instances", json=body)
        return result

    async def list_instances(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = (await self._json("GET", "/v1/instances"))["instances"]
        return result

    async def get_instance(self, instance: str) -> dict[str, Any]:
        result: dict[str, Any] = await self._json("GET", f"/v1/instances/{instance}")
        return result

    async def delete_instance(self, instance: str) -> None:
        await self._json("DELETE", f"/v1/instances/{instance}")

    # --- tether -----------------------------------------------------------------------

    async def send(
        self,
        instance: str,
        text: str,
        images: Sequence[ImageIn] = (),
        session: str | None = None,
        *,
        user: Mapping[str, Any] | None = None,
        msg_id: str | None = None,
    ) -> dict[str, Any]:
        """Send a ``user.message``. Limits are checked here, before anything is sent.

        Returns ``{"seq", "msg_id", "session"}`` as the server accepted it.
        """
        check_images(images)
        frame = Frame(
            UserMessagePayload(text, tuple(map(image_from_bytes, images)), user),
            session=session or "default",
            msg_id=msg_id or new_msg_id(),
        )
        body = encode_outgoing(frame)
        check_wire(len(body))
        result: dict[str, Any] = await self._json(
            "POST",
            f"/v1/instances/{instance}/tether",
            content=body,
            headers={"Content-Type": "application/json"},
        )
        return result

    async def poll_raw(
        self,
        instance: str,
        after_seq: int = 0,
        *,
        session: str | None = None,
        wait: float = 0.0,
        limit: int | None = None,
        max_bytes: int | None = None,
    ) -> dict[str, Any]:
        """The poll answer as parsed JSON, unchecked (see :meth:`poll`)."""
        params: PollQuery = {"after_seq": after_seq, "wait": wait}
        if session is not None:
            params["session"] = session
        if limit is not None:
            params["limit"] = limit
        if max_bytes is not None:
            params["max_bytes"] = max_bytes
        result: dict[str, Any] = await self._json(
            "GET", f"/v1/instances/{instance}/tether/poll", params=params
        )
        return result

    async def poll(
        self,
        instance: str,
        after_seq: int = 0,
        *,
        session: str | None = None,
        wait: float = 0.0,
        limit: int | None = None,
    ) -> PollResult:
        """Frames after ``after_seq``, each checked again against the limits."""
        raw = await self.poll_raw(instance, after_seq, session=session, wait=wait, limit=limit)
        frames = tuple(decode_frame(f).frame for f in raw["frames"])
        return PollResult(frames, int(raw["next_seq"]), bool(raw["gap"]), raw)

    async def stream(
        self,
        instance: str,
        after_seq: int | None = None,
        *,
        session: str | None = None,
        last_event_id: int | None = None,
        reconnects: int = 5,
    ) -> AsyncIterator[Frame]:
        """Frames as the server streams them (SSE); runs until the caller stops or the
        server ends the stream.

        Events are parsed by httpx-sse (multi-line ``data:`` joined with newlines, one
        optional space after the colon). Each event's ``id`` (its seq) is remembered: a
        dropped connection is re-opened with ``Last-Event-ID``, so nothing is missed or
        repeated, up to ``reconnects`` times in a row.
        """
        from httpx_sse import aconnect_sse

        url = f"/v1/instances/{instance}/tether/stream"
        last = last_event_id
        failures = 0
        while True:
            params: dict[str, Any] = {}
            if session is not None:
                params["session"] = session
            if last is None and after_seq is not None:
                params["after_seq"] = after_seq
            headers = {} if last is None else {"Last-Event-ID": str(last)}
            try:
                async with aconnect_sse(
                    self._http,
                    "GET",
                    url,
                    params=params,
                    headers=headers,
                    timeout=httpx.Timeout(30.0, read=None),
                ) as source:
                    resp = source.response
                    if not resp.is_success:
                        await resp.aread()
                        _raise_for(resp)
                    async for event in source.aiter_sse():
                        failures = 0
                        if event.id and event.id.isdigit():
                            last = int(event.id)
                        if event.data and event.event not in ("gap", "message"):
                            yield decode_frame(json.loads(event.data)).frame
                return  # the server ended the stream (it is shutting down)
            except (httpx.RemoteProtocolError, httpx.ReadError) as e:
                failures += 1
                if failures > reconnects:
                    raise VisusError(f"tether stream broke {failures} times: {e}") from e
