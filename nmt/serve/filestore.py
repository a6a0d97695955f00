"""The server's store of documents for `/translate_file`: a directory of its own, one folder per document under an
unguessable token, bounded by serve.max_files, swept after serve.file_ttl, the file threads that translate them
(nmt.serve.files)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import secrets
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from nmt.serve.http_errors import ApiError

FILE_THREADS = 2  # documents read and written at once (their sentences share the model's queue with all requests)


@dataclass
class Entry:
    folder: Path
    cancel: threading.Event
    path: Path | None = None  # the translated file (named as downloaded), once there
    expires: float = float("inf")


class FileStore:
    """The server's directory of documents in translation and awaiting download, bounded by serve.max_files."""

    def __init__(self, max_files: int, ttl: float):
        self.max_files, self.ttl = max_files, ttl
        self.entries: dict[str, Entry] = {}
        self.executor = concurrent.futures.ThreadPoolExecutor(FILE_THREADS, thread_name_prefix="nmt-files")
        self._root: Path | None = None
        self._sweeper: asyncio.Task | None = None

    def open(self) -> None:  # lifespan start: the sweeper of expired files
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever())

    def close(self) -> None:  # lifespan end, after the models stopped: every translation stopped, every file removed
        if self._sweeper is not None:
            self._sweeper.cancel()
        [entry.cancel.set() for entry in self.entries.values()]  # each stops at its next slice of sentences
        self.executor.shutdown(wait=True, cancel_futures=True)
        self.entries.clear()
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)

    def reserve(self) -> tuple[str, Entry]:
        self.sweep()
        if len(self.entries) >= self.max_files:
            raise ApiError(503, f"the server holds serve.max_files={self.max_files} files in translation or awaiting "
                                "download: retry later", "serve.max_files", retry_after=min(self.ttl, 60))
        if self._root is None or not self._root.is_dir():
            self._root = Path(tempfile.mkdtemp(prefix="nmt-serve-files-"))
        token = secrets.token_urlsafe(24)
        entry = self.entries[token] = Entry(self._root / token, threading.Event())
        entry.folder.mkdir()
        return token, entry

    def remove(self, token: str) -> None:
        if (entry := self.entries.pop(token, None)) is not None:
            shutil.rmtree(entry.folder, ignore_errors=True)

    def sweep(self) -> None:
        now = time.monotonic()
        for token in [t for t, e in self.entries.items() if e.expires < now]:
            self.remove(token)

    async def _sweep_forever(self) -> None:
        while not await asyncio.sleep(min(self.ttl / 2, 60)):  # (sleep returns None)
            self.sweep()
