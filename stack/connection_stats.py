"""Per-process counts of Valkey connects and connection-level errors, and their one file.

Every Valkey connection the stack opens (``stack.valkey_client``) counts its connects
and its errors by kind (``ERROR_KINDS``) into the process's ``ConnectionStats``. Until a
process entry point installs its own (``record_process_connections``, called by the web
node, the relay and the lane workers) the counts stay in memory: importing the stack
writes no file and registers no exit hook.

Under the embedded runner (``settings.component`` set) the counts go to ONE file per
process, ``<run_dir>/connections/<component>.<pid>.jsonl``: each write appends the
writer's whole snapshot as one line. A forked child (an RQ work horse, one per job)
starts its own counts and appends its lines, under its own pid, to its parent's file:
a worker that ran 900 jobs leaves one file, not 900. Appending, not rewriting, because
a horse and its parent cannot share one counter without a lock across processes, and
because a horse exits with ``os._exit`` right after its job: one small ``O_APPEND``
write is its whole contribution, never torn by a concurrent writer. The reader
(``chaos/observe/valkey_stats.py``) keeps each pid's last line, so the per-pid view is the one
the old file-per-pid layout gave.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from pathlib import Path
from typing import Any, Callable

from stack.config import Settings

__all__ = [
    "ERROR_KINDS",
    "EVENT_KINDS",
    "STATS_DIR",
    "STATS_SUFFIX",
    "TIMEOUT_PHASES",
    "ConnectionStats",
    "component_name",
    "install_process_stats",
    "process_stats",
    "record_process_connections",
]

ERROR_KINDS = ("connect_timeout", "timeout", "reset", "refused", "tls", "max_clients", "other")
EVENT_KINDS = ("oom_refusals", "limiter_fallbacks", "relay_failed_passes")
"""What a component counts besides connections, each a cause of Valkey trouble it survived:
``oom_refusals`` (a command Valkey refused with ``OOM`` under noeviction, counted by the
connection that read the answer), ``limiter_fallbacks`` (a web node's request limiter counted
in memory instead: stack/web/ratelimit.py) and ``relay_failed_passes`` (a relay pass that
failed and was retried after a backoff: stack/relay.py)."""
TIMEOUT_PHASES = ("connect", "handshake")
"""Where a connection attempt ran out of ``valkey_connect_timeout``: the TCP ``connect`` or the TLS
``handshake``. Counted per attempt (a client's retries count each), apart from refusals and
resets, which are ``ERROR_KINDS``: the seed's "connection timeouts" are these."""
STATS_DIR = "connections"
STATS_SUFFIX = ".jsonl"
_NAME_BAD = re.compile(r"[^A-Za-z0-9_.:/-]")


def component_name(settings: Settings | None = None) -> str:
    """``settings.component`` (PROCTOR_COMPONENT, set by the embedded runner), else the node name."""
    name = (settings.component or settings.node_name) if settings else ""
    return _NAME_BAD.sub("_", name or "proctor")[:64]


class ConnectionStats:
    """Per-process counters of Valkey connects and connection-level errors (thread-safe).

    ``path`` set: snapshots are appended to it as JSON lines (at most every
    ``min_interval`` seconds, plus a trailing flush). A forked child starts its own
    counts and appends to the same path under its own pid.
    """

    def __init__(self, component: str = "proctor", path: Path | None = None, min_interval: float = 0.25) -> None:
        self.component = component
        self.path = path
        self.min_interval = min_interval
        self._reset(os.getpid())

    def _reset(self, pid: int) -> None:
        self._pid = pid
        # tells two processes apart that share a pid, hence a file: a restarted container's
        # process is pid 1..8 again (chaos/observe/processes.py splits its lifetimes by it)
        self._started_at = time.time()
        self._lock = threading.Lock()
        self._dump_lock = threading.Lock()  # snapshot and append together: lines stay in count order
        self.connects = 0
        self.errors: dict[str, int] = {}
        self.connect_errors: dict[str, int] = {}
        self.timeouts: dict[str, int] = {}
        self.events: dict[str, int] = {}
        self._last_dump = 0.0
        self._timer: threading.Timer | None = None

    def _check_pid(self) -> None:
        if os.getpid() != self._pid:  # after fork: the child's own counts (and fresh locks)
            self._reset(os.getpid())

    def record_connect(self) -> None:
        self._record(lambda: setattr(self, "connects", self.connects + 1))

    def record_error(self, kind: str, connecting: bool) -> None:
        def bump() -> None:
            self.errors[kind] = self.errors.get(kind, 0) + 1
            if connecting:
                self.connect_errors[kind] = self.connect_errors.get(kind, 0) + 1
        self._record(bump)

    def record_timeout(self, phase: str) -> None:
        """A connection attempt timed out in ``phase`` (one of ``TIMEOUT_PHASES``)."""
        self._record(lambda: self.timeouts.__setitem__(phase, self.timeouts.get(phase, 0) + 1))

    def record_event(self, kind: str) -> None:
        """One of ``EVENT_KINDS`` happened in this process."""
        self._record(lambda: self.events.__setitem__(kind, self.events.get(kind, 0) + 1))

    def _record(self, change: Callable[[], None]) -> None:
        self._check_pid()
        with self._lock:
            change()
        self._maybe_dump()

    def snapshot(self) -> dict[str, Any]:
        self._check_pid()
        with self._lock:
            return {"component": self.component, "pid": self._pid, "connects": self.connects,
                    "errors": dict(self.errors), "connect_errors": dict(self.connect_errors), "events": dict(self.events),
                    "timeouts": dict(self.timeouts), "timeout_total": sum(self.timeouts.values()),
                    "error_total": sum(self.errors.values()), "started_at": self._started_at, "updated_at": time.time()}

    def _maybe_dump(self) -> None:
        if self.path is None:
            return
        if time.monotonic() - self._last_dump >= self.min_interval:
            self.dump()
        elif self._timer is None:  # flush the tail of a burst
            self._timer = threading.Timer(self.min_interval, self._flush)
            self._timer.daemon = True
            self._timer.start()

    def _flush(self) -> None:
        self._timer = None
        self.dump()

    def dump(self) -> None:
        """Append this process's snapshot to the file (no-op without one); never raises."""
        if self.path is None:
            return
        self._check_pid()
        with self._dump_lock:
            self._last_dump = time.monotonic()
            line = (json.dumps(self.snapshot()) + "\n").encode()
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    os.write(fd, line)  # one write: whole lines even with a horse appending too
                finally:
                    os.close(fd)
            except OSError:
                pass  # counting must never break the component


_process_stats = ConnectionStats()


def process_stats() -> ConnectionStats:
    """The counters this process's Valkey connections count into."""
    return _process_stats


def install_process_stats(stats: ConnectionStats) -> ConnectionStats:
    """Make ``stats`` the process's counters (entry points and tests); returns it."""
    global _process_stats
    _process_stats = stats
    return stats


def record_process_connections(settings: Settings) -> ConnectionStats:
    """Called once by a process entry point: count into a file of this process's own when it
    runs under the embedded runner (``settings.component`` set), else in memory only.
    The caller flushes with ``dump()`` on its way out."""
    path = None
    if settings.component:
        name = component_name(settings)
        path = settings.run_dir / STATS_DIR / f"{name}.{os.getpid()}{STATS_SUFFIX}"
    return install_process_stats(ConnectionStats(component_name(settings), path))
