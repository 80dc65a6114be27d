"""The AI narrative job under provider pressure (issue #11); RQ runs ``write_narrative``.

One run makes at most one provider call, and never waits in a worker: a job that must
wait (the shared limiter, a backoff, a paused lane) hands its outbox row back with a
not-before time and ends, so a lane can carry thousands of waiting items. Each run:

1. a ready outcome -> done (the usual replay rule); lane paused -> back to pending;
   past the deadline (and not a review replay) -> review queue;
2. a reservation left pending by an earlier run (its answer was never heard) -> ask the
   provider by operation id: found -> completed, outcome written; not found -> still
   pending (the provider may be working on it yet) until the next call's answer under
   the same Idempotency-Key settles it;
3. take a slot of the shared limiter, reserve allowance, call with the operation id as
   Idempotency-Key, release the slot, and act on the class of the answer
   (stack/lanes/ai/policy.py).
"""

from __future__ import annotations

import logging
import math
import random
import time
from dataclasses import dataclass, field
from typing import Any

from redis import Redis

from stack.lanes.ai import billing, lanestate
from stack.lanes.ai.controls import (ASK_BEFORE_REPLAY, BLIND_REPLAY, HONOR_RETRY_AFTER, IGNORE_RETRY_AFTER, ReplayPolicy,
                                   RetryAfterPolicy)
from stack.lanes.ai.limiter import CALLS_KEY, PAUSE_KEY, SharedLimiter
from stack.lanes.ai.policy import RetryClock, classify
from stack.config import CASE_PROVIDER_CALLS_PER_MINUTE, Settings, SettingsError
from stack.lanes import jobs
from stack.headers import RECEIVED_AT_HEADER
from stack.ledger import outbox, outcomes

__all__ = ["LaneConfig", "Step", "check_startup", "run_narrative", "write_narrative"]

log = logging.getLogger("proctor.ailane")
_RQ_CALLBACK_SECONDS = 60.0


@dataclass(frozen=True)
class LaneConfig:
    """The AI lane's knobs. ``replay`` and ``retry_after`` are the safeguards' policies
    (stack/lanes/ai/controls.py): a negative control swaps one for its blind twin at start-up."""

    calls_per_minute: int = CASE_PROVIDER_CALLS_PER_MINUTE
    max_in_flight: int = 4
    cost_per_call: float = 1.0
    replay: ReplayPolicy = ASK_BEFORE_REPLAY  # BLIND_REPLAY = the negative control
    lease_seconds: float | None = None  # a limiter slot's lease; default job timeout + RQ's 60 s callback window
    visibility_timeout_seconds: float | None = None  # when RQ calls a started job abandoned (timeout + 60 s)
    limiter_keys: tuple[str, str] = (CALLS_KEY, PAUSE_KEY)  # a per-worker pair = the negative control
    retry_after: RetryAfterPolicy = HONOR_RETRY_AFTER  # IGNORE_RETRY_AFTER = the negative control

    @classmethod
    def from_settings(cls, settings: Settings) -> "LaneConfig":
        """What an RQ AI worker runs with: the limiter's calls per case-minute from
        PROCTOR_AI_CALLS_PER_MINUTE; the safeguards are on unless a negative control switched one
        off at start-up (PROCTOR_AI_SHARED_LIMITER / _RETRY_AFTER / _ASK_BEFORE_REPLAY)."""
        controls = settings.controls
        keys = (CALLS_KEY, PAUSE_KEY) if controls.ai_shared_limiter else (
            f"{CALLS_KEY}:{settings.component}", f"{PAUSE_KEY}:{settings.component}")
        return cls(calls_per_minute=settings.ai_calls_per_minute, limiter_keys=keys,
                   retry_after=HONOR_RETRY_AFTER if controls.ai_retry_after else IGNORE_RETRY_AFTER,
                   replay=ASK_BEFORE_REPLAY if controls.ai_ask_before_replay else BLIND_REPLAY)

    def lease(self, settings: Settings) -> float:
        return self.lease_seconds or jobs.job_timeout("narrative", settings) + _RQ_CALLBACK_SECONDS

    def visibility(self, settings: Settings) -> float:
        return self.visibility_timeout_seconds or jobs.job_timeout("narrative", settings) + _RQ_CALLBACK_SECONDS

    def limiter(self, redis: Redis, settings: Settings) -> SharedLimiter:
        return SharedLimiter(redis, self.calls_per_minute, settings.scaled(60.0), self.max_in_flight,
                             lease_seconds=self.lease(settings), keys=self.limiter_keys)


