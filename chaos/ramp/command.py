"""After a Locust ramp (loadtests/exam_ramp.py): final read, invariants, gate and report.

``python -m chaos.ramp finalize RUN_DIR`` runs outside gevent, as a subprocess of the
Locust master when it quits. It waits for the outbox to settle, reads the ledgers
through the admin exports (chaos/snapshot.py), merges the per-process histories,
writes ``scenario.json`` so that ``proctor check RUN_DIR`` works on the folder, runs
the checkers, computes the load gate and the error split, and writes ``ramp.md`` /
``ramp.json`` / ``ramp.png``.

Exit codes (the ramp's, hence Locust's): 0 every gate held; 1 an invariant was
violated; 2 unknown (the history or a ledger could not be read, a harness error);
3 the invariants held but a load criterion (p99, failure ratio, achieved rate) did not.

``proctor ramp [--steps ...] [-- LOCUST ARGS]`` runs Locust itself as a subprocess
(the harness never imports Locust) and returns its exit code.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

from chaos.analyze import EXIT_INVALID, EXIT_UNKNOWN, EXIT_VALID, analyze, exit_code
from chaos.deployment.final_read import final_read, provider_urls
from chaos.history import read_history
from chaos.interrupt import read_marker
from chaos.ramp.gate import (completions, error_split, gate, is_open, latency_quantiles, read_ticks, step_rates,
                             time_series)
from chaos.ramp.generator import generator_gate, generator_steps, read_generators
from chaos.ramp.merge import merge_histories
from chaos.ramp.report import write_ramp_report
from chaos.settle import SettleTerms
from stack.cli_args import CliParser, csv_positive_floats, fraction, positive_float, positive_int

__all__ = ["EXIT_LOAD_GATE", "finalize", "haproxy_counters", "locust_argv", "main", "ramp_main", "reproduce_command",
           "verdict_code"]

EXIT_LOAD_GATE = 3
LOCUSTFILE = Path(__file__).resolve().parents[2] / "loadtests" / "exam_ramp.py"  # chaos/ramp/command.py -> repo
_HAPROXY_FIELDS = ("hrsp_5xx", "econ", "eresp", "ereq", "dreq", "wretr", "wredis", "qmax", "cli_abrt", "srv_abrt",
                   "connect", "reuse")  # connections opened to a server vs requests on a reused one


def _settings(config: dict[str, Any]) -> dict[str, str]:
    """The stack's settings (with its admin token) from its 0600 manifest; {} for an external stack."""
    stack_dir = config["targets"].get("stack_dir")
    if not stack_dir:
        return {}
    manifest = json.loads((Path(stack_dir) / "manifest.json").read_text())
    return dict(manifest.get("settings") or {})


def haproxy_counters(socket_path: str) -> dict[str, Any]:
    """HAProxy's own counters from ``show stat``: the frontend, the backend and each server."""
    if not socket_path:
        return {"note": "no HAProxy stats socket given"}
    from stack.embedded.haproxy import runtime_command

    try:
        lines = runtime_command(socket_path, "show stat").splitlines()
    except Exception as exc:  # noqa: BLE001 - the stack may be gone; the report says so
        return {"note": f"show stat failed: {exc}"}
    header = lines[0].lstrip("# ").split(",") if lines else []
    rows = [dict(zip(header, line.split(","))) for line in lines[1:] if line]
    out = {f"{r['pxname']}/{r['svname']}": {k: int(r[k]) for k in _HAPROXY_FIELDS if r.get(k, "").isdigit()}
           for r in rows if r.get("pxname") in ("api", "web")}
    frontend = out.get("api/FRONTEND", {}).get("hrsp_5xx", 0)
    servers = sum(v.get("hrsp_5xx", 0) for k, v in out.items() if k.startswith("web/") and k != "web/BACKEND")
    out["load_balancer_own_5xx"] = max(0, frontend - servers)  # answered by HAProxy itself, not passed on
    return out


