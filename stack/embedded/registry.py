"""Which stacks are running under a results folder, read from their manifests.

There is no registry file to go stale: a run folder's ``manifest.json`` names every process
it started by (pid, start ticks), so "running" is checked against the kernel each time.
A manifest that still says starting/ready/detached while none of its processes exists is
*stale* (the supervisor was SIGKILLed, the machine rebooted); :func:`running_stacks` marks it
``stale`` on disk so that it is never counted again.

`proctor up` refuses a second command-line stack while one runs (``origin == "cli"``), unless
it is given a name or a run folder of its own; the stacks the harness starts for scenarios and
tests are listed by ``status`` but neither block nor are blocked.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stack.embedded import StackError
from stack.embedded.manifest import MANIFEST_NAME, read_manifest, write_manifest
from stack.embedded.watchdog import is_alive

__all__ = ["LIVE_STATUSES", "RunningStack", "identities", "running_stacks"]

LIVE_STATUSES = frozenset({"starting", "ready", "stopping", "detached"})
"""What a manifest says while its processes should exist; anything else is a finished stack."""

Identity = tuple[int, int]


@dataclass(frozen=True)
class RunningStack:
    run_dir: Path
    manifest: dict[str, Any]
    alive: int  # processes of the manifest still running
    total: int

    @property
    def name(self) -> str:
        return str(self.manifest.get("name") or self.run_dir.name)

    @property
    def origin(self) -> str:
        return str(self.manifest.get("origin") or "harness")

    @property
    def started_at(self) -> float | None:
        value = self.manifest.get("updated_at")
        return float(value) if isinstance(value, (int, float)) else None


def _ident(pid: Any, ticks: Any) -> Identity | None:
    return (int(pid), int(ticks)) if pid and ticks else None


def identities(manifest: dict[str, Any]) -> set[Identity]:
    """Every process the manifest names: supervisor, components and their recorded trees."""
    idents: set[Identity] = set()
    sup = _ident(manifest.get("supervisor_pid"), manifest.get("supervisor_start_ticks"))
    if sup:
        idents.add(sup)
    for entry in manifest.get("components", {}).values():
        ident = _ident(entry.get("pid"), entry.get("start_ticks"))
        if ident:
            idents.add(ident)
        idents.update((int(p), int(t)) for p, t in entry.get("tree", []))
    return idents


def _mark_stale(run_dir: Path, manifest: dict[str, Any]) -> None:
    """Say on disk that this stack is gone, so `status` and `up` stop counting it."""
    try:
        write_manifest(run_dir, {**manifest, "status": "stale", "stale_since": time.time(),
                                 "stale_was": manifest.get("status")})
    except OSError:
        pass  # a read-only results folder: it is still recognised as stale next time


def running_stacks(runs_root: Path) -> list[RunningStack]:
    """The stacks under ``runs_root`` with a live process, oldest first; stale ones are marked."""
    found = []
    if not runs_root.is_dir():
        return []
    for run_dir in sorted(p for p in runs_root.iterdir() if p.is_dir() and not p.is_symlink()):
        if not (run_dir / MANIFEST_NAME).is_file():
            continue
        try:
            manifest = read_manifest(run_dir)
        except StackError:
            continue
        if manifest.get("status") not in LIVE_STATUSES:
            continue
        idents = identities(manifest)
        alive = sum(is_alive(i) for i in idents)
        if alive:
            found.append(RunningStack(run_dir.resolve(), manifest, alive, len(idents)))
        else:
            _mark_stale(run_dir, manifest)
    return found
