"""`proctor run SCENARIO [--seed N] [--time-scale X]`: a scenario outside pytest.

Prints progress as it goes and the verdict at the end. Exit codes follow Jepsen:
0 valid, 1 an invariant violated, 2 unknown or a harness error.
"""

from __future__ import annotations

import argparse
import sys
import time

__all__ = ["main", "print_verdict"]


def _parser() -> argparse.ArgumentParser:
    from chaos.scenarios import SCENARIOS

    parser = argparse.ArgumentParser(prog="proctor run", description=__doc__.splitlines()[0])
    parser.add_argument("scenario", choices=sorted(SCENARIOS), metavar="SCENARIO",
                        help="one of: " + ", ".join(sorted(SCENARIOS)))
    parser.add_argument("--seed", type=int, default=20261006, help="fault schedule and workload seed")
    parser.add_argument("--time-scale", type=float, default=None, help="real seconds per case second")
    parser.add_argument("--keep-stack", action="store_true", help="leave the stack running afterwards")
    parser.add_argument("--target", choices=("embedded", "compose"), default="embedded",
                        help="the deployment: embedded (local processes, default) or compose (docker-compose.yml)")
    return parser


def print_verdict(result) -> None:  # chaos.runner.RunResult
    print()
    print(f"verdict: valid={result.valid}")
    for name, res in result.verdict.get("checkers", {}).items():
        print(f"  {name:<8} valid={res.get('valid')!s:<7} {res.get('counts')}")
    print(f"workload: {result.workload}")
    print(f"recovery after heal: {result.recovery_seconds:.2f}s")
    print(f"report: {result.run_dir / 'report.md'}")
    print(f"reproduce: {result.reproduce}")


def main(argv: list[str] | None = None) -> int:
    from chaos.deployment.targets import unsupported_on
    from chaos.runner import run_scenario
    from chaos.scenarios import get_scenario

    args = _parser().parse_args(argv)
    if args.time_scale is not None and args.time_scale <= 0:
        print("proctor run: --time-scale must be greater than 0", file=sys.stderr)
        return 2
    started = time.monotonic()
    scenario = get_scenario(args.scenario)

    def progress(message: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {message}", flush=True)

    reason = unsupported_on(args.target, scenario)
    if reason:
        print(f"proctor run: {args.scenario} does not run on {args.target}: {reason}", file=sys.stderr)
        return 2
    try:
        result = run_scenario(scenario, args.seed, time_scale=args.time_scale, progress=progress,
                              keep_stack=args.keep_stack, target=args.target)
    except Exception as exc:  # noqa: BLE001 - a harness error is "unknown", never "valid"
        print(f"proctor run: harness error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    print_verdict(result)
    if scenario.expect_valid is False:
        print("(this scenario is a negative control: it is expected to be reported invalid)")
    return result.exit_code
