"""Lane isolation under a 2,000-job AI backlog (#12), and its shared-lane negative control.

Before the exam, ``prepare`` seeds 2,000 finished attempts through the documented seeding
path (stack/ledger/backlog.py) and waits until the relay has enqueued every one of their
narrative jobs: 2,000 AI jobs of 10 case-seconds each sit in a queue. Then the exam runs:
students answer, finish and poll their merit cards. After the load the job records RQ kept
are stored (chaos/observe/lane_jobs.py) and the isolation checker judges them.

The AI provider's rate limit is lifted, as the issue asks (the seed's backlog predates #11's
limiter, and limiter-driven waiting belongs to the AI lane): the fake provider has no limit
unless a fault sets one, and both runs raise the shared limiter's calls per case-minute
(``PROCTOR_AI_CALLS_PER_MINUTE``, default 8) to ``AI_LIMIT_LIFTED``. With the default, two
workers of 10-case-second calls (12 a case-minute) would defer AI jobs back to the ledger,
and the control's backlog would leave the shared queue instead of blocking it.

- ``lane_isolation``: merit has its own queue and two workers, ai one: valid.
- ``lane_isolation_shared_lane``: ``PROCTOR_SHARED_LANE=on`` routes AI jobs into the merit
  queue, served by the same two workers and no ai worker, as in the seed. The exam's merit
  jobs queue behind the backlog; the checker must report them waiting behind AI jobs. The
  run stops when the students stop polling (``poll_deadline``), so the measured wait is a
  lower bound next to the one the backlog arithmetic predicts.
"""

from __future__ import annotations

import json
import time
from typing import Any

from chaos.observe.lane_jobs import job_records_background
from chaos.runner import Scenario
from chaos.load.exam import WorkloadSpec
from stack.config import CASE_AI_CALL_SECONDS

__all__ = ["AI_LIMIT_LIFTED", "BACKLOG_JOBS", "ISOLATION_SCENARIOS", "predicted_shared_wait", "seed_and_wait"]

BACKLOG_JOBS = 2000
AI_LIMIT_LIFTED = 100_000
"""Calls per case-minute for the shared AI limiter: far above what any AI worker here can make."""
BACKLOG_WAIT_SECONDS = 300.0
"""Harness set-up limit for the relay to enqueue the backlog (not part of any verdict)."""

_OPTIONS = {
    "expect_ops": ["session", "start", "answer", "finish", "merit_card"],
    # the backlog is not drained inside the run: its narratives and texts stay owed
    "allow_pending": ["narrative", "sms"],
}


def predicted_shared_wait(backlog: int, workers: int, time_scale: float) -> dict[str, float]:
    """What the seed's arithmetic predicts for a merit job queued behind the whole backlog."""
    case = backlog * CASE_AI_CALL_SECONDS / workers
    return {"case_seconds": case, "real_seconds": round(case * time_scale, 3)}


def _pending_narratives(stack: Any) -> int:  # chaos.deployment.Deployment
    from sqlalchemy import func, select

    from stack.ledger.engine import make_engine
    from stack.ledger.schema import outbox

    engine = make_engine(stack.settings, read_only=True)
    try:
        with engine.connect() as conn:
            return conn.execute(select(func.count()).select_from(outbox).where(
                outbox.c.kind == "narrative", outbox.c.status == "pending")).scalar_one()
    finally:
        engine.dispose()


def seed_and_wait(stack: Any, count: int = BACKLOG_JOBS) -> dict[str, Any]:
    """Seed ``count`` finished attempts, then wait for the relay to enqueue their narratives."""
    from stack.ledger.backlog import seed_backlog
    from stack.ledger.engine import make_engine

    engine = make_engine(stack.settings)
    try:
        seeded = seed_backlog(engine, count)
    finally:
        engine.dispose()
    started = time.monotonic()
    while (left := _pending_narratives(stack)) > 0:
        if time.monotonic() - started > BACKLOG_WAIT_SECONDS:
            raise RuntimeError(f"relay enqueued the backlog only partly: {left} narrative rows still pending "
                               f"after {BACKLOG_WAIT_SECONDS} s")
        time.sleep(0.5)
    return {**seeded.as_dict(), "enqueued_after": round(time.monotonic() - started, 3)}


def _prepare(stack: Any) -> None:
    backlog = seed_and_wait(stack)
    (stack.run_dir / "backlog.json").write_text(json.dumps(backlog))


_EXAM = WorkloadSpec(arrival_rate=3.0, duration=6.0, questions=2, poll_deadline=20.0)

ISOLATION_SCENARIOS = (
    Scenario(
        name="lane_isolation",
        description=f"{BACKLOG_JOBS} AI jobs of {CASE_AI_CALL_SECONDS:g} case-s queued, then an exam: "
                    "no merit job waits behind an AI job, merit's queue wait stays within its own bound",
        workload=_EXAM,
        merit_workers=2, ai_workers=1,
        settings={"ai_calls_per_minute": AI_LIMIT_LIFTED},
        prepare=_prepare,
        background={"lane_jobs": job_records_background()},
        options=_OPTIONS,
        extra={"lane_isolation": {"merit_workers": 2}, "backlog_jobs": BACKLOG_JOBS},
    ),
    Scenario(
        name="lane_isolation_shared_lane",
        description="negative control: AI jobs routed into the merit queue (PROCTOR_SHARED_LANE), two workers "
                    f"serve both, as in the seed; merit jobs queue behind {BACKLOG_JOBS} AI jobs",
        workload=WorkloadSpec(arrival_rate=3.0, duration=4.0, questions=2, poll_deadline=6.0),
        merit_workers=2, ai_workers=0,
        settings={"shared_lane": True, "ai_calls_per_minute": AI_LIMIT_LIFTED},
        prepare=_prepare,
        background={"lane_jobs": job_records_background()},
        options={**_OPTIONS, "allow_pending": ["merit", "narrative", "sms"],
                 "expect_ops": ["session", "start", "answer", "finish"]},
        quiet_timeout=2.0,
        extra={"lane_isolation": {"merit_workers": 2}, "backlog_jobs": BACKLOG_JOBS},
        expect_valid=False,
    ),
)
