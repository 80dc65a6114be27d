"""`proctor sweep`: every chaos scenario over N seeds, optionally on a loaded machine.

One seed passing proves little: a fault schedule that happens to miss the window, or a
stack that is only correct when the CPU is idle, passes too. The sweep runs each
scenario for seeds S, S+1, ... S+N-1 (with ``--stress K``, while K cores spin), prints
one line per run and a verdict table, and writes it under results/sweep/<UTC stamp>/
as table.md, table.json and junit.xml, with each run's folder in runs/.

Exit codes follow `proctor run`: 0 every run met its expectation, 1 a verdict
contradicted one (a positive scenario invalid, a negative control not caught),
2 otherwise (unknown, a harness error, or runs missing).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from chaos.analyze import EXIT_UNKNOWN
from stack.cli_args import CliParser
from chaos.load.stress import CpuHog
from chaos.sweep.table import RunOutcome, SweepTable
from stack.paths import new_run_dir, results_dir, update_latest_link

__all__ = ["DEFAULT_FIRST_SEED", "EXCLUDED_BY_DEFAULT", "SWEEP_ROOT", "main", "run_sweep", "sweep_seeds"]

SWEEP_ROOT = Path("results/sweep")
DEFAULT_FIRST_SEED = 20261006  # the chaos suite's default seed (chaos_seed ini)
EXCLUDED_BY_DEFAULT = frozenset({"demo"})  # `make demo`'s shortened worker_kill; ask for it by name

RunOne = Callable[[Any, int, Path], Any]
"""(scenario, seed, run_dir) -> a chaos.runner.RunResult; injectable so tests need no stack."""

Say = Callable[[str], None]


def sweep_seeds(first_seed: int, count: int) -> list[int]:
    return list(range(first_seed, first_seed + count))


def run_sweep(scenarios: Sequence[Any], seeds: Sequence[int], out_dir: Path, run_one: RunOne,
              say: Say = print, stress: int = 0) -> SweepTable:
    """Run every scenario for every seed; rewrite the table after each run (so a killed
    sweep still leaves what it saw). A harness error is recorded, and the sweep goes on."""
    table = SweepTable([(s.name, s.expect_valid) for s in scenarios], list(seeds), [], stress, out_dir.name)
    table.write(out_dir)
    total = table.expected_runs
    for index, (scenario, seed) in enumerate(((s, seed) for s in scenarios for seed in seeds), start=1):
        tag = f"[{index:>{len(str(total))}}/{total}] {scenario.name} seed {seed}"
        say(f"{tag}: running")
        outcome = _run_and_time(scenario, seed, out_dir / "runs" / f"{scenario.name}-seed{seed}", run_one)
        table.outcomes.append(outcome)
        table.write(out_dir)
        detail = f" ({outcome.error})" if outcome.error else ""
        say(f"{tag}: {outcome.word}{detail} in {outcome.wall_seconds:.1f}s -> {outcome.run_dir}")
    return table


def _run_and_time(scenario: Any, seed: int, run_dir: Path, run_one: RunOne) -> RunOutcome:
    started = time.monotonic()
    try:
        result = run_one(scenario, seed, run_dir)
    except Exception as exc:  # noqa: BLE001 - a harness error is this run's verdict, not the sweep's end
        return RunOutcome(scenario.name, seed, scenario.expect_valid, None, time.monotonic() - started,
                          str(run_dir), None, f"{type(exc).__name__}: {exc}")
    return RunOutcome(scenario.name, seed, scenario.expect_valid, result.valid, time.monotonic() - started,
                      str(result.run_dir), result.reproduce)


def _positive_int(text: str) -> int:
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
    return value


def _parser(names: Sequence[str]) -> argparse.ArgumentParser:
    parser = CliParser(prog="proctor sweep", description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=_positive_int, default=10, metavar="N", help="seeds per scenario (default 10)")
    parser.add_argument("--first-seed", type=_int, default=DEFAULT_FIRST_SEED, metavar="S",
                        help=f"seeds are S, S+1, ... (default {DEFAULT_FIRST_SEED})")
    parser.add_argument("--stress", type=_non_negative_int, default=0, metavar="K",
                        help="keep K cores busy with a CPU hog for the whole sweep (default 0)")
    parser.add_argument("--scenario", action="append", choices=names, metavar="NAME", dest="scenarios",
                        help="repeatable; default every scenario but " + ", ".join(sorted(EXCLUDED_BY_DEFAULT))
                             + ". One of: " + ", ".join(names))
    parser.add_argument("--time-scale", type=_positive_float, default=None, help="real seconds per case second")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"results root (default $PROCTOR_RESULTS_DIR/sweep, else {SWEEP_ROOT})")
    parser.add_argument("--target", choices=("embedded", "compose"), default="embedded",
                        help="the deployment, as for `proctor run` (default embedded)")
    parser.add_argument("-v", "--verbose", action="store_true", help="also print each run's own progress")
    return parser


def _parse(argv: Sequence[str] | None, catalogue: dict[str, Any]) -> argparse.Namespace:
    parser = _parser(sorted(catalogue))
    args = parser.parse_args(argv)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if args.stress > cores:
        parser.error(f"argument --stress: {args.stress} cores asked, this machine has {cores}")
    chosen = args.scenarios or [n for n in catalogue if n not in EXCLUDED_BY_DEFAULT]
    args.scenarios = [catalogue[n] for n in dict.fromkeys(chosen)]  # keep order, drop repeats
    _refuse_unsupported(parser, args)
    return args


def _refuse_unsupported(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """A scenario the target cannot run is named before anything starts (as `proctor run` does)."""
    from chaos.deployment.targets import unsupported_on

    reasons = [f"{s.name}: {reason}" for s in args.scenarios if (reason := unsupported_on(args.target, s))]
    if reasons:
        parser.error(f"argument --target: {args.target} cannot run " + "; ".join(reasons))


def _stamp_dir(root: Path) -> Path:
    out = new_run_dir("sweep", root)
    out.mkdir(parents=True, exist_ok=False)
    update_latest_link(out, root)
    return out


class _Interrupted(KeyboardInterrupt):
    """SIGTERM (a cancelled CI job) unwinds like Ctrl-C, so stacks and the hog are stopped."""


def _interrupted_code(exc: KeyboardInterrupt) -> int:
    """128 + the signal, as the shell reports it: 143 for SIGTERM, 130 for Ctrl-C."""
    return 128 + signal.SIGTERM if isinstance(exc, _Interrupted) else 130


def _raise_interrupted(signum: int, _frame: Any) -> None:
    raise _Interrupted(f"signal {signum}")


@contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    previous = signal.signal(signal.SIGTERM, _raise_interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: Sequence[str] | None = None) -> int:
    from chaos.scenarios import SCENARIOS

    args = _parse(argv, SCENARIOS)
    try:
        return _sweep(args)
    except KeyboardInterrupt as exc:
        return _interrupted_code(exc)
    except Exception as exc:  # noqa: BLE001 - a crashed sweep is "could not tell" (2), never "invalid" (1)
        print(f"proctor sweep: harness error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_UNKNOWN


def _sweep(args: argparse.Namespace) -> int:
    from chaos.runner import run_scenario

    seeds = sweep_seeds(args.first_seed, args.seeds)
    out_dir = _stamp_dir(args.out if args.out is not None else results_dir() / "sweep")  # as every run folder
    started = time.monotonic()

    def say(message: str) -> None:
        print(f"[{time.monotonic() - started:7.1f}s] {message}", flush=True)

    def run_one(scenario: Any, seed: int, run_dir: Path) -> Any:
        progress = (lambda m: say(f"    {scenario.name}: {m}")) if args.verbose else (lambda _m: None)
        return run_scenario(scenario, seed, time_scale=args.time_scale, run_dir=run_dir, progress=progress,
                            target=args.target)

    say(f"sweep: {len(args.scenarios)} scenarios x seeds {seeds[0]}..{seeds[-1]}, stress {args.stress} "
        f"core(s), target {args.target} -> {out_dir}")
    try:
        with _sigterm_unwinds(), CpuHog(args.stress) as hog:
            if hog.pids:
                say(f"CPU hog: pids {hog.pids}")
            table = run_sweep(args.scenarios, seeds, out_dir, run_one, say, args.stress)
    except KeyboardInterrupt as exc:
        print(f"\nproctor sweep: interrupted; what ran is in {out_dir}", file=sys.stderr)
        return _interrupted_code(exc)
    print()
    print(table.markdown())
    print(f"written: {out_dir}/table.md, table.json, junit.xml")
    return table.exit_code()
