"""A fake Telegram Bot API on loopback: serves queued updates, records every call.

python-telegram-bot is pointed at it with ``base_url(f"{url}/bot")`` and
``base_file_url(f"{url}/file/bot")``. Calls are recorded with their form fields
and the exact bytes of every uploaded file; ``fail(method, ...)`` scripts error
answers (429 with retry_after, 502) for the next calls of a method.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.timing import within

TOKEN = "123456:TEST-token"
BOT_ID = 123456


@dataclass
class Call:
    method: str
    params: dict[str, str]
    files: dict[str, tuple[str, bytes]]
    at: float
    result: Any = None

    def json(self, name: str) -> Any:
        return json.loads(self.params[name])


@dataclass
class FakeBotAPI:
    url: str = ""
    calls: list[Call] = field(default_factory=list)
    downloads: list[str] = field(default_factory=list)
    updates: list[dict[str, Any]] = field(default_factory=list)
    files: dict[str, tuple[str, bytes]] = field(default_factory=dict)  # file_id -> path, bytes
    failures: dict[str, list[tuple[int, dict[str, Any]]]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _next_update: int = 1
    _next_message: int = 1000

    # --- scripting ----------------------------------------------------------------

    def add_file(self, file_id: str, data: bytes, path: str | None = None) -> None:
        with self.lock:
            self.files[file_id] = (path or f"photos/{file_id}.bin", data)

    def push(self, update: dict[str, Any]) -> int:
        with self.lock:
            update = {"update_id": self._next_update, **update}
            self._next_update += 1
            self.updates.append(update)
            return int(update["update_id"])

    def fail(
        self, method: str, status: int, times: int = 1, retry_after: int | None = None
    ) -> None:
        body: dict[str, Any] = {"ok": False, "error_code": status}
        if status == 429:
            body["description"] = f"Too Many Requests: retry after {retry_after}"
            body["parameters"] = {"retry_after": retry_after}
        else:
            body["description"] = "Bad Gateway"
        with self.lock:
            self.failures.setdefault(method, []).extend([(status, body)] * times)

    def sent(self, *methods: str) -> list[Call]:
        with self.lock:
            return [c for c in self.calls if c.method in methods]

    def chat_view(self, chat_id: int, *, raw: bool = False) -> list[str]:
        """The text messages of a chat as the user finally sees them, in order.

        HTML messages are shown as their visible text, or as sent with ``raw``.
        """
        shown: dict[int, str] = {}
        with self.lock:
            for c in self.calls:
                if c.params.get("chat_id") != str(chat_id):
                    continue
                text = c.params.get("text", "")
                if c.params.get("parse_mode") == "HTML" and not raw:
                    text = parse_entities(text)[0]
                if c.method == "sendMessage" and isinstance(c.result, dict):
                    shown[c.result["message_id"]] = text
                elif c.method == "editMessageText" and c.result is not None:
                    shown[int(c.params["message_id"])] = text
                elif c.method == "deleteMessage":
                    shown.pop(int(c.params["message_id"]), None)
        return list(shown.values())

    def methods(self) -> list[str]:
        with self.lock:
            return [c.method for c in self.calls if c.method not in _QUIET]

    # --- the API ----------------------------------------------------------------------

    def _message(self, chat_id: int, **extra: Any) -> dict[str, Any]:
        with self.lock:
            self._next_message += 1
            mid = self._next_message
        return {
            "message_id": mid,
            "date": int(time.time()),
            "chat": {"id": chat_id, "type": "private" if chat_id > 0 else "group"},
            "from": {"id": BOT_ID, "is_bot": True, "first_name": "visus"},
            **extra,
        }

    def answer(self, method: str, p: dict[str, str]) -> Any:
        chat = int(p["chat_id"]) if "chat_id" in p else 0
        if method == "getMe":
            return {
                "id": BOT_ID,
                "is_bot": True,
                "first_name": "visus",
                "username": "visus_test_bot",
                "can_join_groups": True,
                "can_read_all_group_messages": False,
                "supports_inline_queries": False,
            }
        if method == "getFile":
            with self.lock:
                path, data = self.files[p["file_id"]]
            return {
                "file_id": p["file_id"],
                "file_unique_id": "u" + p["file_id"],
                "file_size": len(data),
                "file_path": path,
            }
        if method == "sendMessage":
            return self._message(chat, text=p["text"])
        if method == "editMessageText":
            return self._message(chat, text=p["text"])
        if method == "sendPhoto":
            return self._message(chat, photo=[_photo_size()], caption=p.get("caption"))
        if method == "sendDocument":
            return self._message(chat, document={"file_id": "d1", "file_unique_id": "ud1"})
        if method == "sendMediaGroup":
            media = json.loads(p["media"])
            return [self._message(chat, photo=[_photo_size()], media_group_id="g1") for _ in media]
        return True  # deleteMessage, sendChatAction, deleteWebhook, setWebhook, ...


_QUIET = {"getMe", "getUpdates", "deleteWebhook", "setWebhook"}
_TAGS = {"b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "a", "code", "pre"}


class _Entities(HTMLParser):
    """Telegram's HTML check: known tags only, properly nested, all closed."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.error = ""
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in _TAGS:
            self.error = self.error or f"unsupported start tag {tag!r}"
        self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.error = self.error or f"can't find end tag corresponding to start tag {tag!r}"
        else:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse_entities(text: str) -> tuple[str, str]:
    """(visible text, error) as Telegram would parse ``text`` in HTML mode."""
    p = _Entities()
    p.feed(text)
    p.close()
    if p.stack and not p.error:
        p.error = f"unclosed start tag {p.stack[-1]!r}"
    return "".join(p.text), p.error


