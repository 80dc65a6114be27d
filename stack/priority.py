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
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["NICENESS", "NICENESS_ENV", "apply_niceness", "niceness", "niceness_table"]

NICENESS: dict[str, int] = {"web": 0, "relay": 0, "merit": 0, "ai": 15, "sms": 15, "provider": 10}
NICENESS_ENV = "PROCTOR_NICENESS"


def niceness_table(environ: Mapping[str, str] | None = None) -> dict[str, int]:
    """NICENESS with the overrides of ``$PROCTOR_NICENESS``; ValueError names the bad entry."""
    raw = (os.environ if environ is None else environ).get(NICENESS_ENV, "").strip()
    table = dict(NICENESS)
    for entry in filter(None, (part.strip() for part in raw.split(","))):
        role, sep, value = entry.partition("=")
        if not sep or role.strip() not in NICENESS:
            raise ValueError(f"{NICENESS_ENV}: {entry!r}: expected <role>=<0..19>, roles {sorted(NICENESS)}")
        try:
            level = int(value)
        except ValueError:
            raise ValueError(f"{NICENESS_ENV}: {entry!r}: the level must be an integer 0..19") from None
        if not 0 <= level <= 19:
            raise ValueError(f"{NICENESS_ENV}: {entry!r}: the level must be 0..19")
        table[role.strip()] = level
    return table


def niceness(role: str, environ: Mapping[str, str] | None = None) -> int:
    """The level for a role ("web", a lane, "provider"); 0 for a role with no entry."""
    return niceness_table(environ).get(role, 0)


def apply_niceness(role: str, environ: Mapping[str, str] | None = None) -> int:
    """Set this process's niceness for ``role`` (never below the inherited one); returns it."""
    current = os.getpriority(os.PRIO_PROCESS, 0)
    target = max(current, niceness(role, environ))
    if target != current:
        os.setpriority(os.PRIO_PROCESS, 0, target)
    return target
