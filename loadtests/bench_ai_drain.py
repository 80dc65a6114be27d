"""Benchmark the AI lane's drain on the real embedded stack: the ratio against N / 8 case-minutes.

Run: ``.venv/bin/python loadtests/bench_ai_drain.py [--runs 1] [--scenario ai_storm] [--seed S]``
(about a minute per run). Each run is the catalogue scenario (chaos/ailane_scenarios.py):
a backlog of N >= 100 narratives behind a paused lane, resumed through the admin API into a
429 storm, drained by 2 RQ AI workers through the shared limiter. The drain is measured
on the ledger (resume -> last narrative ``done_at``), and again from the end of the last
Retry-After the provider asked for (the part the limiter alone paces). The issue's target
is a ratio of <= 1.1; this prints the measured ratios and whether the target was met, and writes
``<results>/bench/ai_drain.json`` (``stack.paths.bench_dir``). It asserts nothing: a slow,
shared machine may miss the target, and that is a figure, not a failed test.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chaos.runner import run_scenario  # noqa: E402
from chaos.scenarios import get_scenario  # noqa: E402
from stack.paths import bench_dir  # noqa: E402

TARGET_RATIO = 1.1


def one_run(name: str, seed: int) -> dict[str, Any]:
    result = run_scenario(get_scenario(name), seed, progress=lambda msg: print(f"  [{name}] {msg}", flush=True))
    lane = json.loads((result.run_dir / "scenario.json").read_text())["background"]["ai_lane"]
    over = result.verdict["checkers"]["provider_limit"]["counts"].get("over_limit")
    return {"run_dir": str(result.run_dir), "valid": result.valid, "over_limit": over,
            **{k: lane.get(k) for k in ("n", "done", "time_scale", "theoretical_seconds", "drain_seconds",
                                        "drain_ratio", "storm_seconds", "drain_ratio_after_storm", "drained")}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--scenario", default="ai_storm_drain")
    parser.add_argument("--seed", type=int, default=20261006)
    args = parser.parse_args(argv)
    runs = [one_run(args.scenario, args.seed + i) for i in range(args.runs)]
    for run in runs:
        ratio = run["drain_ratio"]
        verdict = "not measured" if ratio is None else ("met" if ratio <= TARGET_RATIO else "NOT met")
        print(f"N={run['n']} drain {run['drain_seconds']} s vs theoretical {run['theoretical_seconds']} s "
              f"(TIME_SCALE {run['time_scale']}): ratio {ratio} -> target <= {TARGET_RATIO} {verdict}; "
              f"after the storm's Retry-After pauses ({run['storm_seconds']} s): ratio {run['drain_ratio_after_storm']}; "
              f"calls over the limit: {run['over_limit']}; verdict {run['valid']}")
    out = bench_dir() / "ai_drain.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"when": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                               "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                               "target_ratio": TARGET_RATIO, "runs": runs}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
