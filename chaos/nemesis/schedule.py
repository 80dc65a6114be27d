"""Seeded fault schedules: which fault, when, for how long — the same seed gives the same plan."""

from __future__ import annotations

import random
from typing import Sequence

from chaos.nemesis.base import FaultSpec

__all__ = ["periodic_schedule"]


def periodic_schedule(
    seed: int,
    *,
    kind: str,
    targets: Sequence[str],
    load_seconds: float,
    mean_interval: float,
    duration: tuple[float, float],
    first_at: float = 1.0,
    params: dict | None = None,
    exclusive: str = "",
) -> list[FaultSpec]:
    """Faults on randomly chosen targets, spaced by jittered ``mean_interval``, all ending inside the load."""
    if not targets:
        raise ValueError("a fault schedule needs at least one target")
    if mean_interval <= 0 or duration[0] < 0 or duration[1] < duration[0]:
        raise ValueError(f"bad schedule timing: mean_interval={mean_interval}, duration={duration}")
    rng = random.Random(seed)
    faults: list[FaultSpec] = []
    at = first_at
    while True:
        length = round(rng.uniform(*duration), 3)
        if at + length > load_seconds:
            return faults
        faults.append(FaultSpec(at=round(at, 3), kind=kind, target=rng.choice(list(targets)),
                                duration=length, params=dict(params or {}), exclusive=exclusive))
        at += mean_interval * rng.uniform(0.5, 1.5)
