"""The final read's queue evidence (stack/lanes/evidence.py) against a real valkey-server and RQ's own keys.

Each open outbox row's job is put where a lane would leave it (waiting in its queue, taken
into the intermediate list, started by a live or a dead worker, gone), and the reading
must say so: the jobs checker calls only the first states work in progress.
"""

from __future__ import annotations

from typing import Iterator

import pytest
from redis import Redis
from rq import Queue
from rq.executions import Execution
from rq.intermediate_queue import IntermediateQueue
from rq.job import Job

from chaos.checkers.jobs import IN_PROGRESS as CHECKER_IN_PROGRESS
from stack.lanes.evidence import IN_PROGRESS, job_states
from stack.lanes.queues import LANE_OF_KIND
from stack.lanes.worker import RELAY_LIVENESS, liveness_key
from valkeysupport import running_valkey

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Redis]:
    with running_valkey(tmp_path_factory.mktemp("valkey")) as client:
        yield client


def enqueued(op: str) -> dict:
    return {"operation_id": op, "kind": op.split("-", 1)[0], "status": "enqueued", "job_id": f"{op}-1"}


def test_each_place_a_job_can_be_in_is_read_as_its_state(redis: Redis) -> None:
    redis.flushall()
    merit = Queue("merit", connection=redis)
    for op in ("merit-a1", "merit-a2", "merit-a3", "merit-a4", "merit-a5"):
        merit.enqueue("stack.lanes.jobs.compute_merit_card", op, job_id=f"{op}-1")
    intermediate = IntermediateQueue.get_intermediate_queue_key(merit.key)
    redis.lrem(merit.key, 0, "merit-a2-1")
    redis.rpush(intermediate, "merit-a2-1")  # a worker took it and has not started it yet
    for op, worker in (("merit-a3", "w-alive"), ("merit-a4", "w-dead")):
        redis.lrem(merit.key, 0, f"{op}-1")
        redis.hset(Job.key_for(f"{op}-1"), mapping={"status": "started", "worker_name": worker})
    redis.set(liveness_key("w-alive"), "1", ex=30)
    redis.set(liveness_key(RELAY_LIVENESS), "1", ex=30)
    redis.lrem(merit.key, 0, "merit-a5-1")
    redis.delete(Job.key_for("merit-a5-1"))  # Valkey lost it
    rows = [enqueued(f"merit-a{n}") for n in range(1, 6)]
    rows += [{"operation_id": "sms-a1", "kind": "sms", "status": "pending", "job_id": None},
             {"operation_id": "narrative-a1", "kind": "narrative", "status": "pending", "job_id": None}]
    states = {r["operation_id"]: r["state"] for r in job_states(redis, rows, LANE_OF_KIND, enqueueable={"sms-a1"})}
    assert states == {"merit-a1": "queued", "merit-a2": "dequeued", "merit-a3": "running", "merit-a4": "abandoned",
                      "merit-a5": "absent", "sms-a1": "awaiting_relay", "narrative-a1": "waiting"}


def test_a_row_ready_to_enqueue_with_no_relay_alive_is_unrelayed(redis: Redis) -> None:
    """A dead relay's liveness key expires: the row it would have enqueued is stuck, not in progress.
    A row not yet enqueueable waits whoever is alive; the relay coming back makes it in progress again."""
    redis.flushall()
    rows = [{"operation_id": "merit-a1", "kind": "merit", "status": "pending", "job_id": None},
            {"operation_id": "sms-a1", "kind": "sms", "status": "pending", "job_id": None}]

    def states() -> dict[str, str]:
        return {r["operation_id"]: r["state"] for r in job_states(redis, rows, LANE_OF_KIND, enqueueable={"merit-a1"})}

    assert states() == {"merit-a1": "unrelayed", "sms-a1": "waiting"}
    assert "unrelayed" not in IN_PROGRESS
    redis.set(liveness_key(RELAY_LIVENESS), "1", px=200)
    assert states() == {"merit-a1": "awaiting_relay", "sms-a1": "waiting"}


def test_a_job_left_in_the_intermediate_list_by_a_dead_worker_is_abandoned(redis: Redis) -> None:
    """A horse killed before its first write leaves the job in the intermediate list with the
    execution its worker recorded before the fork; that worker's liveness is gone, so no one will
    start the job. A job whose execution belongs to a live worker is still dequeued."""
    redis.flushall()
    merit = Queue("merit", connection=redis)
    intermediate = IntermediateQueue.get_intermediate_queue_key(merit.key)
    for op, worker in (("merit-a1", "w-alive"), ("merit-a2", "w-dead")):
        job = merit.enqueue("stack.lanes.jobs.compute_merit_card", op, job_id=f"{op}-1")
        redis.lrem(merit.key, 0, job.id)
        redis.rpush(intermediate, job.id)
        with redis.pipeline() as pipe:
            Execution.create(job, ttl=30, pipeline=pipe, worker_name=worker)
            pipe.execute()
    redis.set(liveness_key("w-alive"), "1", ex=30)
    records = job_states(redis, [enqueued("merit-a1"), enqueued("merit-a2")], LANE_OF_KIND, enqueueable=set())
    assert {r["operation_id"]: r["state"] for r in records} == {"merit-a1": "dequeued", "merit-a2": "abandoned"}


def test_a_job_that_ended_in_rq_reports_rqs_status(redis: Redis) -> None:
    redis.flushall()
    redis.hset(Job.key_for("sms-a1-1"), mapping={"status": "failed"})
    [record] = job_states(redis, [enqueued("sms-a1")], LANE_OF_KIND, enqueueable=set())
    assert record == {"operation_id": "sms-a1", "kind": "sms", "lane": "sms", "status": "enqueued",
                      "job_id": "sms-a1-1", "state": "failed"}


def test_the_checker_and_the_stack_agree_on_what_is_in_progress() -> None:
    assert CHECKER_IN_PROGRESS == IN_PROGRESS
