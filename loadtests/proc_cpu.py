"""CPU seconds per process tree and per process group, read from /proc (Linux).

A process's CPU is ``utime + stime`` of itself plus ``cutime + cstime``: what its reaped
children used. So the CPU of a forking RQ worker's horses lands in the worker once it waits
for them, and a tree's sum over live processes counts every finished child exactly once.
A process that exits before a sample and whose parent is outside the tree is lost: the
sampler reads often (``Sampler.interval``) so that a long-lived tree is counted whole.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ProcessTable", "Sampler", "machine_busy_seconds", "read_table"]

_TICKS = os.sysconf("SC_CLK_TCK")
_PROC = Path("/proc")


@dataclass(frozen=True)
class _Stat:
    pid: int
    ppid: int
    pgid: int
    cpu: float  # own + reaped children, seconds


@dataclass(frozen=True)
class ProcessTable:
    """One snapshot of /proc: every readable process with its parent, group and CPU."""

    stats: dict[int, _Stat]

    def tree(self, root: int) -> set[int]:
        """``root`` and all its live descendants."""
        children: dict[int, list[int]] = {}
        for stat in self.stats.values():
            children.setdefault(stat.ppid, []).append(stat.pid)
        found, todo = set(), [root]
        while todo:
            pid = todo.pop()
            if pid in self.stats and pid not in found:
                found.add(pid)
                todo.extend(children.get(pid, ()))
        return found

    def group(self, pgid: int) -> set[int]:
        return {stat.pid for stat in self.stats.values() if stat.pgid == pgid}

    def cpu(self, pids: set[int]) -> float:
        return sum(self.stats[pid].cpu for pid in pids if pid in self.stats)


def _parse_stat(text: str) -> _Stat:
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    head, _, rest = text.rpartition(")")
    fields = rest.split()
    pid = int(head.split("(", 1)[0])
    utime, stime, cutime, cstime = (int(value) for value in fields[11:15])
    return _Stat(pid, int(fields[1]), int(fields[2]), (utime + stime + cutime + cstime) / _TICKS)


def read_table() -> ProcessTable:
    stats = {}
    for entry in _PROC.iterdir():
        if entry.name.isdigit():
            try:
                stat = _parse_stat((entry / "stat").read_text())
            except (OSError, ValueError, IndexError):
                continue  # gone between listdir and read
            stats[stat.pid] = stat
    return ProcessTable(stats)


def machine_busy_seconds() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, from /proc/stat."""
    values = [int(v) for v in (_PROC / "stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    total = sum(values[:8])
    return (total - idle) / _TICKS, total / _TICKS


@dataclass
class Sampler:
    """Samples, every ``interval`` seconds in a thread: the stack's tree (its supervisor, found by
    ``stack_root()`` once it exists), the load generator's process group less the stack, the
    machine. ``samples`` holds dicts with ``wall``, ``stack``, ``load``, ``machine_busy``,
    ``machine_total`` and ``components`` (CPU per component tree)."""

    load_pgid: int
    stack_root: object  # Callable[[], int | None]
    components: object = None  # Callable[[], dict[str, int]]: component name -> its root pid
    ledger_root: int | None = None  # a ledger server outside the supervisor's tree: counted as the stack
    interval: float = 0.25
    samples: list[dict[str, float]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def sample(self) -> None:
        table = read_table()
        root = self.stack_root()  # type: ignore[operator]
        stack = table.tree(root) if root else set()
        if self.ledger_root:
            stack |= table.tree(self.ledger_root)
        load = table.group(self.load_pgid) - stack
        busy, total = machine_busy_seconds()
        roots = self.components() if self.components else {}  # type: ignore[operator]
        self.samples.append({"wall": time.time(), "stack": table.cpu(stack), "load": table.cpu(load),
                             "machine_busy": busy, "machine_total": total,
                             "components": {name: table.cpu(table.tree(pid)) for name, pid in roots.items()}})

    def at(self, wall: float) -> dict[str, float] | None:
        """The last sample taken at or before ``wall``."""
        before = [s for s in self.samples if s["wall"] <= wall]
        return before[-1] if before else None
