"""Where a merit card's finish-to-ready time goes, and who had the CPU meanwhile (#12 bench).

``merit_split(run_dir)`` joins the exam's merit outbox rows (``ledgers/outbox.json``) with the
job records RQ kept (``lane_jobs.json``, chaos/observe/lane_jobs.py) on the job id, and splits each
card's ``done_at - created_at`` into four consecutive parts (all epoch seconds, one clock):

- ``dispatch``: finish commit (outbox ``created_at``) -> job in the queue (RQ ``enqueued_at``),
  the web node's dispatch thread or, if that failed, the relay;
- ``pickup``: RQ ``enqueued_at`` -> ``started_at``: the BLMOVE, the fork of the horse and RQ's
  start bookkeeping;
- ``execution``: ``started_at`` -> outbox ``done_at``: the job's own work up to its commit;
- ``finish``: ``done_at`` -> RQ ``ended_at``: RQ's bookkeeping after the card is already
  readable (not part of finish-to-ready; shown so the parts add up to the job's life).

``cpu_window_background()`` is a scenario background that reads /proc when the exam's load
starts and when it stops, and returns the CPU seconds each component's process tree used in
that window (reaped horses count in their worker), the machine's busy seconds, and the rest
(processes outside the stack: other sessions on a shared machine).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from pathlib import Path
from typing import Any

from proc_cpu import machine_busy_seconds, read_table

__all__ = ["PARTS", "cpu_window_background", "merit_split", "quantile", "split_summary"]

PARTS = ("dispatch", "pickup", "execution", "finish")
_BACKLOG_PREFIX = "BACKLOG-"


def quantile(values: list[float], q: float) -> float | None:
    """Nearest rank: always an observed value."""
    ordered = sorted(values)
    return round(ordered[max(0, math.ceil(q * len(ordered)) - 1)], 4) if ordered else None


def _rows(path: Path) -> list[dict[str, Any]]:
    return json.loads(path.read_text())["rows"]


def merit_split(run_dir: Path) -> list[dict[str, float]]:
    """One dict per exam merit card that RQ ran and the ledger closed: ``total`` and the PARTS."""
    run_dir = Path(run_dir)
    exam_of = {a["attempt_id"]: str(a.get("exam_code", "")) for a in _rows(run_dir / "ledgers" / "attempts.json")}
    jobs = {job["job_id"]: job for job in _rows(run_dir / "lane_jobs.json")}
    cards = []
    for row in _rows(run_dir / "ledgers" / "outbox.json"):
        if row["kind"] != "merit" or row["done_at"] is None or exam_of.get(row["attempt_id"], "").startswith(_BACKLOG_PREFIX):
            continue
        job = jobs.get(row.get("job_id") or "")
        if not job or None in (job["enqueued_at"], job["started_at"], job["ended_at"]):
            continue  # run by no job RQ still remembers: no split, still in the bench's total
        cards.append({"total": row["done_at"] - row["created_at"],
                      "dispatch": job["enqueued_at"] - row["created_at"],
                      "pickup": job["started_at"] - job["enqueued_at"],
                      "execution": row["done_at"] - job["started_at"],
                      "finish": job["ended_at"] - row["done_at"]})
    return cards


def split_summary(cards: list[dict[str, float]]) -> dict[str, Any]:
    """p50 / p99 / max of the total and of each part, and which part the slowest card spent most in."""
    summary: dict[str, Any] = {"cards": len(cards)}
    for part in ("total", *PARTS):
        values = [card[part] for card in cards]
        summary[part] = {"p50": quantile(values, 0.5), "p99": quantile(values, 0.99), "max": quantile(values, 1.0)}
    if cards:
        slowest = max(cards, key=lambda card: card["total"])
        summary["slowest"] = {part: round(slowest[part], 4) for part in ("total", *PARTS)}
    return summary


def _component_roots(run_dir: Path) -> dict[str, int]:
    manifest = json.loads((run_dir / "manifest.json").read_text())
    return {name: entry["pid"] for name, entry in manifest.get("components", {}).items() if entry.get("pid")}


def _snapshot(run_dir: Path) -> dict[str, Any]:
    table = read_table()
    busy, _total = machine_busy_seconds()
    return {"wall": time.time(), "busy": busy,
            "components": {name: table.cpu(table.tree(pid)) for name, pid in _component_roots(run_dir).items()}}


def cpu_window_background():  # a chaos.runner.Background
    """CPU seconds per component over the exam (load start -> load stop), from /proc."""
    async def measure(stack, history, stop: asyncio.Event) -> dict[str, Any]:
        before = await asyncio.to_thread(_snapshot, stack.run_dir)
        await stop.wait()
        after = await asyncio.to_thread(_snapshot, stack.run_dir)
        used = {name: round(after["components"][name] - before["components"].get(name, 0.0), 2)
                for name in after["components"]}
        stack_total = sum(used.values())
        busy = after["busy"] - before["busy"]
        return {"seconds": round(after["wall"] - before["wall"], 2), "machine_busy": round(busy, 2),
                "stack": round(stack_total, 2), "outside_stack": round(busy - stack_total, 2),
                "components": dict(sorted(used.items(), key=lambda item: -item[1]))}
    return measure
