"""``visus session show``, ``list`` and ``check``: what a session holds and what a model sees.

Example:
    $ visus session list
    $ visus session show 20261122-064800-1a2b3c4d --model claude-sonnet-4-6 --live-turns 2
    $ visus session show 20261122-064800-1a2b3c4d --json
    $ visus session check 20261122-064800-1a2b3c4d   # missing or corrupt blobs; exit 1
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from visus.cli._common import (
    ChunkOpt,
    DataOpt,
    ImageBudgetOpt,
    LiveTurnsOpt,
    SessionArg,
    counted,
    data_root,
    retention,
)

if TYPE_CHECKING:
    from visus.models import ModelSpec
    from visus.record.messages import ImagePart, Message
    from visus.record.sessions import LoadedSession
    from visus.retention import ImageStatus, RetentionPolicy

__all__ = ["register"]

DEFAULT_MODEL = "claude-sonnet-4-6"
_PREVIEW_CHARS = 72

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]


def _fail(message: str) -> NoReturn:
    typer.echo(f"visus: {message}", err=True)
    raise typer.Exit(2)


def _preview(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _PREVIEW_CHARS else flat[: _PREVIEW_CHARS - 1] + "…"


def _human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB"):
        if size < 1024 or unit == "MB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _origin_text(image: ImagePart) -> str:
    from visus.record.messages import PerceptionOrigin

    origin = image.origin
    if isinstance(origin, PerceptionOrigin):
        page = f" page {origin.page}" if origin.page is not None else ""
        return f"{origin.tool} {origin.source}{page}"
    return f"attachment {origin.filename}" if origin.filename else "attachment"


def _role(m: Message) -> str:
    return f"tool {m.tool_name}" if m.kind == "tool" else m.kind


def _message_text(m: Message) -> str:
    from visus.record.messages import AssistantMessage, TextPart

    text = " ".join(p.text for p in m.parts if isinstance(p, TextPart))
    if isinstance(m, AssistantMessage) and m.tool_calls:
        calls = ", ".join(
            f"{c.name}({json.dumps(dict(c.arguments), ensure_ascii=False)})" for c in m.tool_calls
        )
        text = f"{text} -> {calls}" if text else f"-> {calls}"
    return text


def _image_json(s: ImageStatus) -> dict[str, Any]:
    from visus.record.codec import origin_to_dict

    image = s.image
    return {
        "message": s.message,
        "part": s.part,
        "turn": s.turn,
        "digest": image.digest,
        "media_type": image.media_type,
        "width": image.width,
        "height": image.height,
        "bytes": image.size,
        "origin": origin_to_dict(image.origin),
        "live": s.live,
        "tokens": s.tokens,
    }


def _load(session: str, data: Path | None) -> tuple[LoadedSession, Path]:
    """The session ``session`` names, in any place of the data folder (``ID`` or
    ``INSTANCE/ID``), with its blobs checked."""
    from visus.cli._sessions import find
    from visus.errors import VisusError

    found = find(data_root(data), session)
    try:
        return found.place.sessions.load(found.id, blobs=found.place.blobs), found.place.folder
    except VisusError as e:
        _fail(str(e))


def _model(name: str) -> ModelSpec:
    from visus.errors import VisusError
    from visus.models import get_model

    try:
        return get_model(name)
    except VisusError as e:
        _fail(str(e))


ShowModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model",
        "-m",
        help="Model whose token formula to estimate with (default: the session's own).",
        show_default=False,
    ),
]


def show(
    session: SessionArg,
    data: DataOpt = None,
    model: ShowModelOpt = None,
    live_turns: LiveTurnsOpt = None,
    chunk: ChunkOpt = None,
    budget: ImageBudgetOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show a session's messages and images: live or elided, with token estimates."""
    policy = retention(live_turns, chunk, budget)
    loaded, _ = _load(session, data)
    recorded = loaded.meta.get("model")
    spec = _model(model or (recorded if isinstance(recorded, str) else DEFAULT_MODEL))
    shown = _Shown.of(loaded, policy, spec)
    if as_json:
        typer.echo(json.dumps(_show_json(shown), indent=2, ensure_ascii=False))
    else:
        _show_text(shown)


@dataclass(frozen=True, slots=True)
class _Shown:
    """A session under a retention policy: each message's images, live or elided, and
    the totals ``show`` ends with."""

    loaded: LoadedSession
    policy: RetentionPolicy
    spec: ModelSpec
    by_message: dict[int, list[ImageStatus]]
    totals: dict[str, int]

    @classmethod
    def of(cls, loaded: LoadedSession, policy: RetentionPolicy, spec: ModelSpec) -> _Shown:
        from visus.retention import image_statuses

        statuses = image_statuses(loaded.messages, policy, model=spec)
        by_message: dict[int, list[ImageStatus]] = {}
        for s in statuses:
            by_message.setdefault(s.message, []).append(s)
        live = [s for s in statuses if s.live]
        totals = {
            "images": len(statuses),
            "live": len(live),
            "elided": len(statuses) - len(live),
            "live_tokens": sum(s.tokens for s in live),
            "all_tokens": sum(s.tokens for s in statuses),
        }
        return cls(loaded, policy, spec, by_message, totals)


def _show_json(shown: _Shown) -> dict[str, Any]:
    """``visus session show --json``'s object."""
    loaded, policy, spec = shown.loaded, shown.policy, shown.spec
    return {
        "id": loaded.id,
        "meta": dict(loaded.meta),
        "model": spec.ref,
        "policy": {
            "live_turns": policy.live_turns,
            "chunk": policy.chunk,
            "image_token_budget": policy.image_token_budget,
        },
        "turns": loaded.turn_count,
        "messages": [
            {
                "index": i,
                "turn": m.turn,
                "role": m.kind,
                "text": _message_text(m),
                "images": [_image_json(s) for s in shown.by_message.get(i, [])],
            }
            for i, m in enumerate(loaded.messages)
        ],
        "totals": shown.totals,
        "problems": list(loaded.problems),
    }


