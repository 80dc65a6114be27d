"""`make demo` / `proctor demo`: the main job in one command.

Starts the embedded stack, drives a short exam (students sign in, start, answer,
finish, wait for merit cards) while workers are killed on a seeded schedule, then
prints merit-card latency in case time and real time, the ledger counts, the
checkers' verdict and the report folder — and stops everything.
"""

from __future__ import annotations

import json
import sys
import time

from chaos.analyze import EXIT_UNKNOWN
from chaos.cli.run import print_verdict, say_interrupted
from chaos.interrupt import Interrupted, signals_interrupt
from stack.cli_args import CliParser, positive_float

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    from chaos.runner import new_run_dir, run_scenario
    from chaos.scenarios import get_scenario

    parser = CliParser(prog="proctor demo", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=20261006, help="fault schedule and workload seed")
    parser.add_argument("--time-scale", type=positive_float, default=None,
                        help="real seconds per case second (default the stack's 0.01)")
    args = parser.parse_args(argv)
    run_dir = new_run_dir(f"demo-seed{args.seed}")
    started = time.monotonic()

    def progress(message: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {message}", flush=True)

    try:
        with signals_interrupt():
            result = run_scenario(get_scenario("demo"), args.seed, time_scale=args.time_scale, run_dir=run_dir,
                                  progress=progress)
    except Interrupted as stop:
        return say_interrupted("proctor demo", f"the demo (seed {args.seed})", stop, started, run_dir)
    except Exception as exc:  # noqa: BLE001 - a harness error is "unknown" (2) like `proctor run`, never 1 or 0
        print(f"proctor demo: harness error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_UNKNOWN
    meta = json.loads((result.run_dir / "scenario.json").read_text())
    scale = meta["time_scale"]
    print()
    print(f"TIME_SCALE={scale}: 1 case second runs in {scale} real seconds")
    for key in ("merit_card_latency_p50", "merit_card_latency_max"):
        real = result.workload.get(key)
        if real is not None:
            print(f"{key}: {real:.3f}s real = {real / scale:.1f}s case time")
    print(f"ledger counts: {meta.get('ledger_counts')}")
    print_verdict(result)
    print(f"total wall time: {time.monotonic() - started:.1f}s")
    return result.exit_code
