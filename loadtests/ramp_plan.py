"""The ramp's plan: which request rate is offered when, and how many Locust users that takes.

Standard library only: the locustfile (under gevent) and the harness (outside it) both
read it, and its arithmetic is unit-tested without starting Locust.

Locust is a closed model: it has no global target rate, only users that each pace
themselves with ``constant_throughput(per_user_rate)`` (one request per task run). So a
target of R req/s is offered by ``ceil(R / per_user_rate)`` users, and the rate actually
achieved is measured afterwards from request counts: when latency exceeds a user's pacing
interval, that user falls behind and the achieved rate sags below the target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["DEFAULT_STEPS", "RampPlan", "Step", "parse_steps"]

DEFAULT_STEPS = "25,50,100,200,300,400,500"
"""Requests per second per step: the seed's 25 -> 500 req/s ramp."""


def parse_steps(text: str) -> tuple[float, ...]:
    """``"25,50,100"`` -> (25.0, 50.0, 100.0); names the option in every error."""
    try:
        steps = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ValueError(f"--ramp-steps={text!r}: expected comma-separated request rates, e.g. 25,50,100") from None
    if not steps:
        raise ValueError(f"--ramp-steps={text!r}: no step given")
    if any(not rate > 0 for rate in steps):
        raise ValueError(f"--ramp-steps={text!r}: every rate must be > 0 req/s")
    return steps


@dataclass(frozen=True)
class Step:
    """One step: ``rate`` req/s offered from ``start`` to ``end`` (seconds since the ramp began)."""

    index: int
    rate: float
    start: float
    end: float
    users: int


@dataclass(frozen=True)
class RampPlan:
    steps: tuple[float, ...]
    step_seconds: float
    per_user_rate: float

    def __post_init__(self) -> None:
        if not self.step_seconds > 0:
            raise ValueError(f"--ramp-step-seconds={self.step_seconds!r}: must be > 0")
        if not self.per_user_rate > 0:
            raise ValueError(f"--ramp-per-user-rate={self.per_user_rate!r}: must be > 0 req/s")

    @property
    def duration(self) -> float:
        return self.step_seconds * len(self.steps)

    @property
    def offered_requests(self) -> float:
        return sum(rate * self.step_seconds for rate in self.steps)

    @property
    def most_users(self) -> int:
        """Closed model: the users of the busiest step."""
        return max(self.users_for(rate) for rate in self.steps)

    def users_for(self, rate: float) -> int:
        return max(1, math.ceil(rate / self.per_user_rate - 1e-9))

    def schedule(self) -> list[Step]:
        return [Step(i, rate, i * self.step_seconds, (i + 1) * self.step_seconds, self.users_for(rate))
                for i, rate in enumerate(self.steps)]

    def at(self, elapsed: float) -> Step | None:
        """The step in force ``elapsed`` seconds into the ramp; None once the ramp is over."""
        if elapsed < 0 or elapsed >= self.duration:
            return None
        return self.schedule()[int(elapsed // self.step_seconds)]

    def to_dict(self) -> dict[str, object]:
        return {"steps": list(self.steps), "step_seconds": self.step_seconds, "per_user_rate": self.per_user_rate,
                "schedule": [vars(step) for step in self.schedule()]}
