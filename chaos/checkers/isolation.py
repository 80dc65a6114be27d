"""Lane isolation: no merit job waited behind an AI job, and merit's queue wait stayed bounded.

Input: the lane job records RQ kept (``lane_jobs.json``, chaos/observe/lane_jobs.py): per job its
queue, worker, and enqueued/started/ended times; ``observed_at`` is when they were read, so
a merit job still waiting then has waited at least ``observed_at - enqueued_at``.

Causal facts, no wall-clock constant:

- **waited_behind_ai**: a merit job M and an AI (narrative) job A such that A started while
  M was waiting (``M.enqueued_at <= A.started_at < M.started_at``, or before ``observed_at``
  for an M still waiting) and A came from M's queue or ran on the worker that later ran M;
  or A ended on M's worker while M waited (M's start waited for A's end). With a lane of
  its own, merit's workers never touch an AI job, so any such pair is a breach.
- **wait_over_bound**: a merit job's queue wait (``started_at - enqueued_at``, or the lower
  bound above) exceeds ``(workers + burst) * per_job``, the merit-oldest formula of
  chaos/bounds.py with no kills: ``per_job`` = median merit execution (``ended - started``)
  + median pickup (``started - max(enqueued, the worker's previous end)``: fork, dequeue;
  what a free worker costs on this machine, measured in this run); ``burst`` = most merit
  jobs enqueued within one ``per_job * workers``. Both come from merit's own jobs, so a
  shared lane cannot excuse itself with AI jobs' times.

The run must exercise the claim: if no AI job ran while a merit job was queued or running,
the result is unknown (isolation from an idle AI lane proves nothing). No started merit job
leaves the bound underivable: unknown unless already invalid.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from chaos.bounds import burst
from chaos.checkers.base import Result, build_result, summarize, unknown_unless_invalid

__all__ = ["LANE_JOBS_FILE", "NAME", "LaneJob", "check_isolation", "isolation_from_run", "merit_wait_bound",
           "parse_lane_jobs", "slowdown"]

NAME = "isolation"
LANE_JOBS_FILE = "lane_jobs.json"
"""Written by chaos/observe/lane_jobs.py into the run folder."""
AI_KIND = "narrative"


@dataclass(frozen=True)
class LaneJob:
    job_id: str
    kind: str
    queue: str | None
    worker: str | None
    enqueued_at: float | None
    started_at: float | None
    ended_at: float | None


def parse_lane_jobs(document: Mapping[str, Any]) -> tuple[list[LaneJob], float]:
    """The jobs and ``exported_at`` of a lane_jobs.json document; ValueError names a bad field."""
    if document.get("table") != "lane_jobs":
        raise ValueError(f"lane_jobs: table={document.get('table')!r}, expected 'lane_jobs'")
    observed = document.get("exported_at")
    if not isinstance(observed, (int, float)):
        raise ValueError(f"lane_jobs.exported_at={observed!r}: expected epoch seconds")
    jobs = []
    for n, row in enumerate(document.get("rows") or []):
        if not isinstance(row, Mapping) or not isinstance(row.get("job_id"), str):
            raise ValueError(f"lane_jobs.rows[{n}].job_id: expected a string")
        jobs.append(LaneJob(row["job_id"], str(row.get("kind")), row.get("queue"), row.get("worker"),
                            row.get("enqueued_at"), row.get("started_at"), row.get("ended_at")))
    return jobs, float(observed)


def _waits_for(merit: LaneJob, observed_at: float) -> float:
    return (merit.started_at if merit.started_at is not None else observed_at) - merit.enqueued_at  # type: ignore[operator]


def _behind(merit: LaneJob, ai: LaneJob, observed_at: float) -> bool:
    """Did ``merit`` wait while ``ai`` took a worker it could have had?"""
    until = merit.started_at if merit.started_at is not None else observed_at
    same_worker = merit.worker is not None and ai.worker == merit.worker
    took_its_place = (ai.started_at is not None and merit.enqueued_at <= ai.started_at < until  # type: ignore[operator]
                      and (ai.queue == merit.queue or same_worker))
    held_its_worker = same_worker and ai.ended_at is not None and merit.enqueued_at < ai.ended_at <= until  # type: ignore[operator]
    return took_its_place or held_its_worker


def _pickups(jobs: Sequence[LaneJob]) -> list[float]:
    """Per started merit job: start - max(enqueued, its worker's previous end), any kind before it."""
    ends: dict[str, list[float]] = {}
    for job in jobs:
        if job.worker and job.ended_at is not None:
            ends.setdefault(job.worker, []).append(job.ended_at)
    pickups = []
    for job in jobs:
        if job.kind != "merit" or job.started_at is None or job.enqueued_at is None:
            continue
        before = [end for end in ends.get(job.worker or "", []) if end <= job.started_at]
        pickups.append(job.started_at - max([job.enqueued_at, *before]))
    return pickups


def _execution(job: LaneJob) -> float | None:
    return job.ended_at - job.started_at if job.started_at is not None and job.ended_at is not None else None


def _executions(merit: Sequence[LaneJob]) -> list[float]:
    return [took for j in merit if (took := _execution(j)) is not None]


def slowdown(job: LaneJob, merit: Sequence[LaneJob], typical: float, observed_at: float) -> float:
    """How much slower than ``typical`` (the median execution) the lane ran while ``job`` waited: the
    slowest *other* merit job whose execution overlapped the wait, at least 1. A busy machine slows
    every job alike for a moment (rehearsal run 43: two merit jobs took 0.24 s against a median of
    0.026 s, and the job behind one waited 0.1376 s against a bound of 0.1372 s), so the bound scales
    by the slowness seen beside the wait. The job's own execution begins when its wait ends, so a
    wait cannot excuse itself, and a wait with no merit job running beside it keeps the plain bound."""
    if typical <= 0:  # a clock too coarse to time a job: no ratio to take
        return 1.0
    until = job.started_at if job.started_at is not None else observed_at
    ratios = [took / typical for other in merit if (took := _execution(other)) is not None
              and other.started_at < until and other.ended_at > job.enqueued_at]  # type: ignore[operator]
    return max([1.0, *ratios])


def merit_wait_bound(jobs: Sequence[LaneJob], workers: int) -> dict[str, Any]:
    """``{"value", "formula", "terms"}``; value None (with a note) when no merit job ran. A job's own
    limit is ``value`` times its ``slowdown``."""
    formula = "(workers + burst) * (execution + pickup) * slowdown"
    merit = [j for j in jobs if j.kind == "merit"]
    ran = _executions(merit)
    if not ran:
        return {"value": None, "formula": formula, "terms": {"workers": workers},
                "note": "no merit job ran: its service time cannot be measured"}
    execution, pickup = statistics.median(ran), statistics.median(_pickups(merit))
    per_job = execution + max(pickup, 0.0)
    arrivals = burst(sorted(j.enqueued_at for j in merit if j.enqueued_at is not None), per_job * workers)
    terms = {"workers": workers, "execution": round(execution, 4), "pickup": round(pickup, 4),
             "per_job": round(per_job, 4), "burst": arrivals, "measured_jobs": len(ran)}
    return {"value": round((workers + arrivals) * per_job, 4), "formula": formula, "terms": terms}


def _exercised(merit: Iterable[LaneJob], ai: Sequence[LaneJob], observed_at: float) -> int:
    """AI jobs that ran while some merit job was queued or running (the claim was under load)."""
    spans = [(m.enqueued_at, m.ended_at if m.ended_at is not None else observed_at) for m in merit]
    return sum(1 for a in ai if a.started_at is not None and any(
        start <= (a.ended_at if a.ended_at is not None else observed_at) and a.started_at <= end  # type: ignore[operator]
        for start, end in spans))


def check_isolation(jobs: Sequence[LaneJob], observed_at: float, merit_workers: int) -> Result:
    merit = [j for j in jobs if j.kind == "merit" and j.enqueued_at is not None]
    ai = [j for j in jobs if j.kind == AI_KIND]
    bound = merit_wait_bound(merit, merit_workers)
    behind = []
    for m in merit:
        blocker = next((a for a in ai if _behind(m, a, observed_at)), None)
        if blocker is not None:
            behind.append({"merit_job": m.job_id, "ai_job": blocker.job_id, "queue": m.queue,
                           "worker": m.worker, "ai_worker": blocker.worker, "waited": round(_waits_for(m, observed_at), 4)})
    waits = {m.job_id: _waits_for(m, observed_at) for m in merit}
    over = [] if bound["value"] is None else _over_bound(merit, waits, bound["value"], observed_at)
    overlapping = _exercised(merit, ai, observed_at)
    details = {"bound": bound, "merit_wait": summarize(waits.values()),
               "never_started": sum(m.started_at is None for m in merit), "ai_jobs_overlapping_merit": overlapping}
    result = build_result(NAME, bad={"waited_behind_ai": behind, "wait_over_bound": over},
                          counts={"merit_jobs": len(merit), "ai_jobs": len(ai)}, details=details)
    reasons = [] if merit else ["no merit job in the lane records: nothing to judge"]
    if merit and not overlapping:
        reasons.append("no AI job ran while a merit job was queued or running: isolation was not exercised")
    if bound["value"] is None:
        reasons.append(f"merit wait bound underivable: {bound['note']}")
    return unknown_unless_invalid(result, reasons)


def _over_bound(merit: Sequence[LaneJob], waits: dict[str, float], bound: float,
                observed_at: float) -> list[dict[str, Any]]:
    typical = statistics.median(_executions(merit))  # the bound's execution term, unrounded
    over = []
    for m in sorted(merit, key=lambda job: -waits[job.job_id]):
        factor = slowdown(m, merit, typical, observed_at)
        limit = round(bound * factor, 4)
        if waits[m.job_id] > limit:
            over.append({"merit_job": m.job_id, "waited": round(waits[m.job_id], 4), "bound": limit,
                         "slowdown": round(factor, 2), "started": m.started_at is not None})
    return over


def isolation_from_run(run_dir: Path, spec: Any) -> Result:
    """The checker over a run folder's lane_jobs.json; ``spec`` is scenario.json's
    ``lane_isolation`` object (``{"merit_workers": n}``). An unreadable file is unknown."""
    workers = spec.get("merit_workers") if isinstance(spec, Mapping) else None
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        return Result.unknown(NAME, [f"scenario.json lane_isolation.merit_workers={workers!r}: expected a whole number >= 1"])
    try:
        jobs, observed_at = parse_lane_jobs(json.loads((Path(run_dir) / LANE_JOBS_FILE).read_text()))
    except (OSError, ValueError) as exc:
        return Result.unknown(NAME, [f"{LANE_JOBS_FILE} could not be read: {exc}"])
    return check_isolation(jobs, observed_at, workers)
