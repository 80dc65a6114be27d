"""Process trees from /proc, and the watchdog that kills them if the runner dies.

Process trees: a component's tree is its process, every descendant (by parent pid),
and every member of the process groups those belong to. RQ's horse calls
``os.setpgrp``, so signalling the worker's group alone would leave the job running.
We freeze the whole tree first (SIGSTOP, round by round until it stops growing) and
signal second, because a dead parent's children are re-parented to init and can no
longer be found through it, and a child forked after a single snapshot would escape.

A pid is identified by (pid, start time in clock ticks) so that a recycled pid is
never signalled by mistake.

The watchdog (``python -m stack.embedded.watchdog``) runs in its own session, reading
``pid START`` lines on stdin from the supervisor. ``bye`` means a clean stop: exit
quietly. EOF without ``bye`` means the runner died (even by SIGKILL): SIGKILL every
registered tree, then exit. It never kills anything by name.
"""

from __future__ import annotations

import os
import signal
import sys
from dataclasses import dataclass
from typing import IO, Iterable

__all__ = [
    "ProcInfo",
    "Identity",
    "snapshot",
    "identity",
    "is_alive",
    "collect_tree",
    "signal_tree",
    "watch",
    "main",
]

Identity = tuple[int, int]  # (pid, start time in clock ticks since boot)


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    ppid: int
    pgid: int
    start: int
    state: str


def _read_stat(pid: int) -> ProcInfo | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read().decode(errors="replace")
    except OSError:
        return None
    # comm (field 2) may contain spaces and parentheses: split after the last ')'.
    rest = raw[raw.rfind(")") + 2 :].split()
    return ProcInfo(pid=pid, state=rest[0], ppid=int(rest[1]), pgid=int(rest[2]), start=int(rest[19]))


def snapshot() -> dict[int, ProcInfo]:
    """Every process currently in /proc."""
    procs: dict[int, ProcInfo] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            info = _read_stat(int(entry))
            if info is not None:
                procs[info.pid] = info
    return procs


def identity(pid: int) -> Identity | None:
    info = _read_stat(pid)
    return None if info is None else (pid, info.start)


def is_alive(ident: Identity) -> bool:
    """True while that very process exists and is not a zombie (init may never reap it)."""
    info = _read_stat(ident[0])
    return info is not None and info.start == ident[1] and info.state != "Z"


def _protected_groups() -> set[int]:
    # Never signal our own group, the kernel's or init's, whatever a child did.
    return {0, 1, os.getpgrp()}


def collect_tree(roots: Iterable[Identity], procs: dict[int, ProcInfo] | None = None) -> set[Identity]:
    """The live processes of the trees rooted at ``roots`` (descendants + their groups)."""
    procs = snapshot() if procs is None else procs
    children: dict[int, list[int]] = {}
    members: dict[int, list[int]] = {}
    for info in procs.values():
        children.setdefault(info.ppid, []).append(info.pid)
        members.setdefault(info.pgid, []).append(info.pid)
    protected = _protected_groups()
    found: set[int] = set()
    todo = [pid for pid, start in roots if pid in procs and procs[pid].start == start]
    while todo:
        pid = todo.pop()
        if pid in found or pid == os.getpid():
            continue
        found.add(pid)
        todo.extend(children.get(pid, ()))
        if procs[pid].pgid not in protected:
            todo.extend(members.get(procs[pid].pgid, ()))
    return {(pid, procs[pid].start) for pid in found if procs[pid].state != "Z"}


_FREEZE_PASSES = 8
"""Rounds of "find new members, SIGSTOP them" before the real signal. A frozen process
cannot fork, so the tree stops growing after a round or two; eight is a safety cap."""


def signal_tree(roots: Iterable[Identity], sig: int) -> set[Identity]:
    """Freeze the whole tree, then signal every group and every pid. Returns the tree.

    Freezing first closes a race that a single snapshot leaves open: a worker that
    forks its job's horse between the snapshot and the signal (the horse then calls
    ``setpgrp``, leaving the worker's group) would escape the kill and finish the job
    it was meant to lose. Each round signals SIGSTOP to what it newly found; once a
    round finds nothing new, no member can fork any more and ``sig`` goes to all.
    SIGCONT needs no freeze (it cannot lose a race to a fork).
    """
    if sig == signal.SIGCONT:
        procs = snapshot()
        tree = collect_tree(roots, procs)
        _signal_members(tree, procs, sig)
        return tree
    tree: set[Identity] = set()
    roots = set(roots)
    for _ in range(_FREEZE_PASSES):
        procs = snapshot()
        found = collect_tree(roots | tree, procs)
        new = found - tree
        tree |= found
        if not new:
            break
        _signal_members(new, procs, signal.SIGSTOP)
    if sig != signal.SIGSTOP:
        _signal_members(tree, snapshot(), sig)
    return tree


def _signal_members(members: set[Identity], procs: dict[int, ProcInfo], sig: int) -> None:
    """Signal each member's process group (unless protected), then each member by pid."""
    groups = {procs[pid].pgid for pid, _ in members if pid in procs}
    for pgid in groups - _protected_groups():
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    for pid, start in members:
        if is_alive((pid, start)):  # re-check: the pid could have been recycled meanwhile
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass


def watch(stream: IO[str]) -> bool:
    """Register pids from ``stream`` until EOF; True if the runner said a clean ``bye``."""
    registered: set[Identity] = set()
    for line in stream:
        parts = line.split()
        if parts == ["bye"]:
            return True
        if len(parts) == 3 and parts[0] == "pid":
            registered.add((int(parts[1]), int(parts[2])))
    # The runner is gone without a goodbye: kill everything it started, twice to
    # catch children forked between the two passes.
    for _ in range(2):
        signal_tree(registered, signal.SIGKILL)
    return False


def main() -> int:
    # Our own session already shields us from the terminal; also ignore the polite
    # signals so a stray Ctrl-C or SIGHUP cannot take the orphan protection away.
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    clean = watch(sys.stdin)
    print("watchdog: clean stop" if clean else "watchdog: runner gone, killed its processes", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
