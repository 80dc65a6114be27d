"""The SMS lane's answer to a gateway refusal, by the AI lane's classes (issue #11).

The gateway meters like the AI provider (429 with Retry-After, 402, 401), and the SMS job
acts on the same classes (stack/lanes/ai/policy.py):

- transient (429, 503): hand the row back with a not-before time (backoff 1-15 case-min,
  never before Retry-After), so the worker is free and the relay re-enqueues it later;
- halt (402, 401, 403): pause the SMS lane (the relay enqueues no SMS row until an
  operator resumes it: ``proctor lane resume sms``), raise an alert, hand the row back;
- permanent (422, 400): failed for review at once, never retried;
- anything else (a 5xx that may have come after the send): raised, as before: the relay
  re-enqueues the job and the next run asks the gateway by operation id first.

Unlike the AI lane there is no shared limiter and no deadline: an SMS is cheap and the
gateway's own 429 paces it.
"""

from __future__ import annotations

import random
import time
from typing import Any

from stack.lanes.ai import lanestate
from stack.lanes.ai.policy import RetryClock, classify
from stack.ledger import outbox, outcomes

__all__ = ["LANE", "hold_if_paused", "on_refusal"]

LANE = "sms"
_HALT_ALERTS = {402: "credit_exhausted", 401: "key_revoked", 403: "egress_refused"}
"""A 403 is the gateway's address rule (the lane sends from an address it does not allow, e.g. a
standby that took the lane without the reserved address: docs/egress.md), not a credential."""


def _current_job_id() -> str:
    from rq import get_current_job

    job = get_current_job()
    if job is None:
        raise RuntimeError("the SMS job hands its row back only inside an RQ job")
    return job.id


def _retry_after(response: Any) -> float:
    try:
        return float(response.json().get("retry_after_seconds") or 0.0)
    except ValueError:
        return 0.0


def on_refusal(process: Any, op: str, response: Any, job_id: str | None = None) -> dict[str, Any] | None:
    """What the SMS job does with a refused send; None = not a refusal it handles (re-raise)."""
    kind = classify(response.status_code, sent=True)
    if kind not in ("transient", "halt", "permanent"):
        return None
    job_id = job_id or _current_job_id()
    now = time.time()
    with process.engine.begin() as conn:
        row = outbox.get_row(conn, op)
        if kind == "transient":
            clock = RetryClock(process.settings.time_scale)
            delay = max(clock.backoff(max(1, row["attempts"] - row["deferrals"]), random.Random()), _retry_after(response))
            outbox.defer(conn, op, job_id, now + delay, f"gateway answered {response.status_code}")
        elif kind == "halt":
            alert = _HALT_ALERTS.get(response.status_code, "key_revoked")
            if lanestate.pause(conn, LANE, f"gateway answered {response.status_code}", actor="sms-lane"):
                lanestate.raise_alert(conn, LANE, alert, {"operation_id": op, "status": response.status_code})
            outbox.defer(conn, op, job_id, now, f"lane sms paused: {alert}")
        else:
            reason = f"permanent: gateway answered {response.status_code}"
            if outbox.mark_failed(conn, op, job_id, reason):
                detail = {"operation_id": op, "reason": reason, "permanent": True}
                outcomes.write_failed_for_review(conn, op, row["attempt_id"], "sms", detail)
                outcomes.audit(conn, "sms-lane", "failed_for_review", detail)
    return {"operation_id": op, "status": kind, "http_status": response.status_code}


def hold_if_paused(process: Any, op: str, job_id: str | None = None) -> dict[str, Any] | None:
    """A job enqueued before the pause hands its row back without sending; None when the lane runs."""
    with process.engine.begin() as conn:
        if not lanestate.is_paused(conn, LANE):
            return None
        outbox.defer(conn, op, job_id or _current_job_id(), time.time(), "lane sms paused")
    return {"operation_id": op, "status": "held"}
