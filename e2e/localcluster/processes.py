"""Local processes with a log, a recorded PID, readiness probes and a clean stop.

Teardown must leave nothing behind even when the harness itself crashed, so
every component's PID is written to ``<workdir>/run/<name>.pid`` the moment it
is spawned, together with the kernel's start time of that process: a later
``down`` (another process, maybe days later) kills exactly what was started,
never an unrelated process that happens to reuse the PID. Each component gets
its own session and process group, so a stop takes its children too; and
every process started for a work directory carries ``MARKER=<workdir>`` in its
environment (children inherit it), so a final sweep finds stragglers whose
group leader died first.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

Probe = Callable[[], bool]
MARKER = "SPECDEPLOY_CLUSTER_WORKDIR"

# Popen objects of children this process started, kept so they are reaped
# (and not reported as leaked) when stopped.
_children: dict[int, subprocess.Popen[bytes]] = {}


@dataclass(frozen=True)
class Record:
    """What is needed to find one started process again: PID and kernel start time."""

    name: str
    pid: int
    start_ticks: int


class ComponentFailed(RuntimeError):
    """A component died or did not become ready; the message points at its log."""


def start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (start time since boot), None if gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces; fields resume after its ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] == "Z":
        return None
    return int(fields[19])


def alive(record: Record) -> bool:
    return start_ticks(record.pid) == record.start_ticks


def pid_file(run_dir: Path, name: str) -> Path:
    return run_dir / f"{name}.pid"


def spawn(
    name: str,
    argv: list[str],
    *,
    run_dir: Path,
    log_dir: Path,
    marker: str,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Record:
    """Start ``argv`` detached in its own session, log to ``<log_dir>/<name>.log``, record it."""
    full_env = {**(os.environ if env is None else env), MARKER: marker}
    run_dir.mkdir(parents=True, exist_ok=True)
    log_dir.mkdir(parents=True, exist_ok=True)
    with (log_dir / f"{name}.log").open("ab") as log:
        child = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=full_env,
            cwd=cwd,
            start_new_session=True,
        )
    _children[child.pid] = child
    ticks = start_ticks(child.pid)
    record = Record(name, child.pid, ticks if ticks is not None else -1)
    pid_file(run_dir, name).write_text(json.dumps(record.__dict__))
    return record


def read_records(run_dir: Path) -> list[Record]:
    """Every process recorded in ``run_dir``, in the order they were started."""
    files = (
        sorted(run_dir.glob("*.pid"), key=lambda p: p.stat().st_mtime) if run_dir.is_dir() else []
    )
    return [Record(**json.loads(f.read_text())) for f in files]


def stop(record: Record, *, grace: float = 10.0) -> None:
    """SIGTERM the process group, SIGKILL after ``grace`` seconds; then reap if ours."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        if not alive(record):
            break
        try:
            os.killpg(record.pid, sig)
        except ProcessLookupError:
            try:
                os.kill(record.pid, sig)  # a straggler that is not a group leader
            except ProcessLookupError:
                break
        deadline = time.monotonic() + wait
        while alive(record) and time.monotonic() < deadline:
            _reap(record.pid)
            time.sleep(0.05)
    _reap(record.pid)
    if alive(record):
        raise ComponentFailed(f"{record.name} (pid {record.pid}) survived SIGKILL")


def _reap(pid: int) -> None:
    child = _children.get(pid)
    if child is not None and child.poll() is not None:
        del _children[pid]


GROUP_EXIT_S = 2.0
"""How long a stopped group's members get to exit before they count as stragglers."""


def stop_all(run_dir: Path, *, marker: str) -> list[Record]:
    """Stop every recorded process, last started first, then any straggler carrying ``marker``."""
    stopped = []
    for record in reversed(read_records(run_dir)):
        if alive(record):
            stop(record)
            stopped.append(record)
        pid_file(run_dir, record.name).unlink(missing_ok=True)
    # The group's other members got the same signal; on a loaded machine they
    # may take a moment to go. Only what outlives that is a straggler.
    deadline = time.monotonic() + GROUP_EXIT_S
    while marked_processes(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in marked_processes(marker):
        ticks = start_ticks(pid)
        if ticks is not None:
            stop(Record("straggler", pid, ticks), grace=2.0)
            stopped.append(Record("straggler", pid, ticks))
    return stopped


def marked_processes(marker: str) -> list[int]:
    """PIDs of live processes whose environment has ``MARKER=marker``."""
    needle = f"{MARKER}={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and start_ticks(int(entry.name)) is not None:
            found.append(int(entry.name))
    return found


def log_tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def wait_ready(record: Record, probe: Probe, *, log: Path, timeout: float) -> None:
    """Poll ``probe`` until true; fail fast, naming the log, if the process dies or times out."""
    deadline = time.monotonic() + timeout
    while True:
        if not alive(record):
            code = _exit_code(record.pid)
            raise ComponentFailed(
                f"{record.name} exited{code} before it was ready; see {log}:\n{log_tail(log)}"
            )
        if probe():
            return
        if time.monotonic() > deadline:
            raise ComponentFailed(
                f"{record.name} not ready after {timeout:.0f} s; see {log}:\n{log_tail(log)}"
            )
        time.sleep(0.2)


def _exit_code(pid: int) -> str:
    child = _children.get(pid)
    if child is None or child.poll() is None:
        return ""
    return f" with code {child.returncode}"
