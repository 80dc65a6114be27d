"""The AI lane's safeguards as policies chosen once, when a worker starts (issue #11).

A negative control switches a safeguard off at start-up (PROCTOR_AI_RETRY_AFTER,
PROCTOR_AI_ASK_BEFORE_REPLAY). The job's code never tests those switches:
``LaneConfig.from_settings`` picks one policy object per safeguard, and the job calls it.
So the production path has no branch a control flag could take by mistake, and the
control's behaviour sits here, in one named class, next to the safeguard it removes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["ASK_BEFORE_REPLAY", "BLIND_REPLAY", "HONOR_RETRY_AFTER", "IGNORE_RETRY_AFTER", "ReplayPolicy",
           "RetryAfterPolicy"]


class RetryAfterPolicy(Protocol):
    name: str

    def wait_seconds(self, body: dict[str, Any]) -> float:
        """How long the provider's answer asks every worker to wait (0: no pause)."""
        ...


class ReplayPolicy(Protocol):
    name: str

    def headers(self, operation_id: str) -> dict[str, str]:
        """The headers that make a repeated call the same call at the provider."""
        ...

    def to_ask(self, pending: list[str]) -> list[str]:
        """The pending reservations to settle by asking the provider before the next call."""
        ...


@dataclass(frozen=True)
class _HonorRetryAfter:
    name: str = "honor"

    def wait_seconds(self, body: dict[str, Any]) -> float:
        # The body's exact wait: the Retry-After header is whole seconds, a scaled minute is not.
        return float(body.get("retry_after_seconds") or 0.0)


@dataclass(frozen=True)
class _IgnoreRetryAfter:
    """Negative control: no shared pause; the backoff alone decides when to come back."""

    name: str = "ignore"

    def wait_seconds(self, body: dict[str, Any]) -> float:
        return 0.0


@dataclass(frozen=True)
class _AskBeforeReplay:
    name: str = "ask"

    def headers(self, operation_id: str) -> dict[str, str]:
        return {"Idempotency-Key": operation_id}

    def to_ask(self, pending: list[str]) -> list[str]:
        return pending


@dataclass(frozen=True)
class _BlindReplay:
    """Negative control: a call whose answer was lost is made again, unasked and without a key."""

    name: str = "blind"

    def headers(self, operation_id: str) -> dict[str, str]:
        return {}

    def to_ask(self, pending: list[str]) -> list[str]:
        return []


HONOR_RETRY_AFTER: RetryAfterPolicy = _HonorRetryAfter()
IGNORE_RETRY_AFTER: RetryAfterPolicy = _IgnoreRetryAfter()
ASK_BEFORE_REPLAY: ReplayPolicy = _AskBeforeReplay()
BLIND_REPLAY: ReplayPolicy = _BlindReplay()