def check_startup(settings: Settings, config: LaneConfig) -> None:
    """The job timeout must end before a slot's lease and before RQ's visibility timeout:
    otherwise a slow job's slot is freed, or its job handed to another worker, while it
    may still be calling the provider. Raised at worker start-up, naming the knob."""
    timeout = jobs.job_timeout("narrative", settings)
    for name, value in (("lease_seconds", config.lease(settings)),
                        ("visibility_timeout_seconds", config.visibility(settings))):
        if timeout >= value:
            raise SettingsError(f"AI lane {name}={value:g} must exceed the narrative job timeout ({timeout} s); "
                                "raise it or lower the time scale's HTTP timeout")


@dataclass(frozen=True)
class Step:
    """What one run did: ``done``, ``deferred``, ``held``, ``review`` or ``replayed``."""

    operation_id: str
    action: str
    detail: str = ""


def write_narrative(operation_id: str) -> dict[str, Any]:
    from rq import get_current_job

    job = get_current_job()
    assert job is not None, "write_narrative runs inside an RQ job"
    process = jobs._current()
    step = run_narrative(process, job.connection, operation_id, job.id, LaneConfig.from_settings(process.settings))
    return {"operation_id": operation_id, "status": step.action, "detail": step.detail}


def run_narrative(process: Any, redis: Redis, op: str, job_id: str, config: LaneConfig,
                  rng: random.Random | None = None) -> Step:
    run = _Run(process, redis, op, job_id, config, rng or random.Random())
    return run.go()


@dataclass(frozen=True)
class _Answer:
    """One provider call as the job heard it; the defaults are "sent, no answer read"."""

    status: int | None = None
    body: dict[str, Any] = field(default_factory=dict)
    retry_after: float = 0.0  # what the lane's RetryAfterPolicy makes of the answer
    sent: bool = True
    received_at: float | None = None  # the provider's X-Received-At, when it said


def _received_at(header: str | None) -> float | None:
    """The provider's arrival time; an absent or unreadable header is the release-time fallback."""
    try:
        at = float(header) if header is not None else None
    except ValueError:
        return None
    return at if at is not None and math.isfinite(at) else None


