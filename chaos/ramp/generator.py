"""The load generator's own account of a ramp: what it could not send on time, and what it cost.

Each Locust process that ran users leaves ``histories/generator-<role>-<pid>.json`` (a remote
worker sends it to the master with the end of its history; loadtests/ramp_arrivals.py): per
step the arrivals it scheduled, sent, queued (no in-flight slot free at the intended start),
delayed (sent more than the stated lag bound after the intended start), late (delayed with a
slot free: the process's own CPU) and dropped (never sent), its CPU seconds and the requests it
completed. Here they are summed per step across processes, with Locust's CPU per request and
its busy share (CPU seconds / wall seconds of the step, per process: 1.0 is one core flat out).

The generator was short when it dropped any arrival, or delayed more than the gate's share of
them: the stack was then not offered the plan's load, and no load criterion can be judged.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["generator_gate", "generator_steps", "read_generators"]

_COUNTS = ("scheduled", "sent", "queued", "delayed", "late", "dropped", "completed")


def read_generators(run_dir: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Every process's summary, and what could not be read."""
    summaries, problems = [], []
    for path in sorted((run_dir / "histories").glob("generator-*.json")):
        try:
            summaries.append({**json.loads(path.read_text()), "file": path.name})
        except (OSError, ValueError) as exc:
            problems.append(f"{path.name}: unreadable generator summary ({exc})")
    return summaries, problems


def generator_steps(summaries: list[dict[str, Any]], steps: int) -> list[dict[str, Any]]:
    """Per step, summed over processes: the counts, CPU per request and the busiest process's share."""
    rows = []
    for index in range(steps):
        row: dict[str, Any] = {"step": index, **{name: 0 for name in _COUNTS}, "cpu_seconds": 0.0, "max_lag": 0.0,
                               "busy_share": None}
        shares = []
        for summary in summaries:
            per_step = summary.get("steps") or []
            if index >= len(per_step):
                continue
            counts = per_step[index]
            for name in _COUNTS:
                row[name] += int(counts.get(name, 0))
            row["cpu_seconds"] += float(counts.get("cpu_seconds", 0.0))
            row["max_lag"] = max(row["max_lag"], float(counts.get("max_lag", 0.0)))
            if counts.get("wall_seconds"):
                shares.append(float(counts["cpu_seconds"]) / float(counts["wall_seconds"]))
        row["cpu_seconds"] = round(row["cpu_seconds"], 4)
        row["cpu_ms_per_request"] = round(1000 * row["cpu_seconds"] / row["completed"], 3) if row["completed"] else None
        row["busy_share"] = round(max(shares), 3) if shares else None
        rows.append(row)
    return rows


def generator_gate(config: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Whether the generator kept up; in the open model only (a closed model has no schedule)."""
    arrivals = config.get("arrivals") or {"mode": "closed"}
    if arrivals.get("mode") != "open":
        return {"name": "generator_kept_up", "applies": False, "passed": True,
                "derivation": "closed model: no schedule to miss"}
    limit = float(config["gate"].get("max_delayed_ratio", 0.01))
    scheduled = sum(r["scheduled"] for r in rows)
    delayed = sum(r["delayed"] for r in rows)
    dropped = sum(r["dropped"] for r in rows)
    ratio = delayed / scheduled if scheduled else None
    passed = scheduled > 0 and dropped == 0 and ratio is not None and ratio <= limit
    lag = arrivals["max_send_lag"]
    lag_source = "given" if arrivals.get("max_send_lag_given") else f"--ramp-p99 {config['gate']['p99']:g} / 10"
    derivation = (f"scheduled {scheduled}, dropped {dropped} (must be 0), delayed {delayed} = "
                  f"{'-' if ratio is None else f'{ratio:.4f}'} of scheduled (limit {limit:g}); delayed = sent more "
                  f"than {lag:g}s after the intended start ({lag_source}); slots {arrivals['slots']}")
    return {"name": "generator_kept_up", "applies": True, "limit": limit, "measured": ratio, "dropped": dropped,
            "delayed": delayed, "scheduled": scheduled, "passed": passed, "derivation": derivation}
