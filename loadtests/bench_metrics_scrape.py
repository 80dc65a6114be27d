"""Benchmark: the lane-latency part of a /metrics scrape, full scan vs incremental, side by side.

``python loadtests/bench_metrics_scrape.py [--sizes 10000 50000] [--scrapes 15] [--arrivals 20]``
makes a SQLite ledger in a temporary directory and, for each size N, fills it with N done
outbox rows (finished over the past two hours, as a long exam day leaves them), then times,
in the same process and ledger:

- ``full``: ``outbox.latency_histogram``, the grouped scan every scrape did before (#12);
- ``first``: the incremental tracker's first scrape after a node starts (one full read);
- ``steady``: each later scrape, with ``--arrivals`` rows done between two scrapes (their
  ``done_at`` spread over ``--interval`` ledger seconds, as a scrape every 15 s sees them;
  the benchmark does not wait for them).

Times are ``time.perf_counter`` medians over ``--scrapes`` scrapes, on whatever else the
machine runs (the 1-minute load average is printed). The incremental histograms are compared
with a full scan at the end of each size (counts and buckets must be equal). Figures are
printed, never asserted. Nothing but the ledger part of a scrape is timed (no Valkey, no HTTP).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Sequence

from sqlalchemy import Engine, insert

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stack.config import Settings
from stack.ledger import outbox
from stack.ledger.engine import init_ledger, make_engine
from stack.ledger.schema import attempts, outbox as outbox_table, students
from stack.web.lane_latency import LaneLatency
from stack.web.metrics import LANE_LATENCY_BOUNDS

KINDS = ("merit", "narrative", "sms")


def seed_done_rows(engine: Engine, exam_code: str, done_at: Sequence[float], prefix: str = "s",
                   latency: Callable[[int], float] = lambda i: 0.05 + (i % 97) * 0.37) -> list[str]:
    """One student and finished attempt per entry, with one done outbox row of kind ``KINDS[i % 3]``
    finished at ``done_at[i]`` after ``latency(i)`` seconds; returns the operation ids."""
    people, tries, rows = [], [], []
    for i, done in enumerate(done_at):
        attempt, created = f"{prefix}-a{i}", done - latency(i)
        people.append({"id": f"{prefix}-s{i}", "created_at": created})
        tries.append({"id": attempt, "student_id": f"{prefix}-s{i}", "exam_code": exam_code, "status": "finished",
                      "started_at": created - 60, "finished_at": created})
        kind = KINDS[i % len(KINDS)]
        rows.append({"operation_id": f"{kind}-{attempt}", "attempt_id": attempt, "kind": kind, "status": "done",
                     "attempts": 1, "created_at": created, "updated_at": done, "done_at": done})
    with engine.begin() as conn:
        for table, values in ((students, people), (attempts, tries), (outbox_table, rows)):
            for start in range(0, len(values), 5000):
                conn.execute(insert(table), values[start:start + 5000])
    return [row["operation_id"] for row in rows]


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def _time(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def bench_size(folder: Path, size: int, scrapes: int, arrivals: int, overlap: float | None,
               interval: float) -> dict[str, float]:
    settings = Settings(run_dir=folder, exams={"BENCH-1": 1})
    engine = make_engine(settings)
    init_ledger(engine, settings)
    now = time.time()
    rng = random.Random(size)
    spread = sorted(now - rng.uniform(0, 7200) for _ in range(size))
    seed_done_rows(engine, "BENCH-1", spread, prefix="old")
    read = make_engine(settings, read_only=True)
    tracker = LaneLatency(LANE_LATENCY_BOUNDS, overlap)
    with read.connect() as conn:
        full = [_time(lambda: outbox.latency_histogram(conn, LANE_LATENCY_BOUNDS)) for _ in range(scrapes)]
        first = _time(lambda: tracker.update(conn))
    steady, read_before = [], tracker.rows_read
    for n in range(scrapes):  # rows done over one scrape interval (ledger times, not waited for)
        start = now + n * interval
        seed_done_rows(engine, "BENCH-1", [start + (j + 1) * interval / arrivals for j in range(arrivals)],
                       prefix=f"new{n}")
        with read.connect() as conn:
            steady.append(_time(lambda: tracker.update(conn)))
    with read.connect() as conn:
        incremental, reference = tracker.update(conn), outbox.latency_histogram(conn, LANE_LATENCY_BOUNDS)
    equal = {k: v[:2] for k, v in incremental.items()} == {k: v[:2] for k, v in reference.items()}
    engine.dispose()
    read.dispose()
    return {"rows": size, "full_ms": _median_ms(full), "first_ms": first * 1000, "steady_ms": _median_ms(steady),
            "read_per_scrape": (tracker.rows_read - read_before) / (scrapes + 1), "equal": equal}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000, 50_000], help="done outbox rows per ledger")
    p.add_argument("--scrapes", type=int, default=15, help="scrapes timed per figure (median)")
    p.add_argument("--arrivals", type=int, default=20, help="rows done between two steady scrapes")
    p.add_argument("--interval", type=float, default=15.0,
                   help="ledger seconds between two scrapes: the arrivals' done_at are spread over it")
    p.add_argument("--overlap", type=float, default=None,
                   help="seconds re-read below the high-water mark (default: SQLite's, 1 s; PostgreSQL's is 60 s)")
    args = p.parse_args(argv)
    if min(args.sizes) < 1 or args.scrapes < 1 or args.arrivals < 1 or args.interval <= 0:
        p.error("--sizes, --scrapes and --arrivals must be >= 1, --interval > 0")
    print(f"load average (1 min) before: {os.getloadavg()[0]:.2f}; overlap {args.overlap or 'SQLite default (1 s)'}")
    print("| outbox rows | full scan per scrape (ms) | incremental: first scrape (ms) | incremental: steady scrape (ms) "
          "| rows read per steady scrape | equal to a full scan |")
    print("|---|---|---|---|---|---|")
    for size in args.sizes:
        with tempfile.TemporaryDirectory(prefix="bench-metrics-") as tmp:
            r = bench_size(Path(tmp), size, args.scrapes, args.arrivals, args.overlap, args.interval)
        print(f"| {r['rows']} | {r['full_ms']:.1f} | {r['first_ms']:.1f} | {r['steady_ms']:.2f} "
              f"| {r['read_per_scrape']:.0f} | {'yes' if r['equal'] else 'NO'} |")
    print(f"load average (1 min) after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
