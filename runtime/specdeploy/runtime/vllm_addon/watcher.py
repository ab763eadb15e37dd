"""Watching the mounted table files and swapping in a new table when they change.

A ConfigMap volume updates by swapping a ``..data`` symlink, so the file the
pod sees changes inode, size or mtime; polling ``os.stat`` every few seconds
catches that on every filesystem, with no inotify dependency, and costs
nothing on the engine's thread (this runs in a daemon thread of its own).
Unchanged bytes (same sha256) are not reloaded, so a touch does not reset
the adaptive policy's live statistics.

A new table replaces the policy as a whole: live statistics restart from the
new profile's prior (a new table usually comes from a new profile).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from specdeploy.runtime.vllm_addon.table_source import (
    LoadedTable,
    TableError,
    digest_of,
    read_files,
)

Signature = tuple[tuple[int, int, int] | None, ...]
Loader = Callable[[bytes, bytes | None], LoadedTable]


log = logging.getLogger("specdeploy.addon")


def signature(paths: tuple[Path, ...]) -> Signature:
    """(inode, size, mtime_ns) of each path after following links; None when missing."""
    out: list[tuple[int, int, int] | None] = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            out.append(None)
        else:
            out.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


class TableWatcher:
    """Polls the table (and profile) file; calls ``on_table`` or ``on_error``."""

    def __init__(
        self,
        table_file: Path,
        profile_file: Path | None,
        load: Loader,
        on_table: Callable[[LoadedTable], None],
        on_error: Callable[[str], None],
        interval: float,
        on_checked: Callable[[int], None] | None = None,
    ) -> None:
        """``on_checked`` is told the nanoseconds each check of the thread took (self-timing)."""
        self.table_file = table_file
        self.profile_file = profile_file
        self._paths = (table_file,) if profile_file is None else (table_file, profile_file)
        self._load = load
        self._on_table = on_table
        self._on_error = on_error
        self.interval = interval
        self._on_checked = on_checked
        self._seen: Signature | None = None
        self._digest: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def check(self) -> bool:
        """Look once; load when the files changed. True when a new table went in."""
        now = signature(self._paths)
        if now == self._seen:
            return False
        self._seen = now
        try:
            table_bytes, profile_bytes = read_files(self.table_file, self.profile_file)
            digest = digest_of(table_bytes, profile_bytes)
            if digest == self._digest:
                return False
            table = self._load(table_bytes, profile_bytes)
        except TableError as err:
            self._on_error(str(err))
            return False
        except Exception as err:  # never let a table kill the watcher
            self._on_error(f"{self.table_file}: unexpected {type(err).__name__}: {err}")
            return False
        try:
            self._on_table(table)
        except Exception as err:  # an install bug: keep the table in force, keep watching
            self._on_error(f"{self.table_file}: installing it raised {type(err).__name__}: {err}")
            return False
        self._digest = digest
        return True

    def start(self) -> None:
        """Check now, then every ``interval`` seconds in a daemon thread."""
        self.check()
        self._thread = threading.Thread(target=self._run, name="specdeploy-table", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + 1.0)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                if self._on_checked is None:
                    self.check()
                    continue
                started = time.perf_counter_ns()
                self.check()
                self._on_checked(time.perf_counter_ns() - started)
            except Exception:  # the thread is the only reloader: it must outlive any bug
                log.exception("specdeploy: table watcher check failed; still watching")
