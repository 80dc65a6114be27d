"""Open-model arrivals for the ramp: request starts scheduled at the offered rate, whatever
the responses do, and what the generator itself could not keep up with.

Under gevent, so standard library only (no chaos/, no stack/). One ``OpenArrivals`` per
Locust process; its Users are the in-flight slots (like k6's ``maxVUs``). A free slot
claims the next scheduled arrival and sleeps until its intended start; when every slot is
busy, arrivals wait in the schedule (queued), and the slot that frees up sends the oldest
one late. Each request then has two latencies: from its intended start (the corrected
latency: what a user arriving at that moment would see) and from its actual send (the
service time, all a closed model measures). Coordinated omission is the difference.

Per step the process counts what it scheduled, sent, queued (no slot was free at the
intended start), delayed (sent more than the stated lag bound after its intended start),
late (delayed although a slot was free: the generator's CPU) and
dropped (never sent: waited longer than the queue bound, or the ramp ended first), plus its
own CPU seconds: ``chaos.ramp.generator`` turns those into the generator-capacity rows and the
"generator was short" verdict.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field
from typing import Iterator, Sequence

__all__ = ["ARRIVAL_MODES", "DISTRIBUTIONS", "Arrival", "ArrivalSchedule", "GeneratorMeter", "OpenArrivals",
           "process_cpu_seconds", "default_slots"]

ARRIVAL_MODES = ("open", "closed")
DISTRIBUTIONS = ("poisson", "uniform")


def process_cpu_seconds() -> float:
    """User + system CPU seconds of this process (all its greenlets)."""
    return time.process_time()


def default_slots(rates: Sequence[float], slot_seconds: float = 2.0) -> int:
    """In-flight slots when none are given: room for the highest step's requests to take
    ``slot_seconds`` each (Little's law: in flight = rate x latency), at least 10."""
    return max(10, math.ceil(max(rates) * slot_seconds))


@dataclass(frozen=True)
class Arrival:
    number: int
    offset: float
    """Intended start, seconds since the process's schedule began."""
    step: int


class ArrivalSchedule:
    """Intended starts for a stepped rate: uniform (evenly spaced) or Poisson (exponential
    gaps, seeded). ``share`` scales every step's rate (a worker of N sends 1/N of it).
    A Poisson gap that crosses a step boundary is redrawn from the boundary at the next
    step's rate (memoryless, so the process stays Poisson within each step)."""

    def __init__(self, rates: Sequence[float], step_seconds: float, distribution: str, seed: str,
                 share: float = 1.0) -> None:
        if distribution not in DISTRIBUTIONS:
            raise ValueError(f"--ramp-distribution={distribution!r}: must be one of {', '.join(DISTRIBUTIONS)}")
        self.rates = [rate * share for rate in rates]
        self.step_seconds = step_seconds
        self.distribution = distribution
        self._rng = random.Random(seed)

    @property
    def duration(self) -> float:
        return self.step_seconds * len(self.rates)

    def __iter__(self) -> Iterator[Arrival]:
        number = 0
        for step, rate in enumerate(self.rates):
            start, end = step * self.step_seconds, (step + 1) * self.step_seconds
            for offset in self._offsets(rate, start, end):
                yield Arrival(number, offset, step)
                number += 1

    def _offsets(self, rate: float, start: float, end: float) -> Iterator[float]:
        if rate <= 0:
            return
        if self.distribution == "uniform":
            count = round(rate * (end - start))
            yield from (start + (i + 0.5) / rate for i in range(count) if start + (i + 0.5) / rate < end)
            return
        t = start + self._rng.expovariate(rate)
        while t < end:
            yield t
            t += self._rng.expovariate(rate)


@dataclass
class StepCounts:
    scheduled: int = 0
    sent: int = 0
    queued: int = 0
    delayed: int = 0
    late: int = 0
    dropped: int = 0
    max_lag: float = 0.0
    cpu_seconds: float = 0.0
    wall_seconds: float = 0.0
    completed: int = 0

    def to_dict(self) -> dict[str, float]:
        return {k: round(v, 6) if isinstance(v, float) else v for k, v in vars(self).items()}


@dataclass
class GeneratorMeter:
    """Per step of the ramp: this process's CPU seconds and the requests it completed.
    ``sample`` is called often (each claim and each completion); it books the CPU spent since
    the last call to the step in force then, so no timer greenlet is needed."""

    step_seconds: float
    steps: int
    origin: float = field(default_factory=time.monotonic)
    counts: list[StepCounts] = field(default_factory=list)
    _last_cpu: float = field(default_factory=process_cpu_seconds)
    _last_mono: float = 0.0

    def __post_init__(self) -> None:
        self.counts = [StepCounts() for _ in range(self.steps)]
        self._last_mono = self.origin

    def step_at(self, mono: float) -> int:
        index = int((mono - self.origin) // self.step_seconds)
        return min(max(index, 0), self.steps - 1)

    def sample(self) -> None:
        now, cpu = time.monotonic(), process_cpu_seconds()
        counts = self.counts[self.step_at(self._last_mono)]
        counts.cpu_seconds += cpu - self._last_cpu
        counts.wall_seconds += now - self._last_mono
        self._last_cpu, self._last_mono = cpu, now

    def completed(self) -> None:
        self.sample()
        self.counts[self.step_at(time.monotonic())].completed += 1

    def summary(self) -> dict[str, object]:
        self.sample()
        return {"origin_wall": time.time() - (time.monotonic() - self.origin), "step_seconds": self.step_seconds,
                "steps": [c.to_dict() for c in self.counts]}


class OpenArrivals:
    """The schedule shared by one process's slots. ``claim`` never yields to other greenlets
    before it returns, so two slots never take the same arrival."""

    def __init__(self, schedule: ArrivalSchedule, meter: GeneratorMeter, max_lag: float, max_queue: float) -> None:
        self.schedule, self.meter = schedule, meter
        self.max_lag, self.max_queue = max_lag, max_queue
        self._pending = iter(schedule)
        self._next: Arrival | None = next(self._pending, None)
        self.finished = False

    @property
    def origin(self) -> float:
        return self.meter.origin

    def claim(self) -> tuple[Arrival, bool] | None:
        """The next arrival and whether it was queued (no slot free at its intended start);
        arrivals queued past ``max_queue`` are dropped. None once the ramp's schedule is over."""
        self.meter.sample()
        now = time.monotonic() - self.origin
        while self._next is not None:
            arrival, self._next = self._next, next(self._pending, None)
            counts = self.meter.counts[arrival.step]
            counts.scheduled += 1
            if now - arrival.offset > self.max_queue:
                counts.dropped += 1
                continue
            queued = now > arrival.offset
            counts.queued += queued
            return arrival, queued
        self.finished = True
        return None

    def sent(self, arrival: Arrival, queued: bool, lag: float) -> None:
        """Book a send ``lag`` seconds after its intended start: delayed past the bound, and
        late when that happened although a slot was free (the generator's own CPU)."""
        counts = self.meter.counts[arrival.step]
        counts.sent += 1
        counts.max_lag = max(counts.max_lag, lag)
        counts.delayed += lag > self.max_lag
        counts.late += (not queued) and lag > self.max_lag

    def close(self, now: float | None = None) -> None:
        """At the end: arrivals whose intended start passed but were never claimed are dropped."""
        elapsed = (time.monotonic() if now is None else now) - self.origin
        while self._next is not None and self._next.offset <= elapsed:
            counts = self.meter.counts[self._next.step]
            counts.scheduled += 1
            counts.dropped += 1
            self._next = next(self._pending, None)
