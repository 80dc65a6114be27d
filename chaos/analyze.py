"""Offline analysis of one run folder, and the ``proctor check RUN_DIR`` command.

Reads ``scenario.json``, ``history.jsonl`` and ``ledgers/``; runs every checker
with the scenario's options; writes ``report.json``, ``report.md`` and the PNG
plots into the run folder. Needs no running stack, so any stored run can be
re-checked (and a checker fix re-applied to old runs).

Exit codes follow Jepsen: 0 valid, 1 an invariant was violated, 2 unknown (a
ledger or the history could not be read, a checker crashed, a bad scenario file).
Unknown must fail CI just like invalid: "could not tell" is not a pass.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Sequence

from chaos.plots.ai_lane import plot_ai_lane
from chaos.bounds import apply_bounds, derive_bounds, underivable_notes
from chaos.checkers import run_checkers
from chaos.checkers import CheckOptions
from chaos.checkers.ailane import declared_time_scale
from chaos.checkers.base import UNKNOWN, OptionsError, Result, compose
from chaos.checkers.isolation import isolation_from_run
from chaos.interrupt import MARKER, read_marker
from chaos.observe.processes import process_lifetimes
from chaos.history import HistoryFile, HistoryFormatError, Op, fault_windows, read_history
from chaos.ledgers import Ledgers, load_ledgers
from chaos.plots.run import plot_run
from chaos.report import REPORT_MD, build_report, verdict_word, write_report
from chaos.wellformed import first_malformed

__all__ = [
    "EXIT_INVALID",
    "EXIT_UNKNOWN",
    "EXIT_VALID",
    "NotARunFolder",
    "HISTORY_FILE",
    "SCENARIO_FILE",
    "ScenarioError",
    "analyze",
    "check_command",
    "check_main",
    "exit_code",
    "load_scenario",
    "require_run_folder",
]

SCENARIO_FILE = "scenario.json"
HISTORY_FILE = "history.jsonl"
EXIT_VALID, EXIT_INVALID, EXIT_UNKNOWN = 0, 1, 2


class ScenarioError(ValueError):
    """scenario.json is unreadable or holds an unusable value."""


class NotARunFolder(ValueError):
    """The folder holds no run: nothing is written into it."""


def require_run_folder(run_dir: Path) -> None:
    """A run folder has what the runner writes first (scenario.json, history.jsonl) or the
    interrupted marker; anything else (``results/``, a temporary folder) is refused untouched."""
    if not run_dir.is_dir():
        raise NotARunFolder(f"{run_dir} does not exist")
    if not any((run_dir / name).exists() for name in (SCENARIO_FILE, HISTORY_FILE, MARKER)):
        raise NotARunFolder(f"{run_dir} is not a run folder (no {SCENARIO_FILE} or {HISTORY_FILE}); "
                            f"nothing was written")


def load_scenario(run_dir: Path) -> tuple[dict[str, Any], list[str]]:
    """The scenario document and notes; a missing file means defaults (noted in the report)."""
    path = run_dir / SCENARIO_FILE
    if not path.is_file():
        return {}, [f"{SCENARIO_FILE} not found: default options used"]
    try:
        scenario = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ScenarioError(f"{path}: {exc}") from None
    if not isinstance(scenario, dict):
        raise ScenarioError(f"{path}: expected a JSON object")
    return scenario, []


_ASSUMED_TIME_SCALE = 0.01
"""stack.config.DEFAULT_TIME_SCALE, for a scenario.json without one; not imported, so an offline check
loads no stack code (tests/unit/test_checker_options.py keeps the two equal)."""


def _time_scale(scenario: dict[str, Any], notes: list[str]) -> float:
    try:
        scale = declared_time_scale(scenario)
    except OptionsError as exc:
        raise ScenarioError(str(exc)) from None
    if scale is None:
        notes.append(f"no time_scale in {SCENARIO_FILE}: assumed {_ASSUMED_TIME_SCALE}")
        return _ASSUMED_TIME_SCALE
    return scale


def _load_history(run_dir: Path) -> tuple[HistoryFile | None, str | None]:
    try:
        return read_history(run_dir / HISTORY_FILE), None
    except (OSError, HistoryFormatError) as exc:
        return None, f"history could not be read: {type(exc).__name__}: {exc}"


def _malformed(read: HistoryFile | None) -> str | None:
    """The first rule the history breaks, in file order (chaos/wellformed.py); None when well-formed.

    A history whose ops cannot have happened as written is not evidence: it is not judged at
    all (a checker's "invalid" over it would be as unfounded as its "valid")."""
    malformed = first_malformed(read.file_order) if read is not None else None
    return f"{HISTORY_FILE} {malformed.describe()}" if malformed is not None else None


def _history_problems(read: HistoryFile | None, problem: str | None) -> list[str]:
    """Why the history cannot be judged whole; [] when it can."""
    if read is None:
        return [problem or "history missing"]
    malformed = _malformed(read)
    if malformed is not None:
        return [malformed]
    if read.torn is not None:
        return [f"{HISTORY_FILE} {read.torn.describe()}"]
    if not read.ops:
        return [f"{HISTORY_FILE} is empty: nothing was recorded, so nothing can be judged"]
    return []


def _verdict(read: HistoryFile | None, problems: list[str], run_dir: Path, ledgers: Ledgers, options: CheckOptions,
             scenario: dict[str, Any]) -> Result:
    if read is None or not read.ops or _malformed(read) is not None:
        # Without (well-formed) ops nothing can be judged: an empty history would look vacuous or
        # make every ledger row "unexpected", both wrong claims about the stack.
        return compose([Result.unknown("history", problems)])
    checked = run_checkers(read.ops, ledgers, options)
    if "lane_isolation" in scenario:  # asked for by the scenario (chaos/checkers/isolation.py)
        checked = compose([*checked.checks.values(), isolation_from_run(run_dir, scenario["lane_isolation"])])
    if problems:  # a torn history or an underivable bound: judge what is there, never call it valid
        checked = compose([Result.unknown("history", problems), *checked.checks.values()])
    return checked


def _cut_short(result: Result, marker: dict[str, Any]) -> Result:
    """An interrupted run's history is not a whole run: whatever its checkers found, the verdict is
    unknown (a fault cut before injection is no violation, a lost answer cannot be told from one
    still in flight). The checkers' own results stay in the report as evidence."""
    note = (f"the run was interrupted by {marker.get('signal', 'a signal')} during "
            f"{marker.get('phase', 'an unknown phase')}: its history is not a whole run")
    composed = compose([Result.unknown("interrupted", [note]), *result.checks.values()])
    composed.valid = UNKNOWN
    return composed


def analyze(run_dir: Path, *, plots: bool = True) -> dict[str, Any]:
    """Check one run folder and write its report; returns the report (``report["valid"]``).

    Raises ScenarioError / OptionsError for a bad scenario.json and FileNotFoundError
    for a missing folder; an unreadable history or ledger becomes an unknown verdict.
    """
    run_dir = Path(run_dir)
    require_run_folder(run_dir)
    scenario, notes = load_scenario(run_dir)
    time_scale = _time_scale(scenario, notes)
    read, problem = _load_history(run_dir)
    history = read.ops if read is not None else None
    ledgers = load_ledgers(run_dir)  # once: the bounds, the checkers and the plots read the same tables
    # Bounds that follow from the fault schedule are derived from what this run measured.
    bounds = derive_bounds(scenario, history or [], ledgers.outbox, process_lifetimes(run_dir))
    options = CheckOptions.from_scenario({**scenario, "options": apply_bounds(scenario.get("options"), bounds)})
    result = _verdict(read, _history_problems(read, problem) + underivable_notes(bounds), run_dir, ledgers, options,
                      scenario)
    interrupted = read_marker(run_dir)
    if interrupted is not None:
        result = _cut_short(result, interrupted)
    plot_names = _plots(history or [], run_dir, ledgers, notes, time_scale, scenario.get("history_origin")) if plots else []
    report = build_report(scenario, result, options, time_scale, plot_names, notes)
    report["faults"] = _fault_rows(history or [])
    report["failovers"] = failover_timelines(history or [])
    report["bounds"] = bounds
    report["interrupted"] = interrupted
    report["plots_drawn"] = plots
    write_report(run_dir, report)
    return report


def failover_timelines(history: Sequence[Op]) -> list[dict[str, Any]]:
    """What each Valkey failover's fault-end measured (chaos/nemesis/failover.py), for the report."""
    return [dict(op.value) for op in history
            if op.f == "fault-end" and isinstance(op.value, dict) and op.value.get("kind") in ("failover", "partition")]


def _fault_rows(history: Sequence[Op]) -> list[dict[str, Any]]:
    """Each fault window with what the nemesis logged when it started (pids, mid_job, toxic)."""
    starts = {op.value.get("fault_id"): op.value for op in history
              if op.f == "fault-start" and isinstance(op.value, dict)}
    skip = {"fault_id", "kind", "target", "at", "duration"}
    return [{"fault_id": w.fault_id, "kind": w.kind, "target": w.target, "start": w.start, "end": w.end,
             "detail": {k: v for k, v in starts.get(w.fault_id, {}).items() if k not in skip}}
            for w in fault_windows(history)]


def _plots(history: Sequence[Op], run_dir: Path, ledgers: Ledgers, notes: list[str], time_scale: float,
           origin: Any = None) -> list[str]:
    """Plots are evidence, not verdict: a plotting failure is noted, never fatal."""
    try:
        origin = float(origin) if isinstance(origin, (int, float)) else None
        ai_lane = plot_ai_lane(ledgers, time_scale, run_dir, origin)  # only when the run made AI calls
        owed = None if ledgers.outbox is None else sum(row.status == "pending" for row in ledgers.outbox)
        return [path.name for path in plot_run(history, run_dir, owed)] + ([ai_lane.name] if ai_lane else [])
    except Exception as exc:  # noqa: BLE001 - keep the verdict even if matplotlib breaks
        notes.append(f"plots failed: {type(exc).__name__}: {exc}")
        return []


def exit_code(valid: Any) -> int:
    if valid is True:
        return EXIT_VALID
    if valid is False:
        return EXIT_INVALID
    return EXIT_UNKNOWN


def check_command(run_dir: str | Path, *, plots: bool = True) -> int:
    """`proctor check RUN_DIR`: analyze, print a short verdict, return 0 / 1 / 2."""
    try:
        report = analyze(Path(run_dir), plots=plots)
    except NotARunFolder as exc:
        print(f"proctor check: {exc}", file=sys.stderr)
        return EXIT_UNKNOWN
    except Exception as exc:  # noqa: BLE001 - any harness error must exit 2, not pass
        print(f"proctor check: {run_dir}: harness error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_UNKNOWN
    print(_summary_line(report, Path(run_dir)))
    return exit_code(report["valid"])


def _summary_line(report: dict[str, Any], run_dir: Path) -> str:
    problems = []
    for name, check in report["checkers"].items():
        if check["valid"] is False:
            bad = [f"{k}={check['counts'][k]}" for k in check.get("violations", [])]
            problems.append(f"{name} ({', '.join(bad)})" if bad else name)
        elif check["valid"] == UNKNOWN:
            problems.append(f"{name} (unknown: {'; '.join(check['notes'][:1])})")
    detail = f": {'; '.join(problems)}" if problems else ""
    return f"{verdict_word(report['valid'])}{detail}\nreport: {run_dir / REPORT_MD}"


def check_main(argv: Sequence[str] | None = None) -> int:
    """Entry point for chaos.cli: ``proctor check RUN_DIR [--no-plots]``."""
    from stack.cli_args import CliParser  # here, not at import: an offline check loads no more stack code

    parser = CliParser(prog="proctor check", description="Re-run the checkers offline on a stored run folder.")
    parser.add_argument("run_dir", type=Path, help="a run folder, e.g. results/runs/latest")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    args = parser.parse_args(list(argv) if argv is not None else None)
    return check_command(args.run_dir, plots=not args.no_plots)
