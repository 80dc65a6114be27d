"""Lanes: one RQ queue per kind of work, each served by its own single-queue workers.

A single-queue worker dequeues with an atomic BLMOVE (a reservation); a
multi-queue worker does not, and priority between queues does not pre-empt a
running job. So the urgent merit lane never shares a worker with the AI lane.
"""

from __future__ import annotations

from typing import Mapping

from redis import Redis
from rq import Queue
from rq.serializers import JSONSerializer

from stack.config import Settings
from stack.ledger.outbox import job_id, operation_id  # job_id: re-exported, the lanes name jobs with it

__all__ = ["JOB_SERIALIZER", "LANES", "LANE_OF_KIND", "JOB_FUNCTION", "SHARED_LANE_ROUTES", "operation_id", "job_id", "lane_routes", "queue_for"]

LANES = ("merit", "ai", "sms")

JOB_SERIALIZER = JSONSerializer
"""Every Queue, Worker and Job.fetch of the project uses it, never RQ's default pickle: decoding
a job must run no code (stack/lanes/allowlist.py)."""

LANE_OF_KIND = {"merit": "merit", "narrative": "ai", "sms": "sms"}
"""Outbox kind -> lane (queue name)."""

SHARED_LANE_ROUTES = {"merit": "merit", "narrative": "merit", "sms": "sms"}
"""The seed's shared lane, a negative control only (``PROCTOR_SHARED_LANE=on``): narrative
(AI) jobs join the merit queue, whose two workers then serve both, in FIFO order."""

JOB_FUNCTION = {
    "merit": "stack.lanes.jobs.compute_merit_card",
    "narrative": "stack.lanes.ai.job.write_narrative",  # limiter, retries by class, billing (docs/ai-lane.md)
    "sms": "stack.lanes.jobs.send_result_sms",
}
"""Outbox kind -> importable job function (workers import jobs by dotted path)."""



def lane_routes(settings: Settings) -> Mapping[str, str]:
    """Kind -> queue for this process: the one place ``PROCTOR_SHARED_LANE`` is read. The
    table is picked whole, so enqueueing and the relay's look-ups meet no branch of their own."""
    return SHARED_LANE_ROUTES if settings.controls.shared_lane else LANE_OF_KIND


def queue_for(kind: str, connection: Redis, routes: Mapping[str, str] = LANE_OF_KIND) -> Queue:
    return Queue(routes[kind], connection=connection, serializer=JOB_SERIALIZER)
