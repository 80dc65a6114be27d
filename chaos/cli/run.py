"""`proctor run SCENARIO [--seed N] [--time-scale X]`: a scenario outside pytest.

Prints progress as it goes and the verdict at the end. Exit codes follow Jepsen:
0 valid, 1 an invariant violated, 2 unknown or a harness error.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from chaos.interrupt import Interrupted, signals_interrupt
from stack.cli_args import CliParser, positive_float

__all__ = ["main", "print_verdict"]


def _parser() -> argparse.ArgumentParser:
    from chaos.scenarios import SCENARIOS

    parser = CliParser(prog="proctor run", description=__doc__.splitlines()[0])
    parser.add_argument("scenario", choices=sorted(SCENARIOS), metavar="SCENARIO",
                        help="one of: " + ", ".join(sorted(SCENARIOS)))
    parser.add_argument("--seed", type=int, default=20261006, help="fault schedule and workload seed")
    parser.add_argument("--time-scale", type=positive_float, default=None,
                        help="real seconds per case second (default the stack's 0.01)")
    parser.add_argument("--keep-stack", action="store_true", help="leave the stack running afterwards")
    parser.add_argument("--target", choices=("embedded", "compose"), default="embedded",
                        help="the deployment: embedded (local processes, default) or compose (docker-compose.yml)")
    return parser


def print_verdict(result) -> None:  # chaos.runner.RunResult
    print()
    from chaos.report import check_word, headline_counts

    print(f"verdict: valid={result.valid} ({headline_counts(result.verdict.get('summary', {}))})")
    for name, res in result.verdict.get("checkers", {}).items():
        detail = f"n/a: {res['na']}" if res.get("na") else res.get("counts")
        print(f"  {name:<8} {check_word(res):<8} {detail}")
    print(f"workload: {result.workload}")
    print(f"recovery after heal: {result.recovery_seconds:.2f}s")
    print(f"report: {result.run_dir / 'report.md'}")
    print(f"reproduce: {result.reproduce}")


def say_interrupted(prog: str, what: str, stop: Interrupted, started: float, run_dir: Path) -> int:
    """The one line an interrupted run ends with; returns 130 (SIGINT) or 143 (SIGTERM)."""
    from chaos.interrupt import MARKER

    print(f"{prog}: {what} interrupted by {stop.signal_name} after {time.monotonic() - started:.1f}s; "
          f"faults healed, stack stopped; folder {run_dir} (its {MARKER} marker and report.md say so)",
          file=sys.stderr, flush=True)
    return stop.exit_code


def main(argv: list[str] | None = None) -> int:
    from chaos.deployment.targets import unsupported_on
    from chaos.runner import new_run_dir, run_scenario
    from chaos.scenarios import get_scenario

    args = _parser().parse_args(argv)
    started = time.monotonic()
    scenario = get_scenario(args.scenario)

    def progress(message: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {message}", flush=True)

    reason = unsupported_on(args.target, scenario)
    if reason:
        print(f"proctor run: {args.scenario} does not run on {args.target}: {reason}", file=sys.stderr)
        return 2
    run_dir = new_run_dir(f"{args.scenario}-seed{args.seed}")
    try:
        with signals_interrupt():
            result = run_scenario(scenario, args.seed, time_scale=args.time_scale, run_dir=run_dir,
                                  progress=progress, keep_stack=args.keep_stack, target=args.target)
    except Interrupted as stop:
        return say_interrupted("proctor run", f"{args.scenario} (seed {args.seed})", stop, started, run_dir)
    except Exception as exc:  # noqa: BLE001 - a harness error is "unknown", never "valid"
        print(f"proctor run: harness error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    print_verdict(result)
    if scenario.expect_valid is False:
        print("(this scenario is a negative control: it is expected to be reported invalid)")
    return result.exit_code
