"""Fault and metering knobs of a fake provider, set through ``PUT /admin/faults``.

- ``status``: answer every call with this status and no effect (429 carries
  ``Retry-After``; 402 = credit exhausted; 401 = bad credentials; 500).
- ``fail_next`` / ``fail_next_status``: the next N calls fail that way, then recover.
- ``latency_seconds``: wait before doing anything (a slow provider).
- ``delay_after_effect_seconds``: record the effect, then wait before answering.
  This is the "unknown external outcome": the effect happened but the caller may
  time out or be killed before it hears so.
- ``calls_per_minute``: the provider's own limit over a sliding case-minute; a call
  over it gets 429 with the time until the oldest call leaves the window.
- ``credit_balance`` / ``cost_per_call``: a metered account; each new effect debits
  the cost, and a call that cannot be paid gets 402. ``None`` = unmetered. The
  balance shown by ``GET /admin/faults`` is what is left.
- ``key_revoked``: every call gets 401 (the API key was revoked).
- ``invalid_operations``: calls for these operation ids get 422 (a payload the
  provider will never accept).
- ``lose_response_next``: the next N new effects are charged and recorded, then the
  connection breaks mid-response ("completed but the response was lost").
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, replace
from typing import Any

__all__ = ["FAULT_STATUSES", "Admission", "Faults", "FaultState", "Refusal"]

FAULT_STATUSES = (401, 402, 422, 429, 500, 503)

_DETAILS = {
    401: "invalid credentials",
    402: "credit exhausted",
    422: "invalid payload",
    429: "rate limited",
    500: "internal error",
    503: "unavailable",
}

_NON_NEGATIVE = ("retry_after_seconds", "latency_seconds", "delay_after_effect_seconds", "fail_next",
                 "cost_per_call", "lose_response_next")


@dataclass(frozen=True)
class Faults:
    status: int | None = None
    retry_after_seconds: float = 1.0
    fail_next: int = 0
    fail_next_status: int = 500
    latency_seconds: float = 0.0
    delay_after_effect_seconds: float = 0.0
    calls_per_minute: int | None = None
    credit_balance: float | None = None
    cost_per_call: float = 1.0
    key_revoked: bool = False
    invalid_operations: tuple[str, ...] = ()
    lose_response_next: int = 0

    def validate(self) -> "Faults":
        for name in ("status", "fail_next_status"):
            value = getattr(self, name)
            if value is not None and value not in FAULT_STATUSES:
                raise ValueError(f"{name} must be one of {FAULT_STATUSES}, not {value!r}")
        for name in _NON_NEGATIVE:
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")
        if self.calls_per_minute is not None and self.calls_per_minute < 1:
            raise ValueError(f"calls_per_minute must be at least 1 or null, not {self.calls_per_minute!r}")
        if self.credit_balance is not None and self.credit_balance < 0:
            raise ValueError("credit_balance must not be negative")
        if isinstance(self.invalid_operations, str) or not all(isinstance(op, str) for op in self.invalid_operations):
            raise ValueError("invalid_operations must be a list of operation ids")
        return replace(self, invalid_operations=tuple(self.invalid_operations))


@dataclass(frozen=True)
class Refusal:
    """A call answered with an error and no effect."""

    status: int
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass(frozen=True)
class Admission:
    """A call let through: when it arrived and what it will cost if it makes a new effect."""

    started_at: float
    cost: float


def refusal(status: int, retry_after_seconds: float = 0.0) -> Refusal:
    body: dict[str, Any] = {"error": _DETAILS.get(status, "error"), "status": status}
    if status != 429:
        return Refusal(status, {}, body)
    # The header is whole seconds by RFC 9110; the body keeps the exact wait, which at a
    # test time scale is a fraction of a second.
    body["retry_after_seconds"] = retry_after_seconds
    return Refusal(status, {"Retry-After": str(max(1, math.ceil(retry_after_seconds)))}, body)


class FaultState:
    """The knobs of one provider process; one lock makes counters, window and balance exact.

    ``window_seconds`` is one case-minute at the provider's time scale.
    """

    def __init__(self, window_seconds: float = 60.0) -> None:
        self._lock = threading.Lock()
        self._faults = Faults()
        self._window_seconds = window_seconds
        self._admitted: deque[float] = deque()

    def set(self, faults: Faults) -> Faults:
        with self._lock:
            self._faults = faults.validate()
            return self._faults

    def clear(self) -> Faults:
        return self.set(Faults())

    def current(self) -> Faults:
        with self._lock:
            return self._faults

    def as_dict(self) -> dict[str, Any]:
        knobs = asdict(self.current())
        knobs["invalid_operations"] = list(knobs["invalid_operations"])
        return knobs

    def _forced_refusal(self) -> Refusal | None:
        """The forced refusal for this call, if any; consumes one ``fail_next``."""
        faults = self._faults
        if faults.status is not None:
            return refusal(faults.status, faults.retry_after_seconds)
        if faults.fail_next > 0:
            self._faults = replace(faults, fail_next=faults.fail_next - 1)
            return refusal(faults.fail_next_status, faults.retry_after_seconds)
        return None

    def admit(self, operation_id: str, now: float | None = None) -> Admission | Refusal:
        """Let one call through every knob, or say why not. An admitted call takes a slot
        in the sliding window and reserves its cost; ``refund`` gives the cost back."""
        now = time.time() if now is None else now
        with self._lock:
            faults = self._faults
            if faults.key_revoked:
                return refusal(401)
            forced = self._forced_refusal()
            if forced is not None:
                return forced
            if operation_id in faults.invalid_operations:
                return refusal(422)
            wait = self._window_wait(faults, now)
            if wait > 0:
                return refusal(429, wait)
            if faults.credit_balance is not None and faults.credit_balance < faults.cost_per_call:
                return refusal(402)
            return self._take(faults, now)

    def _window_wait(self, faults: Faults, now: float) -> float:
        while self._admitted and self._admitted[0] <= now - self._window_seconds:
            self._admitted.popleft()
        if faults.calls_per_minute is None or len(self._admitted) < faults.calls_per_minute:
            return 0.0
        return self._admitted[-faults.calls_per_minute] + self._window_seconds - now

    def _take(self, faults: Faults, now: float) -> Admission:
        self._admitted.append(now)
        if faults.credit_balance is not None:
            self._faults = replace(faults, credit_balance=faults.credit_balance - faults.cost_per_call)
        return Admission(now, faults.cost_per_call)

    def refund(self, admission: Admission) -> None:
        """The call made no new effect (an idempotent replay): it costs nothing."""
        with self._lock:
            if self._faults.credit_balance is not None:
                self._faults = replace(self._faults, credit_balance=self._faults.credit_balance + admission.cost)

    def take_lost_response(self) -> bool:
        """Whether this new effect's answer is lost; consumes one ``lose_response_next``."""
        with self._lock:
            if self._faults.lose_response_next == 0:
                return False
            self._faults = replace(self._faults, lose_response_next=self._faults.lose_response_next - 1)
            return True
