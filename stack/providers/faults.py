"""Fault knobs of a fake provider, set through ``PUT /admin/faults``.

- ``status``: answer every call with this status and no effect (429 carries
  ``Retry-After``; 402 = credit exhausted; 401 = bad credentials; 500).
- ``fail_next`` / ``fail_next_status``: the next N calls fail that way, then recover.
- ``latency_seconds``: wait before doing anything (a slow provider).
- ``delay_after_effect_seconds``: record the effect, then wait before answering.
  This is the "unknown external outcome": the effect happened but the caller may
  time out or be killed before it hears so.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, replace
from typing import Any

__all__ = ["FAULT_STATUSES", "Faults", "FaultState", "Refusal"]

FAULT_STATUSES = (401, 402, 429, 500, 503)

_DETAILS = {
    401: "invalid credentials",
    402: "credit exhausted",
    429: "rate limited",
    500: "internal error",
    503: "unavailable",
}


@dataclass(frozen=True)
class Faults:
    status: int | None = None
    retry_after_seconds: float = 1.0
    fail_next: int = 0
    fail_next_status: int = 500
    latency_seconds: float = 0.0
    delay_after_effect_seconds: float = 0.0

    def validate(self) -> "Faults":
        for name in ("status", "fail_next_status"):
            value = getattr(self, name)
            if value is not None and value not in FAULT_STATUSES:
                raise ValueError(f"{name} must be one of {FAULT_STATUSES}, not {value!r}")
        for name in ("retry_after_seconds", "latency_seconds", "delay_after_effect_seconds", "fail_next"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")
        return self


@dataclass(frozen=True)
class Refusal:
    """A call answered with an error and no effect."""

    status: int
    headers: dict[str, str]
    body: dict[str, Any]


def refusal(status: int, retry_after_seconds: float) -> Refusal:
    headers = {"Retry-After": str(max(1, round(retry_after_seconds)))} if status == 429 else {}
    return Refusal(status, headers, {"error": _DETAILS.get(status, "error"), "status": status})


class FaultState:
    """The knobs of one provider process; a lock makes ``fail_next`` count exactly."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults = Faults()

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
        return asdict(self.current())

    def take_refusal(self) -> Refusal | None:
        """The refusal for this call, if any; consumes one ``fail_next``."""
        with self._lock:
            faults = self._faults
            if faults.status is not None:
                return refusal(faults.status, faults.retry_after_seconds)
            if faults.fail_next > 0:
                self._faults = replace(faults, fail_next=faults.fail_next - 1)
                return refusal(faults.fail_next_status, faults.retry_after_seconds)
            return None