def _final_read(run_dir: Path, config: dict[str, Any], settings: dict[str, str], token: str,
                notes: list[str]) -> dict[str, Any]:
    """The runner's final read (chaos.deployment.final_read), on the deployment's URLs from the config;
    the settle wait is derived from the run (chaos/settle.py) unless --ramp-quiet-timeout gave one."""
    targets = config["targets"]
    explicit = config.get("quiet_timeout")
    read = final_read(targets["admin"], provider_urls(targets), token, run_dir, SettleTerms.from_environment(settings),
                      quiet_timeout=None if explicit is None else float(explicit))
    notes.append(read.summary())
    return read.settle


def reproduce_command(argv: Sequence[str]) -> str:
    """The Locust command line the run was started with: its own argv names the locustfile (``-f``)."""
    return "locust " + shlex.join(argv) if argv else "locust -f loadtests/exam_ramp.py"


def _write_scenario(run_dir: Path, config: dict[str, Any], settings: dict[str, str],
                    settle: dict[str, Any] | None = None) -> None:
    scenario = {"name": "ramp", "description": "Locust ramp (loadtests/exam_ramp.py)", "seed": config["seed"],
                "time_scale": float(settings.get("TIME_SCALE", 0.01)),
                "settings": {k: v for k, v in settings.items() if "TOKEN" not in k and "SECRET" not in k
                             and "KEY" not in k},
                "options": {"expect_ops": ["session", "start", "answer", "finish"]},
                "workload": {k: config[k] for k in ("plan", "exam_code", "questions", "polls", "max_tries")},
                "faults": [], "settle_wait": settle, "reproduce": reproduce_command(config.get("argv", []))}
    (run_dir / "scenario.json").write_text(json.dumps(scenario, indent=2))


def _machine() -> str:
    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",)
    return f"{os.cpu_count()} cores, load average {load[0]:.2f} at the end, {platform.python_implementation()}"


def verdict_code(invariants_valid: Any, history_problems: Sequence[str], criteria: Sequence[dict[str, Any]],
                 generator_kept_up: bool = True) -> int:
    """Invariants first (a lost answer matters more than a slow one), then whether the generator
    offered the plan's load (if not, no load criterion can be judged: unknown), then the load gate."""
    verdict = exit_code(invariants_valid) if not history_problems else EXIT_UNKNOWN
    if verdict != EXIT_VALID:
        return verdict
    if not generator_kept_up:
        return EXIT_UNKNOWN
    return EXIT_VALID if all(g["passed"] for g in criteria) else EXIT_LOAD_GATE


def finalize(run_dir: Path) -> int:
    run_dir = Path(run_dir)
    config = json.loads((run_dir / "ramp_config.json").read_text())
    settings = _settings(config)
    token = settings.get("PROCTOR_ADMIN_TOKEN") or os.environ.get("PROCTOR_ADMIN_TOKEN", "")
    notes: list[str] = []
    merged = merge_histories(run_dir)
    notes += merged.problems
    settle = _final_read(run_dir, config, settings, token, notes)
    _write_scenario(run_dir, config, settings, settle)
    invariants = analyze(run_dir)
    done = completions(read_history(run_dir / "history.jsonl").ops)
    ticks = read_ticks(run_dir)
    steps = step_rates(config, ticks, done)
    criteria = gate(config, steps, done)
    summaries, generator_problems = read_generators(run_dir)
    notes += generator_problems
    generator = generator_steps(summaries, len(config["plan"]["schedule"]))
    kept_up = generator_gate(config, generator)
    if not kept_up["passed"]:
        notes.append("the generator, not the stack, was short: " + kept_up["derivation"])
    code = verdict_code(invariants["valid"], merged.problems, criteria, kept_up["passed"])
    cut = read_marker(run_dir)
    if cut is not None:  # a cut ramp neither passed nor failed its gate: it did not finish
        code = interrupted_code(cut)
    stack_dir = config["targets"].get("stack_dir")
    report = {"run_dir": str(run_dir), "exit_code": code, "verdict": _word(code, cut), "machine": _machine(),
              "interrupted": cut,
              "invariants": {"valid": invariants["valid"], "checkers": {n: c["valid"] for n, c in
                                                                         invariants["checkers"].items()}},
              "gate": criteria, "steps": steps, "generator": {"kept_up": kept_up, "steps": generator,
                                                               "processes": len(summaries)},
              "arrivals": config.get("arrivals", {"mode": "closed"}),
              "latency": latency_quantiles(done), "errors": error_split(done),
              "latency_corrected": latency_quantiles(done, corrected=True) if is_open(config) else None,
              "requests": len(done), "history_files": merged.files,
              "haproxy": haproxy_counters(config["targets"].get("haproxy_socket", "")),
              "valkey": _valkey_counters(stack_dir), "stack_processes": _stack_identities(stack_dir), "notes": notes,
              "settle_wait": settle}
    write_ramp_report(run_dir, report, time_series(ticks, done))
    print(f"chaos.ramp: {run_dir}/ramp.json written; the verdict follows Locust's tables", flush=True)
    return code