class _Run:
    def __init__(self, process: Any, redis: Redis, op: str, job_id: str, config: LaneConfig, rng: random.Random) -> None:
        self.process, self.redis, self.op, self.job_id = process, redis, op, job_id
        self.config, self.rng = config, rng
        self.settings: Settings = process.settings
        self.clock = RetryClock(self.settings.time_scale)
        self.url = f"{self.settings.ai_url}/v1/narratives"
        self.earlier: list[str] = []  # pending reservations a look-up did not find (settled by the next answer)
        self.replayed = False  # the provider answered with an earlier effect under the Idempotency-Key

    def go(self) -> Step:
        card = jobs._unless_ready(self.process, self.op, jobs._merit_card)
        if card is None:
            return Step(self.op, "done", "already ready")
        with self.process.engine.begin() as conn:
            row = outbox.get_row(conn, self.op)
            paused = lanestate.is_paused(conn, "ai")
        if paused:
            return self._defer(time.time(), "lane ai paused", action="held")
        if not row["replays"] and time.time() > self.clock.deadline(row["created_at"]):
            return self._review(row, "retry deadline reached")
        settled = self._settle_unknown(card)
        return settled or self._call(card, row)

    # -- unknown outcomes -------------------------------------------------------------
    def _settle_unknown(self, card: dict[str, Any]) -> Step | None:
        with self.process.engine.begin() as conn:
            pending = self.config.replay.to_ask(billing.pending_for(conn, self.op))
        if not pending:
            return None
        recorded = jobs._recorded_response(self.process, self.url, self.op)
        with self.process.engine.begin() as conn:
            if recorded is not None:
                for call_id in pending:
                    billing.complete(conn, call_id, "found by operation id after a lost answer")
            outcomes.audit(conn, "ai-lane", "reconcile", {"operation_id": self.op, "found": recorded is not None})
        if recorded is None:
            # Not released yet: the provider may still be working on that call (it does not stop
            # when its caller dies). The next call carries the same Idempotency-Key, so its answer
            # settles the earlier reservations causally (_settle_earlier).
            self.earlier = pending
            return None
        self._finish(card, recorded)
        return Step(self.op, "done", "reconciled: the provider had done it")

    # -- one call -----------------------------------------------------------------------
    def _call(self, card: dict[str, Any], row: dict[str, Any]) -> Step:
        with self.process.engine.begin() as conn:
            number = billing.calls_made(conn, self.op) + 1
        token = f"{self.op}#{number}"
        limiter = self.config.limiter(self.redis, self.settings)
        grant = limiter.acquire(token)
        if not grant.granted:
            return self._defer(time.time() + grant.wait_seconds, f"limiter: {grant.reason}")
        with self.process.engine.begin() as conn:
            call_id = billing.reserve(conn, self.op, number, self.config.cost_per_call)
        answer = _Answer()
        try:
            answer = self._post(card)
            if answer.status == 429 and answer.retry_after:  # pause everyone before this slot frees up
                limiter.pause(answer.retry_after, f"429 for {self.op}")
        finally:
            # From the provider's arrival when it said (its window counts from there), else from now.
            limiter.release(token, answer.received_at)
        status, body, retry_after = answer.status, answer.body, answer.retry_after
        kind = classify(status, answer.sent)
        if kind == "ok":
            with self.process.engine.begin() as conn:
                self._settle_earlier(conn, call_id)
            self._finish(card, body)
            return Step(self.op, "done")
        if kind == "unknown":
            return self._retry(row, number, 0.0, f"unknown outcome ({status}); ask before replay")
        with self.process.engine.begin() as conn:
            billing.release(conn, call_id, f"provider refused: {status or 'not sent'}")
        if kind == "transient":
            return self._retry(row, number, retry_after, f"transient {status or 'connect error'}")
        if kind == "halt":
            return self._halt(status)
        return self._review(row, f"permanent: provider answered {status}", permanent=True)

    def _settle_earlier(self, conn: Any, call_id: str) -> None:
        """One effect per Idempotency-Key: a replayed answer is an earlier call's effect (the first
        pending earlier reservation completes; this one is released, and so is this one when that
        earlier call was already completed, e.g. answered before its worker died and the job ran
        again); a fresh one proves the earlier calls never took effect (released; if one lands
        later, the provider replays it: no second charge)."""
        if self.replayed:
            for paid in self.earlier[:1]:
                billing.complete(conn, paid, "the provider replayed this call's effect under the key")
            for other in [*self.earlier[1:], call_id]:
                billing.release(conn, other, "provider replayed an earlier call's effect: no new charge")
        else:
            billing.complete(conn, call_id)
            for other in self.earlier:
                billing.release(conn, other, "a fresh effect under the key: this earlier call never took effect")

    def _post(self, card: dict[str, Any]) -> _Answer:
        import httpx

        request = {"operation_id": self.op, "attempt_id": card["attempt_id"],
                   "score": card["score"], "position": card["position"]}
        try:
            response = jobs._http(self.process).post(self.url, json=request, headers=self.config.replay.headers(self.op))
        except httpx.ConnectError:
            return _Answer(sent=False)
        except httpx.HTTPError:  # a timeout after sending, a reset, a broken body
            return _Answer()
        self.replayed = response.headers.get("Idempotent-Replayed") == "true"
        body = response.json() if response.headers.get("content-type", "").startswith("application/json") else {}
        return _Answer(response.status_code, body, self.config.retry_after.wait_seconds(body),
                       received_at=_received_at(response.headers.get(RECEIVED_AT_HEADER)))

    def _finish(self, card: dict[str, Any], body: dict[str, Any]) -> None:
        payload = {"text": body["text"], "narrative_id": body["narrative_id"],
                   "score": card["score"], "position": card["position"]}
        jobs._commit_outcome(self.process, self.op, "narrative", payload)

    # -- handing the row back -------------------------------------------------------------
    def _retry(self, row: dict[str, Any], number: int, retry_after: float, reason: str) -> Step:
        if row["replays"]:
            return self._review(row, f"review replay failed: {reason}")
        at = self.clock.next_try(time.time(), row["created_at"], number, self.rng, retry_after)
        if at is None:
            return self._review(row, f"deadline before the next try: {reason}")
        return self._defer(at, reason)

    def _defer(self, not_before: float, reason: str, action: str = "deferred") -> Step:
        with self.process.engine.begin() as conn:
            outbox.defer(conn, self.op, self.job_id, not_before, reason)
        return Step(self.op, action, reason)

    def _halt(self, status: int | None) -> Step:
        kind = "credit_exhausted" if status == 402 else "key_revoked"
        with self.process.engine.begin() as conn:
            if lanestate.pause(conn, "ai", f"provider answered {status}", actor="ai-lane"):
                lanestate.raise_alert(conn, "ai", kind, {"operation_id": self.op, "status": status})
            outbox.defer(conn, self.op, self.job_id, time.time(), f"lane paused: {kind}")
        return Step(self.op, "held", kind)

    def _review(self, row: dict[str, Any], reason: str, permanent: bool = False) -> Step:
        detail = {"operation_id": self.op, "reason": reason, "permanent": permanent,
                  "accepted_at": row["created_at"], "replays": row["replays"]}
        with self.process.engine.begin() as conn:
            detail["reservations"] = [r for r in billing.rows(conn) if r["operation_id"] == self.op]
            if outbox.mark_failed(conn, self.op, self.job_id, reason):
                outcomes.write_failed_for_review(conn, self.op, row["attempt_id"], "narrative", detail)
                outcomes.audit(conn, "ai-lane", "failed_for_review", detail)
        log.error("narrative %s to review: %s", self.op, reason)
        return Step(self.op, "review", reason)
