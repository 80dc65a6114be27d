"""Process priority (nice) of the stack's processes: who gets the two cores under contention.

Web nodes run at 0: accepting answers is the promise (p99 <= 1 s under worker kills). The
urgent merit lane runs at 0 as well; the AI and SMS lanes at 15, so a merit horse (a fork and
a few ms of CPU) is scheduled ahead of the AI and SMS lanes draining a 2,000-job backlog
(at nice 0 vs 15 the kernel's weights are 1024 vs 36: about 28:1). The fake providers run at
10 in the embedded runner: in production they are someone else's machines, and here they
would otherwise take CPU from the exam at nice 0 (docs/lane-isolation.md "Figures" has the
measured effect of each level).

``PROCTOR_NICENESS`` overrides entries, e.g. ``merit=5,ai=10,sms=10,provider=0`` (the levels
before #12's measurements); the isolation bench compares such variants side by side.
Niceness is absolute and never lowered below what the process inherited (an unprivileged
process cannot raise its priority).

A level may also be ``idle``: Linux's SCHED_IDLE policy (sched(7)), which any process may
choose for itself and its children. Such a process gets a CPU only when no normal process
wants it, with the smallest weight (3, below nice 19's 15), and the scheduler treats a core
that runs only SCHED_IDLE work as free when it places a waking task: a merit horse or a web
thread that wakes while a bulk lane's horse has a core takes that core at once instead of
waiting for a turn at nice 15.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Literal, Union

__all__ = ["IDLE", "Level", "NICENESS", "NICENESS_ENV", "apply_niceness", "niceness", "niceness_table"]

IDLE: Literal["idle"] = "idle"
Level = Union[int, Literal["idle"]]
"""A nice level 0..19, or IDLE (SCHED_IDLE)."""

NICENESS: dict[str, Level] = {"web": 0, "relay": 0, "merit": 0, "ai": 15, "sms": 15, "provider": 10}
NICENESS_ENV = "PROCTOR_NICENESS"

log = logging.getLogger("proctor.priority")


def niceness_table(environ: Mapping[str, str] | None = None) -> dict[str, Level]:
    """NICENESS with the overrides of ``$PROCTOR_NICENESS``; ValueError names the bad entry."""
    raw = (os.environ if environ is None else environ).get(NICENESS_ENV, "").strip()
    table = dict(NICENESS)
    for entry in filter(None, (part.strip() for part in raw.split(","))):
        role, sep, value = entry.partition("=")
        if not sep or role.strip() not in NICENESS:
            raise ValueError(f"{NICENESS_ENV}: {entry!r}: expected <role>=<0..19 or idle>, roles {sorted(NICENESS)}")
        table[role.strip()] = _level(entry, value.strip())
    return table


def _level(entry: str, value: str) -> Level:
    if value == IDLE:
        return IDLE
    try:
        level = int(value)
    except ValueError:
        raise ValueError(f"{NICENESS_ENV}: {entry!r}: the level must be an integer 0..19 or idle") from None
    if not 0 <= level <= 19:
        raise ValueError(f"{NICENESS_ENV}: {entry!r}: the level must be 0..19 or idle")
    return level


def niceness(role: str, environ: Mapping[str, str] | None = None) -> Level:
    """The level for a role ("web", a lane, "provider"); 0 for a role with no entry."""
    return niceness_table(environ).get(role, 0)


def apply_niceness(role: str, environ: Mapping[str, str] | None = None) -> Level:
    """Set this process's level for ``role`` (never above the inherited priority); returns it.
    Horses and other children inherit it across fork."""
    level = niceness(role, environ)
    if os.sched_getscheduler(0) == os.SCHED_IDLE:  # inherited: leaving it would take privileges
        return IDLE
    if isinstance(level, str):  # IDLE
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            return IDLE
        except OSError as exc:  # a sandbox that filters the call: the lowest nice level instead
            log.warning("SCHED_IDLE refused for %s (%s); running at nice 19", role, exc)
            level = 19
    current = os.getpriority(os.PRIO_PROCESS, 0)
    target = max(current, level)
    if target != current:
        os.setpriority(os.PRIO_PROCESS, 0, target)
    return target