def _markup_error(method: str, p: dict[str, str]) -> str:
    texts: list[str] = []
    if p.get("parse_mode") == "HTML":
        texts.append(p.get("text") or p.get("caption") or "")
    if method == "sendMediaGroup":
        texts += [m.get("caption", "") for m in json.loads(p["media"]) if m.get("parse_mode")]
    for t in texts:
        _, error = parse_entities(t)
        if error:
            return f"can't parse entities: {error}"
    visible = p.get("text", "")
    if p.get("parse_mode") == "HTML":
        visible = parse_entities(visible)[0]
    if len(visible.encode("utf-16-le")) // 2 > 4096:
        return "message is too long"
    return ""


def _photo_size() -> dict[str, Any]:
    return {"file_id": "out", "file_unique_id": "uout", "width": 10, "height": 10}


def _app(fake: FakeBotAPI) -> Starlette:
    async def method(request: Request) -> Response:
        token, name = request.path_params["token"], request.path_params["method"]
        if token != f"bot{TOKEN}":
            return JSONResponse(
                {"ok": False, "error_code": 401, "description": "Unauthorized"}, 401
            )
        params: dict[str, str] = {}
        files: dict[str, tuple[str, bytes]] = {}
        ctype = request.headers.get("content-type", "")
        if ctype.startswith("application/json"):
            params = {
                k: v if isinstance(v, str) else json.dumps(v)
                for k, v in (await request.json()).items()
            }
        elif ctype:
            async with request.form(max_part_size=64 * 1024 * 1024) as form:
                for key, value in form.multi_items():
                    if isinstance(value, UploadFile):
                        files[key] = (value.filename or "", await value.read())
                    else:
                        params[key] = value
        if name == "getUpdates":
            with fake.lock:
                queued = fake.failures.get(name)
                failure = queued.pop(0) if queued else None
            if failure is not None:
                return JSONResponse(failure[1], failure[0])
            return JSONResponse({"ok": True, "result": await _updates(fake, params)})
        with fake.lock:
            call = Call(name, params, files, time.monotonic())
            fake.calls.append(call)
            queued = fake.failures.get(name)
            failure = queued.pop(0) if queued else None
        if failure is None and (error := _markup_error(name, params)):
            failure = (400, {"ok": False, "error_code": 400, "description": error})
            failure[1]["description"] = f"Bad Request: {error}"
        if failure is not None:
            return JSONResponse(failure[1], failure[0])
        result = fake.answer(name, params)
        with fake.lock:
            call.result = result
        return JSONResponse({"ok": True, "result": result})

    async def download(request: Request) -> Response:
        path = request.path_params["path"]
        with fake.lock:
            fake.downloads.append(path)
            for p, data in fake.files.values():
                if p == path:
                    return Response(data, media_type="application/octet-stream")
        return Response(status_code=404)

    return Starlette(
        routes=[
            Route("/file/{token}/{path:path}", download, methods=["GET"]),
            Route("/{token}/{method}", method, methods=["GET", "POST"]),
        ]
    )


