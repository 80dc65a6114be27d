"""Retries by class for a provider call (issue #11; pure: no clock, no I/O).

| answer | class | what the lane does |
|---|---|---|
| 429, 503, connect error (nothing sent) | transient | back off 1-15 case-min with bounded jitter, never before Retry-After, inside the deadline |
| 402, 401, 403 | halt | pause the lane, raise an alert; only an operator resumes |
| 422, 400 | permanent | failed for review at once, never retried |
| timeout after sending, broken response, 500/502/504 | unknown | ask the provider by operation id before any replay |

The deadline is absolute: ``accepted_at`` + the retry window (12 case-hours). A retry
that would start after it goes to the review queue instead.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from stack.config import CASE_BACKOFF_MAX_SECONDS, CASE_BACKOFF_MIN_SECONDS, CASE_RETRY_WINDOW_SECONDS

__all__ = ["CLASSES", "RetryClock", "classify"]

CLASSES = ("ok", "transient", "halt", "permanent", "unknown")

_TRANSIENT = {429, 503}
_HALT = {401, 402, 403}
_PERMANENT = {400, 404, 409, 422}


def classify(status: int | None, sent: bool) -> str:
    """The class of one call's answer; ``status`` None means no answer (``sent``: the
    request may have reached the provider)."""
    if status is None:
        return "unknown" if sent else "transient"
    if 200 <= status < 300:
        return "ok"
    if status in _TRANSIENT:
        return "transient"
    if status in _HALT:
        return "halt"
    if status in _PERMANENT:
        return "permanent"
    return "unknown"  # a 5xx may come after the work was done


@dataclass(frozen=True)
class RetryClock:
    """Backoff and deadline in real seconds at one time scale."""

    time_scale: float
    jitter: float = 0.5  # a delay is drawn from [(1 - jitter) * d, d], never below the minimum

    @property
    def window(self) -> float:
        return CASE_RETRY_WINDOW_SECONDS * self.time_scale

    def deadline(self, accepted_at: float) -> float:
        return accepted_at + self.window

    def backoff(self, retry_number: int, rng: random.Random) -> float:
        """Delay before retry ``retry_number`` (1, 2, ...): exponential from 1 to 15 case-min."""
        if retry_number < 1:
            raise ValueError(f"retry_number must be at least 1, not {retry_number}")
        low, high = CASE_BACKOFF_MIN_SECONDS * self.time_scale, CASE_BACKOFF_MAX_SECONDS * self.time_scale
        ceiling = min(high, low * 2 ** min(retry_number - 1, 32))
        return rng.uniform(max(low, ceiling * (1 - self.jitter)), ceiling)

    def next_try(
        self, now: float, accepted_at: float, retry_number: int, rng: random.Random, retry_after: float = 0.0
    ) -> float | None:
        """When to try again (never before ``retry_after``), or None: the deadline comes first."""
        at = now + max(self.backoff(retry_number, rng), retry_after)
        return at if at <= self.deadline(accepted_at) else None