def _stack_identities(stack_dir: str | None) -> list[list[int]]:
    """(pid, start ticks) of every stack process while it runs: proof, later, that none outlived the ramp."""
    if not stack_dir:
        return []
    manifest = json.loads((Path(stack_dir) / "manifest.json").read_text())
    idents = {(manifest["supervisor_pid"], manifest["supervisor_start_ticks"])}
    for entry in manifest.get("components", {}).values():
        idents.update(tuple(pair) for pair in entry.get("tree", []))
        if entry.get("pid"):
            idents.add((entry["pid"], entry["start_ticks"]))
    return sorted([int(pid), int(ticks)] for pid, ticks in idents if pid and ticks)


def _valkey_counters(stack_dir: str | None) -> dict[str, Any]:
    if not stack_dir:
        return {}
    from chaos.observe.valkey_stats import read_process_counters

    return read_process_counters(Path(stack_dir))


def interrupted_code(marker: dict[str, Any]) -> int:
    """128 + the signal that cut the ramp (130 SIGINT, 143 SIGTERM); unknown (2) for a stop without one."""
    import signal

    name = str(marker.get("signal", ""))
    return 128 + signal.Signals[name].value if name in ("SIGINT", "SIGTERM") else EXIT_UNKNOWN


def _word(code: int, cut: dict[str, Any] | None = None) -> str:
    if cut is not None:
        return f"INTERRUPTED by {cut.get('signal')} during the {cut.get('phase')} (not judged)"
    return {EXIT_VALID: "PASS", EXIT_INVALID: "INVALID (an invariant was violated)",
            EXIT_UNKNOWN: "UNKNOWN (could not judge)", EXIT_LOAD_GATE: "LOAD GATE FAILED"}[code]


def print_summary(run_dir: Path) -> int:
    """``python -m chaos.ramp summary RUN_DIR``: the verdict from ramp.json, printed last."""
    report = json.loads((Path(run_dir) / "ramp.json").read_text())
    _print_summary(report)
    return int(report["exit_code"])


def _seconds(value: Any) -> str:
    return "-" if value is None else f"{value:.3f}s"


def _print_summary(report: dict[str, Any]) -> None:
    print(f"ramp: {report['verdict']} (exit {report['exit_code']}); invariants valid={report['invariants']['valid']}; "
          f"arrivals {report['arrivals']['mode']}")
    for g in report["gate"]:
        print(f"  {g['name']:<20} limit={g['limit']} measured={g['measured']} {'ok' if g['passed'] else 'FAILED'}")
    kept_up = report["generator"]["kept_up"]
    if kept_up["applies"]:
        print(f"  generator_kept_up    {'ok' if kept_up['passed'] else 'NO: the generator was short'}: "
              f"{kept_up['derivation']}")
    generator = {row["step"]: row for row in report["generator"]["steps"]}
    for s in report["steps"]:
        g = generator.get(s["step"], {})
        print(f"  step {s['step']}: target {s['target']:g} req/s, offered {s.get('offered', s['target']):.1f}, "
              f"achieved {s['achieved']:.1f} ({s['ratio']:.2f} of offered); "
              f"p99 corrected {_seconds(s.get('p99_corrected'))}, service {_seconds(s.get('p99_service'))}; "
              f"generator: sent {g.get('sent', '-')}/{g.get('scheduled', '-')} scheduled, delayed "
              f"{g.get('delayed', '-')}, dropped {g.get('dropped', '-')}, {g.get('cpu_ms_per_request')} ms CPU/request, "
              f"busy {g.get('busy_share')}")
    print(f"  errors by layer: {report['errors']['layers']}")
    print(f"report: {report['run_dir']}/ramp.md")


