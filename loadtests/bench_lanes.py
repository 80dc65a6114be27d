"""Benchmark: what a merit worker costs to restart and what each job costs it.

``python loadtests/bench_lanes.py [--kills 5] [--jobs 20] [--hog]`` starts the embedded
stack (1 web node, 1 merit worker, no other workers) and prints, in real seconds:

- restart: SIGKILL the worker's tree, the supervisor restarts it at once; seconds from
  the kill until the new worker is ready (its liveness key set, about to dequeue), and
  the new process's own start-up (spawn -> ready);
- per job: a trivial job (``stack.lanes.jobs.answer_key``) enqueued on the merit lane one
  at a time; enqueue -> RQ ``ended_at``: dequeue, fork of the horse, its Valkey
  connection, status writes. Everything a merit job pays besides its own work.

``--hog`` runs ``python3 -c 'while 1: pass'`` (one core busy) for the whole benchmark and
stops it by pid. Writes ``results/bench/lanes[-hog].json``. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from rq import Queue
from rq.job import Job

from stack.embedded import EmbeddedStack, StackSpec

RESULTS = Path("results/bench")


def _summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"n": len(ordered), "median": round(statistics.median(ordered), 4), "min": round(ordered[0], 4),
            "max": round(ordered[-1], 4)}


def measure_restarts(stack: EmbeddedStack, kills: int) -> dict[str, dict[str, float]]:
    to_ready, startup = [], []
    for _ in range(kills):
        time.sleep(0.5)
        starts = stack._supervisor().info("worker_merit_1")["starts"]
        killed = time.monotonic()
        stack.kill("worker_merit_1", signal.SIGKILL)
        while stack._supervisor().info("worker_merit_1")["starts"] == starts:  # restarted at once
            time.sleep(0.01)
        stack.wait_healthy("worker_merit_1", 60)
        to_ready.append(time.monotonic() - killed)
        startup.append(stack.ready_seconds("worker_merit_1") or float("nan"))
    return {"kill_to_ready": _summary(to_ready), "startup": _summary(startup)}


def measure_jobs(stack: EmbeddedStack, jobs: int) -> dict[str, dict[str, float]]:
    queue = Queue("merit", connection=stack.valkey("queue"))
    total, before_start = [], []
    for n in range(jobs):
        job = queue.enqueue("stack.lanes.jobs.answer_key", "NOVA-101", f"q{n}", job_id=f"bench-{time.time_ns()}")
        while job.get_status(refresh=True) not in ("finished", "failed"):
            time.sleep(0.005)
        job = Job.fetch(job.id, connection=queue.connection)
        total.append((job.ended_at - job.enqueued_at).total_seconds())
        before_start.append((job.started_at - job.enqueued_at).total_seconds())
    return {"enqueue_to_end": _summary(total), "enqueue_to_start": _summary(before_start)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--hog", action="store_true", help="keep one core busy with a CPU hog")
    args = parser.parse_args()
    hog = subprocess.Popen([sys.executable, "-c", "while 1: pass"]) if args.hog else None
    try:
        spec = StackSpec(name="bench-lanes", web=1, merit_workers=1, ai_workers=0, sms_workers=0)
        with EmbeddedStack(spec) as stack:
            figures = {"hog": args.hog, "restart": measure_restarts(stack, args.kills),
                       "per_job": measure_jobs(stack, args.jobs)}
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"lanes{'-hog' if args.hog else ''}.json"
    out.write_text(json.dumps(figures, indent=2))
    print(json.dumps(figures, indent=2))
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
