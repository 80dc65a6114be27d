"""Who held the SQLite ledger's write lock in each step of a ramp, from a lock trace.

``python loadtests/lock_report.py RUN_DIR`` reads ``RUN_DIR/lock_trace/*.tsv``, written by
``loadtests/lock_trace/sitecustomize.py`` when ``bench_ramp.py --lock-trace`` ran, and prints,
per step of the ramp: the write transactions that got the lock in it, the share of the step the
lock was held, the lock's milliseconds per completed request, the wait for it (p50/p99) and the
holders that held it longest (by component and first statement). ``bench_ramp.py`` calls
``step_summary`` itself and stores the rows in ``results/bench/ramp.json``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: the repository's packages
    sys.path.insert(0, str(ROOT))

from chaos.history import read_history  # noqa: E402
from chaos.ramp.gate import completions, read_ticks  # noqa: E402

__all__ = ["Transaction", "main", "read_trace", "step_summary", "step_windows"]

TRACE_DIR = "lock_trace"


@dataclass(frozen=True)
class Transaction:
    component: str
    pid: int
    asked: float  # wall clock: BEGIN IMMEDIATE sent
    got: float  # BEGIN IMMEDIATE returned: the lock is ours
    released: float  # COMMIT or ROLLBACK returned
    statements: int
    outcome: str
    first: str

    @property
    def hold(self) -> float:
        return self.released - self.got

    @property
    def wait(self) -> float:
        return self.got - self.asked


def read_trace(folder: Path) -> list[Transaction]:
    """Every traced transaction of every process; a line cut short by a kill is skipped."""
    found = []
    for path in sorted(folder.glob("*.tsv")):
        for line in path.read_text(errors="replace").splitlines():
            fields = line.split("\t")
            if len(fields) != 9:
                continue
            pid, component, _thread, asked, got, released, statements, outcome, first = fields
            found.append(Transaction(component, int(pid), float(asked), float(got), float(released),
                                     int(statements), outcome, first))
    return found


def step_windows(run_dir: Path) -> list[tuple[dict[str, Any], float, float]]:
    """Each step of the ramp's plan with its wall-clock window, as the ramp's own report cuts them."""
    ticks = read_ticks(run_dir)
    if not ticks:
        return []
    origin = ticks[0]["wall"] - ticks[0]["elapsed"]
    schedule = json.loads((run_dir / "ramp_config.json").read_text())["plan"]["schedule"]
    return [(step, origin + step["start"], origin + step["end"]) for step in schedule]


def _quantile(values: list[float], q: float) -> float | None:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else None


def _holder(tx: Transaction) -> tuple[str, str]:
    # web_1 and web_2 are one kind of holder; so are a worker and its horses
    return re.sub(r"_\d+$", "", tx.component), " ".join(tx.first.split()[:4])


def step_summary(transactions: list[Transaction], start: float, end: float, requests: int,
                 top: int = 8) -> dict[str, Any]:
    """The lock in [start, end): transactions that got it then, the share held, waits, top holders."""
    inside = [tx for tx in transactions if start <= tx.got < end]
    held = sum(tx.hold for tx in inside)
    groups: dict[tuple[str, str], list[Transaction]] = defaultdict(list)
    for tx in inside:
        groups[_holder(tx)].append(tx)
    holders = sorted(groups.items(), key=lambda item: -sum(tx.hold for tx in item[1]))[:top]
    return {
        "write_transactions": len(inside),
        "held_share": round(held / (end - start), 3) if end > start else None,
        "held_ms_per_request": round(1000 * held / requests, 2) if requests else None,
        "wait_p50_ms": _ms(_quantile([tx.wait for tx in inside], 0.5)),
        "wait_p99_ms": _ms(_quantile([tx.wait for tx in inside], 0.99)),
        "holders": [{"component": component, "first": first, "transactions": len(txs),
                     "held_s": round(sum(tx.hold for tx in txs), 3),
                     "hold_p50_ms": _ms(_quantile([tx.hold for tx in txs], 0.5)),
                     "hold_p99_ms": _ms(_quantile([tx.hold for tx in txs], 0.99))}
                    for (component, first), txs in holders],
    }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(1000 * seconds, 1)


def render(step: Any, summary: dict[str, Any]) -> list[str]:
    lines = [f"step {step:g} req/s: {summary['write_transactions']} write transactions, lock held "
             f"{summary['held_share']} of the step, {summary['held_ms_per_request']} ms per request, "
             f"wait p50 {summary['wait_p50_ms']} ms, p99 {summary['wait_p99_ms']} ms"]
    lines += [f"  {h['component']:<14} {h['first']:<44} n={h['transactions']:<5} held {h['held_s']:.2f} s  "
              f"hold p50 {h['hold_p50_ms']} ms, p99 {h['hold_p99_ms']} ms" for h in summary["holders"]]
    return lines


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="the run folder of a bench_ramp.py --lock-trace run")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    run_dir = parser.parse_args(argv).run_dir
    if not (run_dir / TRACE_DIR).is_dir():
        parser.error(f"{run_dir / TRACE_DIR}: no lock trace here (run bench_ramp.py --lock-trace)")
    if not (run_dir / "ramp_config.json").exists():
        parser.error(f"{run_dir}: not a ramp's run folder (no ramp_config.json)")
    transactions = read_trace(run_dir / TRACE_DIR)
    done = completions(read_history(run_dir / "history.jsonl").ops)
    for step, start, end in step_windows(run_dir):
        requests = sum(1 for op in done if start <= float(op.extra["wall"]) < end)
        print("\n".join(render(step["rate"], step_summary(transactions, start, end, requests))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
