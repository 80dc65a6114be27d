"""A CPU hog for `proctor sweep --stress K`: one busy-loop process per core.

A scenario that passes only on an idle machine is a scenario that flakes in CI. The
hog keeps K cores busy for the whole sweep so timing assumptions in the stack or the
harness show up as failing seeds. Each hog process is bounded three ways, so none
outlives the sweep: ``CpuHog.stop()`` ends it by pid (also on Ctrl-C or an exception,
as a context manager); it exits by itself when its parent is gone (the sweep was
SIGKILLed); and it exits after ``max_seconds`` whatever happens.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from types import TracebackType

__all__ = ["DEFAULT_HOG_MAX_SECONDS", "CpuHog", "hog_command"]

DEFAULT_HOG_MAX_SECONDS = 6 * 3600.0
"""Backstop lifetime of one hog process: longer than any sweep we run, finite in any case."""

_STOP_GRACE_SECONDS = 5.0  # SIGTERM, then SIGKILL: a busy loop has no reason to linger

# Spins, and every ~10 ms of work checks whether it should stop: parent gone or deadline passed.
_HOG_CODE = """
import os, sys, time
parent, deadline = int(sys.argv[1]), time.monotonic() + float(sys.argv[2])
while os.getppid() == parent and time.monotonic() < deadline:
    for _ in range(100_000):
        pass
"""


def hog_command(parent_pid: int, max_seconds: float) -> list[str]:
    return [sys.executable, "-c", _HOG_CODE, str(parent_pid), str(max_seconds)]


@dataclass
class CpuHog:
    """``cores`` busy-loop processes, started by ``start()`` and ended by ``stop()``."""

    cores: int
    max_seconds: float = DEFAULT_HOG_MAX_SECONDS
    processes: list[subprocess.Popen] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.cores < 0:
            raise ValueError(f"cores={self.cores}: must be 0 or more")
        if not self.max_seconds > 0:
            raise ValueError(f"max_seconds={self.max_seconds}: must be greater than 0")

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    def start(self) -> CpuHog:
        if self.processes:
            raise RuntimeError("CpuHog already started")
        try:
            for core in range(self.cores):
                self.processes.append(self._spawn(core))
        except BaseException:
            self.stop()  # never leave half a hog behind
            raise
        return self

    def _spawn(self, core: int) -> subprocess.Popen:
        # Own session: a Ctrl-C in the terminal reaches only the sweep, which then stops us by pid.
        process = subprocess.Popen(hog_command(os.getpid(), self.max_seconds), stdin=subprocess.DEVNULL,
                                   start_new_session=True)
        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        if cpus:
            os.sched_setaffinity(process.pid, {cpus[core % len(cpus)]})  # one hog per core, not all on one
        return process

    def stop(self) -> None:
        """End every hog process by its pid and reap it; safe to call twice."""
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=_STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.processes = []

    def __enter__(self) -> CpuHog:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