async def _updates(fake: FakeBotAPI, params: dict[str, str]) -> list[dict[str, Any]]:
    offset = int(params.get("offset", "0") or 0)
    wait = min(float(params.get("timeout", "0") or 0), 0.3)
    deadline = time.monotonic() + wait
    while True:
        with fake.lock:
            # Confirmed updates (below offset) are forgotten, as Telegram does.
            fake.updates = [u for u in fake.updates if u["update_id"] >= offset]
            ready = list(fake.updates)
        if ready or time.monotonic() >= deadline:
            return ready
        await asyncio.sleep(0.02)


@contextmanager
def serve_app(app: Any, *, lifespan: str = "off") -> Iterator[str]:
    """Run an ASGI app with uvicorn on 127.0.0.1 and a free port, in a thread.

    Open long polls are not waited for at shutdown beyond a moment.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        lifespan=lifespan,
        timeout_graceful_shutdown=1,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + within(10)
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("test server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@contextmanager
def serve_fake_bot() -> Iterator[FakeBotAPI]:
    fake = FakeBotAPI()
    with serve_app(_app(fake)) as url:
        fake.url = url
        yield fake


# --- updates as Telegram sends them -----------------------------------------------------

_msg_ids = iter(range(1, 1_000_000))


def _base(chat_id: int, user_id: int, username: str | None = None) -> dict[str, Any]:
    user: dict[str, Any] = {"id": user_id, "is_bot": False, "first_name": "Ann"}
    if username:
        user["username"] = username
    return {
        "message_id": next(_msg_ids),
        "date": int(time.time()),
        "chat": {"id": chat_id, "type": "private" if chat_id > 0 else "group", "title": "t"},
        "from": user,
    }


def text_update(chat_id: int, text: str, *, user_id: int | None = None) -> dict[str, Any]:
    return {"message": {**_base(chat_id, user_id or abs(chat_id)), "text": text}}


def photo_update(
    chat_id: int,
    sizes: list[tuple[str, int, int, int]],
    *,
    caption: str | None = None,
    media_group_id: str | None = None,
    user_id: int | None = None,
) -> dict[str, Any]:
    """``sizes``: (file_id, width, height, file_size), as Telegram lists them."""
    message = _base(chat_id, user_id or abs(chat_id))
    message["photo"] = [
        {"file_id": f, "file_unique_id": "u" + f, "width": w, "height": h, "file_size": s}
        for f, w, h, s in sizes
    ]
    if caption is not None:
        message["caption"] = caption
    if media_group_id is not None:
        message["media_group_id"] = media_group_id
    return {"message": message}


def document_update(
    chat_id: int, file_id: str, mime_type: str, file_size: int, *, caption: str | None = None
) -> dict[str, Any]:
    message = _base(chat_id, abs(chat_id))
    message["document"] = {
        "file_id": file_id,
        "file_unique_id": "u" + file_id,
        "file_name": "picture",
        "mime_type": mime_type,
        "file_size": file_size,
    }
    if caption is not None:
        message["caption"] = caption
    return {"message": message}
