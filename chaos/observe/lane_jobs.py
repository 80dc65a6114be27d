"""Job records of the lanes, read from RQ itself: which worker ran which job, and when.

The outbox says when a job was enqueued and when its outcome was written; it does not
say which worker ran it or when the run began. RQ keeps both in each job's hash
(``rq:job:<id>``: ``origin`` queue, ``worker_name``, ``enqueued_at``, ``started_at``,
``ended_at``, ``status``) for ``result_ttl`` (500 s) after the job ended, so a run reads
them once the load is over and stores them as ``<run_dir>/lane_jobs.json``:

    {"table": "lane_jobs", "exported_at": <epoch>, "rows": [
      {"job_id": "merit-<attempt>-1", "kind": "merit", "queue": "merit", "worker": "worker_merit_1.812",
       "status": "finished", "enqueued_at": ..., "started_at": ..., "ended_at": ...}, ...]}

Times are epoch seconds (RQ writes UTC ISO strings); a job not started yet has
``started_at`` null, and ``exported_at`` is when the queue was observed, so its wait so far
is a lower bound. The lane-isolation checker (chaos/checkers/isolation.py) reads the file.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chaos.checkers.isolation import LANE_JOBS_FILE

if TYPE_CHECKING:  # the harness's base install has no redis; only a stack run calls this
    from redis import Redis

__all__ = ["LANE_JOBS_FILE", "harvest_jobs", "job_records_background", "parse_rq_time", "write_lane_jobs"]

_FIELDS = ("origin", "status", "worker_name", "enqueued_at", "started_at", "ended_at")
_KINDS = ("merit", "narrative", "sms")


def parse_rq_time(raw: bytes | str | None) -> float | None:
    """RQ's ``%Y-%m-%dT%H:%M:%S.%fZ`` (UTC) as epoch seconds; None for an empty field."""
    if not raw:
        return None
    text = raw.decode() if isinstance(raw, bytes) else raw
    stamp = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ" if "." in text else "%Y-%m-%dT%H:%M:%SZ")
    return stamp.replace(tzinfo=timezone.utc).timestamp()


def _text(raw: bytes | None) -> str | None:
    return raw.decode() if raw else None


def _record(job_id: str, values: list[bytes | None]) -> dict[str, Any]:
    fields = dict(zip(_FIELDS, values))
    return {"job_id": job_id, "kind": job_id.split("-", 1)[0], "queue": _text(fields["origin"]),
            "worker": _text(fields["worker_name"]), "status": _text(fields["status"]),
            **{name: parse_rq_time(fields[name]) for name in ("enqueued_at", "started_at", "ended_at")}}


def harvest_jobs(redis: "Redis") -> list[dict[str, Any]]:
    """Every job of the three kinds that Valkey still holds, as a record (sorted by job id)."""
    ids = sorted({key.decode().split(":", 2)[2] for key in redis.scan_iter(match="rq:job:*", count=1000)
                  if key.count(b":") == 2})
    ids = [job_id for job_id in ids if job_id.split("-", 1)[0] in _KINDS]
    pipe = redis.pipeline(transaction=False)
    for job_id in ids:
        pipe.hmget(f"rq:job:{job_id}", _FIELDS)
    return [_record(job_id, values) for job_id, values in zip(ids, pipe.execute())]


def write_lane_jobs(run_dir: Path, rows: list[dict[str, Any]], exported_at: float) -> Path:
    path = Path(run_dir) / LANE_JOBS_FILE
    path.write_text(json.dumps({"table": "lane_jobs", "exported_at": exported_at, "rows": rows}))
    return path


def job_records_background():  # a chaos.runner.Background
    """A scenario background: once the load is over, store the job records of every lane."""
    async def harvest(stack, history, stop: asyncio.Event) -> dict[str, Any]:
        from stack.valkey_client import valkey_client

        await stop.wait()
        redis = valkey_client(stack.settings, "probe")
        observed = time.time()
        rows = await asyncio.to_thread(harvest_jobs, redis)
        write_lane_jobs(stack.run_dir, rows, observed)
        return {"lane_jobs": len(rows), "started": sum(r["started_at"] is not None for r in rows)}
    return harvest
