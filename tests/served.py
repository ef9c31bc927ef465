"""Clients of `visus serve`'s app for the tests: they carry the token the app asks for
(``create_main_app`` makes one unless told ``no_token=True``)."""

from __future__ import annotations

from typing import Any

import httpx
from fastapi import FastAPI


def auth(app: FastAPI) -> dict[str, str]:
    """The ``Authorization`` header ``app`` asks for (none for a token-less app)."""
    token = getattr(app.state, "token", None)
    return {"Authorization": f"Bearer {token}"} if token else {}


def client(app: FastAPI, **kw: Any) -> httpx.AsyncClient:
    """An in-process client of ``app`` on ``http://127.0.0.1`` carrying its token;
    ``kw`` go to :class:`httpx.AsyncClient` (``timeout``...) and ``raise_app_exceptions``
    to the transport."""
    raise_app = kw.pop("raise_app_exceptions", True)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=raise_app)
    headers = {**auth(app), **kw.pop("headers", {})}
    kw.setdefault("base_url", "http://127.0.0.1")
    return httpx.AsyncClient(transport=transport, headers=headers, **kw)