# ------------------------------------------------------------------ proctor ramp
def _ramp_parser() -> argparse.ArgumentParser:
    p = CliParser(prog="proctor ramp", description="Run the Locust ramp headless, then gate it. "
                                "Arguments after `--` go to Locust unchanged.")
    p.add_argument("--steps", type=csv_positive_floats, default=None,
                   help="offered req/s per step, e.g. 25,50,100,200,300,400,500 (docs/ramp.md)")
    p.add_argument("--step-seconds", type=positive_float, default=None, help="seconds each step lasts")
    p.add_argument("--per-user-rate", type=positive_float, default=None,
                   help="req/s one simulated student offers (users = step rate / this)")
    p.add_argument("--p99", type=positive_float, default=None, help="gate: p99 latency (seconds)")
    p.add_argument("--max-failure-ratio", type=fraction, default=None,
                   help="gate: failed requests / requests, from 0 to 1")
    p.add_argument("--min-rate-ratio", type=fraction, default=None,
                   help="gate: achieved / offered rate each step must reach, from 0 to 1")
    p.add_argument("--questions", type=positive_int, default=None, help="questions per exam")
    p.add_argument("--run-dir", default=None, help="the ramp's run folder (default a new one under results/runs)")
    p.add_argument("--processes", type=positive_int, default=None, help="Locust worker processes (distributed mode)")
    p.add_argument("--arrivals", choices=("open", "closed"), default=None,
                   help="open (default): scheduled starts, corrected latency; closed: Locust's users")
    p.add_argument("--max-in-flight", type=positive_int, default=None, help="open model: in-flight slots")
    p.add_argument("--max-send-lag", type=positive_float, default=None, help="open model: delayed past this (seconds)")
    return p


def locust_argv(args: argparse.Namespace, extra: Sequence[str]) -> list[str]:
    argv = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--only-summary"]
    for flag, value in (("--ramp-steps", args.steps), ("--ramp-step-seconds", args.step_seconds),
                        ("--ramp-per-user-rate", args.per_user_rate), ("--ramp-p99", args.p99),
                        ("--ramp-max-failure-ratio", args.max_failure_ratio),
                        ("--ramp-min-rate-ratio", args.min_rate_ratio), ("--ramp-questions", args.questions),
                        ("--ramp-run-dir", args.run_dir), ("--ramp-arrivals", args.arrivals),
                        ("--ramp-max-in-flight", args.max_in_flight), ("--ramp-max-send-lag", args.max_send_lag)):
        if value is not None:
            argv += [flag, str(value)]
    if args.processes:
        argv += ["--processes", str(args.processes), "--master-bind-host", "127.0.0.1"]
    return argv + list(extra)


def ramp_main(argv: Sequence[str] | None = None) -> int:
    """``proctor ramp``: Locust in its own process (gevent never enters ours); its exit code is ours.

    Ctrl-C reaches Locust from the terminal (same process group); a SIGTERM sent to this process
    is passed on. Either way Locust judges what ran (the run is marked interrupted) and stops the
    stack, and this command exits 130 / 143 (docs/cli.md)."""
    import signal

    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    args = _ramp_parser().parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    command = locust_argv(args, extra)
    print("proctor ramp:", " ".join(command[1:]), flush=True)
    child = subprocess.Popen(command, cwd=LOCUSTFILE.parents[1])
    received: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        received.append(signum)
        if signum == signal.SIGTERM:
            child.send_signal(signal.SIGTERM)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 128 + received[0] if received else code


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 2 or argv[0] not in ("finalize", "summary"):
        print("usage: python -m chaos.ramp finalize|summary RUN_DIR", file=sys.stderr)
        return EXIT_UNKNOWN
    try:
        return finalize(Path(argv[1])) if argv[0] == "finalize" else print_summary(Path(argv[1]))
    except Exception as exc:  # noqa: BLE001 - a harness error is unknown, never a pass
        print(f"chaos.ramp: harness error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_UNKNOWN


if __name__ == "__main__":
    sys.exit(main())