def _show_text(shown: _Shown) -> None:
    """``visus session show``: a header, one line per message and image, the totals."""
    loaded, policy, spec, totals = shown.loaded, shown.policy, shown.spec, shown.totals
    typer.echo(
        f"session {loaded.id}: {counted(len(loaded.messages), 'message')}, "
        f"{counted(loaded.turn_count, 'turn')}; "
        f"model {spec.ref}; live_turns {policy.live_turns}, chunk {policy.chunk}"
        + (
            f", image-token budget {policy.image_token_budget}"
            if policy.image_token_budget is not None
            else ""
        )
    )
    for i, m in enumerate(loaded.messages):
        typer.echo(f"#{i:<4} turn {m.turn:<3} {_role(m):<16} {_preview(_message_text(m))}")
        for s in shown.by_message.get(i, []):
            im = s.image
            state = "live  " if s.live else "elided"
            typer.echo(
                f"        image {state} sha256:{im.digest[:12]} {im.width}x{im.height} "
                f"{im.media_type} {_human_bytes(im.size)}  {_origin_text(im)}  ~{s.tokens} tokens"
            )
    typer.echo(
        f"images: {totals['images']} ({totals['live']} live, {totals['elided']} elided); "
        f"image tokens per request ~{totals['live_tokens']} "
        f"(all images kept: ~{totals['all_tokens']})"
    )
    if not spec.vision:
        typer.echo(f"note: {spec.ref} is not known to take images")
    if loaded.problems:
        typer.echo(f"problems ({len(loaded.problems)}):")
        for p in loaded.problems:
            typer.echo(f"  {p}")


def check(
    session: SessionArg,
    data: DataOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Check a session's log and every blob it references: missing blobs, and blobs whose
    bytes no longer hash to their digest (corrupt). Exit code 1 when anything is wrong."""
    from visus.cli._sessions import find
    from visus.errors import VisusError
    from visus.record.messages import DocumentPart, ImagePart
    from visus.record.sessions import degrade_bad_blobs

    found = find(data_root(data), session)
    try:
        loaded = found.place.sessions.load(found.id)  # log damage only; blobs are read below
    except VisusError as e:
        _fail(str(e))
    problems = list(loaded.problems)
    degrade_bad_blobs(loaded.messages, found.place.blobs, problems)
    blobs = {
        p.digest
        for m in loaded.messages
        for p in m.parts
        if isinstance(p, ImagePart | DocumentPart)
    }
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "session": session,
                    "messages": len(loaded.messages),
                    "blobs": len(blobs),
                    "ok": not problems,
                    "problems": problems,
                },
                indent=2,
            )
        )
    else:
        typer.echo(
            f"{session}: {counted(len(loaded.messages), 'message')}, "
            f"{counted(len(blobs), 'blob')} checked"
        )
        for p in problems:
            typer.echo(f"  {p}")
        typer.echo("ok" if not problems else counted(len(problems), "problem"))
    if problems:
        raise typer.Exit(1)


def list_sessions(data: DataOpt = None, as_json: JsonOpt = False) -> None:
    """List every session of the data folder (visus run/chat, the web chat, tether
    instances), most recently modified first."""
    from visus.cli._sessions import places, where_text

    root = data_root(data)
    rows = [(p, i) for p in places(root) for i in p.sessions.list()]
    rows.sort(key=lambda row: (-row[1].modified, row[0].prefix + row[1].id))
    if as_json:
        typer.echo(
            json.dumps(
                [
                    {
                        "id": i.id,
                        "ref": p.prefix + i.id,
                        "where": p.label,
                        "messages": i.messages,
                        "turns": i.turns,
                        "bytes": i.size,
                        "modified": datetime.fromtimestamp(i.modified, UTC).isoformat(),
                    }
                    for p, i in rows
                ],
                indent=2,
            )
        )
        return
    if not rows:
        typer.echo(f"no sessions under {where_text(root)}")
        return
    for p, i in rows:
        when = datetime.fromtimestamp(i.modified, UTC).strftime("%Y-%m-%d %H:%M:%S")
        typer.echo(
            f"{p.prefix + i.id}  {counted(i.messages, 'message')}, {counted(i.turns, 'turn')}, "
            f"modified {when} UTC  ({p.label})"
        )


def remove(
    sessions: Annotated[
        list[str], typer.Argument(help="Session ids (ID or INSTANCE/ID, see `visus session list`).")
    ],
    data: DataOpt = None,
) -> None:
    """Delete sessions: their messages and attachments. Images no other session holds
    are removed by the next `visus gc`."""
    from visus.cli._sessions import find, remove

    root = data_root(data)
    found = [find(root, ref) for ref in sessions]  # every name checked before any delete
    for f in found:
        remove(f)
        typer.echo(f"removed session {f.ref} ({f.place.label})")
    typer.echo(
        "its images go at the next `visus gc` unless another session holds them (images "
        "written in the last hour wait for a later one, or `visus gc --grace 0`)"
    )


def register(app: typer.Typer) -> None:
    from visus.cli._help import DATA

    group = typer.Typer(
        name="session", help="Inspect and remove recorded sessions.", no_args_is_help=True
    )
    group.command("show")(show)
    group.command("list")(list_sessions)
    group.command("check")(check)
    group.command("rm")(remove)
    app.add_typer(group, name="session", rich_help_panel=DATA)
