"""The file store: today's layout under one folder, the embedded default.

::

    <root>/sessions/<id>.jsonl                     namespace ""
    <root>/sessions/<id>/attachments/              its attachments (files/, manifest.json)
    <root>/blobs/<ab>/<cd>/<digest>.<ext>
    <root>/instances/<id>/instance.json            an instance's config
    <root>/instances/<id>/sessions, .../blobs      namespace "instances/<id>"

Example:
    >>> import tempfile
    >>> store = FileStore(tempfile.mkdtemp())
    >>> sid = store.sessions("instances/i-1").create("chat")
    >>> store.sessions("instances/i-1").exists("chat"), store.sessions().exists("chat")
    (True, False)
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from visus.attachments import AttachmentStore
from visus.errors import StoreError
from visus.paths import blobs_dir, private_dir, sessions_dir
from visus.record.blobs import FileBlobStore
from visus.record.sessions import SessionStore
from visus.store.base import Collected, validate_namespace

__all__ = ["FileStore"]

_INSTANCE_FILE = "instance.json"


class FileStore:
    """:class:`~visus.store.base.Store` on local files under ``root``."""

    shared = False
    schema_version = 0

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"FileStore({str(self.root)!r})"

    def folder(self, namespace: str = "") -> Path:
        """The folder of ``namespace`` (its sessions and blobs live under it)."""
        ns = validate_namespace(namespace)
        return self.root / ns if ns else self.root

    def sessions(self, namespace: str = "") -> SessionStore:
        return SessionStore(sessions_dir(self.folder(namespace)))

    def attachments(self, namespace: str, session_id: str) -> AttachmentStore:
        """Today's layout: ``<namespace folder>/sessions/<id>/attachments/``."""
        return AttachmentStore.for_session(self.folder(namespace), session_id)

    def blobs(self, namespace: str = "") -> FileBlobStore:
        return FileBlobStore(blobs_dir(self.folder(namespace)))

    def _instance_file(self, instance_id: str) -> Path:
        return self.folder(f"instances/{instance_id}") / _INSTANCE_FILE

    def put_instance(self, config: Mapping[str, Any]) -> None:
        """Write the config via a temp file, fsync and rename (a crash leaves old or new).

        Readable by its owner only: it may hold the headers (tokens) of the MCP servers
        the create request named.
        """
        path = self._instance_file(str(config["id"]))
        try:
            private_dir(path.parent)
            tmp = path.with_suffix(".tmp")
            tmp.unlink(missing_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with open(fd, "w", encoding="utf-8") as f:
                json.dump(dict(config), f, indent=2)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as e:
            raise StoreError(f"cannot save instance {config['id']!r}: {e}") from e

    def get_instance(self, instance_id: str) -> dict[str, Any] | None:
        path = self._instance_file(instance_id)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            raise StoreError(f"cannot read instance {instance_id!r} from {path}: {e}") from e
        if not isinstance(data, dict):
            raise StoreError(f"{path}: not an instance config (a JSON object)")
        return data

    def list_instances(self) -> list[dict[str, Any]]:
        """Every readable instance config, oldest first (unreadable ones are skipped)."""
        out: list[dict[str, Any]] = []
        for path in sorted((self.root / "instances").glob(f"*/{_INSTANCE_FILE}")):
            try:
                found = self.get_instance(path.parent.name)
            except StoreError:
                continue
            if found is not None:
                out.append(found)
        out.sort(key=lambda c: str(c.get("created", "")))
        return out

    def delete_instance(self, instance_id: str) -> bool:
        folder = self.folder(f"instances/{instance_id}")
        existed = folder.is_dir()
        shutil.rmtree(folder, ignore_errors=True)
        return existed

    def namespaces(self) -> list[str]:
        """The data folder's own namespace and every instance's."""
        found = [""]
        inst = self.root / "instances"
        if inst.is_dir():
            found += [f"instances/{p.name}" for p in sorted(inst.iterdir()) if p.is_dir()]
        return found

    def gc(self, *, grace_seconds: float = 3600.0) -> Collected:
        """Remove blobs no session of their namespace names; say how many went.

        Blobs written in the last ``grace_seconds`` stay (a turn may have stored an
        image it has not yet recorded in a message); they are counted as ``young``.
        """
        removed = young = 0
        cutoff = time.time() - grace_seconds
        for ns in self.namespaces():
            blobs = self.blobs(ns)
            named = set(self.sessions(ns).referenced_digests())
            live = set(named)
            for digest in blobs.digests():
                path = blobs.path(digest)
                if path is not None and path.stat().st_mtime > cutoff:
                    live.add(digest)
                    young += digest not in named
            removed += blobs.gc(live)
        return Collected(removed, young)

    def close(self) -> None:
        """Nothing to close: every call opens and closes its own files."""
