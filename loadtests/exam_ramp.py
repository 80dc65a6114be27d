"""The seed's ramp: 25 -> 500 requests/s of exam students, with invariants checked and a gate.

    locust -f loadtests/exam_ramp.py                        # web UI; starts the embedded stack itself
    locust -f loadtests/exam_ramp.py --headless --ramp-steps 25,50,100 --ramp-step-seconds 10
    locust -f loadtests/exam_ramp.py --headless --host http://127.0.0.1:8080 \\
        --ramp-roster roster.json --ramp-admin-url http://127.0.0.1:9001   # any deployment
        # (admin token from $PROCTOR_ADMIN_TOKEN, never on the command line)

Without ``--host`` (and without ``--ramp-stack-dir``) the master starts ``proctor up`` as
a child process and stops it when Locust quits. Stack and harness code never run in this
process (gevent): at quit the master runs ``python -m chaos.ramp finalize RUN_DIR`` as a
subprocess, which reads the ledgers, merges the per-process histories, runs the
invariant checkers and the gate, and its exit code becomes Locust's (README, "Load: the
seed's ramp"): 0 pass, 1 an invariant violated, 2 unknown, 3 a load gate failed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from locust import FastHttpUser, LoadTestShape, events, task
from locust.runners import MasterRunner, WorkerRunner
from locust.user.wait_time import constant_throughput

from ramp_plan import DEFAULT_STEPS, RampPlan, parse_steps
from ramp_stack import PROJECT_ROOT, EmbeddedRampStack, StackStartError, read_manifest
from ramp_student import QUESTIONS, Student, StudentCursor, history_for
from stack.paths import new_run_dir

_state: dict[str, object] = {}  # the master's stack and run folder (module state: one Locust process)


@events.init_command_line_parser.add_listener
def _options(parser) -> None:  # Locust's parser
    group = parser.add_argument_group("exam ramp (loadtests/exam_ramp.py)")
    group.add_argument("--ramp-steps", default=DEFAULT_STEPS, help="offered req/s per step, comma-separated")
    group.add_argument("--ramp-step-seconds", type=float, default=15.0, help="seconds per step")
    group.add_argument("--ramp-per-user-rate", type=float, default=2.0,
                       help="req/s each user paces itself to (constant_throughput); users = ceil(step / this)")
    group.add_argument("--ramp-settle", type=float, default=3.0,
                       help="seconds at the start of each step left out of its achieved rate (users spawning)")
    group.add_argument("--ramp-questions", type=int, default=20, help="questions each student answers")
    group.add_argument("--ramp-exam", default="NOVA-101", help="exam code")
    group.add_argument("--ramp-polls", type=int, default=3, help="merit-card polls per student at most")
    group.add_argument("--ramp-max-tries", type=int, default=4, help="tries of one call after unknown outcomes")
    group.add_argument("--ramp-p99", type=float, default=0.25, help="gate: p99 latency in seconds")
    group.add_argument("--ramp-max-failure-ratio", type=float, default=0.0, help="gate: failed / completed requests")
    group.add_argument("--ramp-min-rate-ratio", type=float, default=0.95, help="gate: achieved / target per step")
    group.add_argument("--ramp-quiet-timeout", type=float, default=60.0,
                       help="seconds to wait for every outcome to settle before the final read")
    group.add_argument("--ramp-seed", type=int, default=20261006, help="seed of every student's choices")
    group.add_argument("--ramp-web", type=int, default=2, help="web nodes of the embedded stack")
    group.add_argument("--ramp-run-dir", default="", help="run folder (default <results>/runs/<UTC>-ramp, stack.paths)")
    group.add_argument("--ramp-stack-dir", default="", help="drive a running `proctor up` stack: its run folder")
    group.add_argument("--ramp-roster", default="", help="with --host: roster.json {exams: {code: {student: code}}}")
    group.add_argument("--ramp-admin-url", default="", help="with --host: a web node's admin listener (exports)")
    group.add_argument("--ramp-ai-url", default="", help="with --host: the AI provider (its effect ledger)")
    group.add_argument("--ramp-sms-url", default="", help="with --host: the SMS gateway (its effect ledger)")
    group.add_argument("--ramp-haproxy-socket", default="", help="with --host: HAProxy's stats socket, if any")


def plan_of(options) -> RampPlan:  # argparse namespace
    return RampPlan(parse_steps(options.ramp_steps), options.ramp_step_seconds, options.ramp_per_user_rate)


def _validate(options) -> None:
    """Every bad option is named before any stack starts."""
    try:
        plan_of(options)
    except ValueError as exc:
        sys.exit(f"exam_ramp: {exc}")
    for name, low, high in (("questions", 1, QUESTIONS), ("polls", 1, None), ("max_tries", 1, None)):
        value = getattr(options, f"ramp_{name}")
        if value < low or (high is not None and value > high):
            sys.exit(f"exam_ramp: --ramp-{name.replace('_', '-')}={value}: must be >= {low}"
                     + (f" and <= {high} (the exam's questions)" if high else ""))


@events.init.add_listener
def _on_init(environment, **_kwargs) -> None:
    if isinstance(environment.runner, WorkerRunner) or environment.parsed_options is None:
        return  # workers get host, roster and run folder from the master with the spawn message
    options = environment.parsed_options
    _validate(options)
    _remember_signals()
    run_dir = Path(options.ramp_run_dir or new_run_dir("ramp")).resolve()
    _state["run_dir"] = run_dir
    targets = _targets(environment, options, run_dir)
    options.ramp_run_dir = str(run_dir)
    options.ramp_roster = targets["roster"]
    environment.host = targets["api"]
    _write_config(run_dir, options, targets)


def _remember_signals() -> None:
    """Note which signal stops the ramp, for the interrupted marker; Locust still handles it."""
    previous = signal.getsignal(signal.SIGINT)

    def on_sigint(signum, frame) -> None:
        _state["signal"] = "SIGINT"
        if callable(previous):
            previous(signum, frame)

    signal.signal(signal.SIGINT, on_sigint)
    import gevent  # Locust's own; its SIGTERM watcher runs beside this one

    gevent.signal_handler(signal.SIGTERM, lambda: _state.setdefault("signal", "SIGTERM"))


def _targets(environment, options, run_dir: Path) -> dict[str, str]:
    """Where the load goes and where the final read comes from: an embedded stack or flags."""
    if environment.host and not options.ramp_stack_dir:
        missing = [flag for flag, value in (("--ramp-roster", options.ramp_roster),
                                            ("--ramp-admin-url", options.ramp_admin_url)) if not value]
        if missing:
            sys.exit(f"exam_ramp: with --host, {' and '.join(missing)} must be given")
        run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        return {"mode": "external", "api": environment.host, "roster": str(Path(options.ramp_roster).resolve()),
                "admin": options.ramp_admin_url, "ai_provider": options.ramp_ai_url,
                "sms_gateway": options.ramp_sms_url, "haproxy_socket": options.ramp_haproxy_socket, "stack_dir": ""}
    if options.ramp_stack_dir:
        stack_dir = Path(options.ramp_stack_dir).resolve()
        manifest, mode = read_manifest(stack_dir), "stack-dir"
        run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    else:
        stack = EmbeddedRampStack(run_dir, web=options.ramp_web)
        print(f"exam_ramp: starting the embedded stack in {run_dir} ...", flush=True)
        try:
            manifest = stack.start(progress=lambda waited: print(f"exam_ramp: ... stack starting ({waited:.0f}s)",
                                                                 flush=True))
        except StackStartError as exc:
            sys.exit(f"exam_ramp: {exc}")
        print(f"exam_ramp: stack ready in {manifest.get('startup_seconds') or 0:.1f}s; the ramp starts", flush=True)
        _state["stack"] = stack
        stack_dir, mode = run_dir, "embedded"
    urls = manifest["urls"]
    return {"mode": mode, "api": urls["api"], "roster": str(stack_dir / "roster.json"), "admin": urls["admin"],
            "ai_provider": urls.get("ai_provider", ""), "sms_gateway": urls.get("sms_gateway", ""),
            "haproxy_socket": urls.get("haproxy_socket", ""), "stack_dir": str(stack_dir)}


def _write_config(run_dir: Path, options, targets: dict[str, str]) -> None:
    """What chaos.ramp.command needs after Locust: the plan, the gate, the targets (no secret)."""
    config = {"plan": plan_of(options).to_dict(), "targets": targets, "exam_code": options.ramp_exam,
              "questions": options.ramp_questions, "polls": options.ramp_polls, "seed": options.ramp_seed,
              "max_tries": options.ramp_max_tries, "settle": options.ramp_settle,
              "quiet_timeout": options.ramp_quiet_timeout, "locust_processes": getattr(options, "processes", None),
              "gate": {"p99": options.ramp_p99, "max_failure_ratio": options.ramp_max_failure_ratio,
                       "min_rate_ratio": options.ramp_min_rate_ratio},
              "argv": sys.argv[1:]}
    (run_dir / "ramp_config.json").write_text(json.dumps(config, indent=2))


@events.quitting.add_listener
def _on_quitting(environment, **_kwargs) -> None:
    if isinstance(environment.runner, WorkerRunner) or "run_dir" not in _state:
        return
    run_dir = Path(str(_state["run_dir"]))
    if (run_dir / "ramp_ticks.jsonl").exists() and not _state.get("plan_done"):
        _mark_interrupted(run_dir)
    try:
        code = _finalize(run_dir)
    finally:
        stack = _state.pop("stack", None)
        if isinstance(stack, EmbeddedRampStack):
            print(f"exam_ramp: stopping the embedded stack ({run_dir})", flush=True)
            stack.stop()
    environment.process_exit_code = code


def _mark_interrupted(run_dir: Path) -> None:
    """Locust quit before the plan's last step: the run is interrupted, not a failed gate. The
    marker's format is chaos/interrupt.py's (this gevent process imports no harness code)."""
    name = str(_state.get("signal") or "stop")
    marker = {"signal": name, "phase": "load", "at": time.time()}
    (run_dir / "interrupted").write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
    print(f"exam_ramp: interrupted by {name} during the load; judging what ran, then stopping the stack",
          flush=True)


@events.quit.add_listener
def _on_quit(exit_code: int, **_kwargs) -> None:
    """Locust's last words are its stats tables; the verdict comes after them (issue #27)."""
    run_dir = _state.get("run_dir")
    if run_dir is None or not (Path(str(run_dir)) / "ramp.json").exists():
        return
    sys.stdout.flush()
    subprocess.run([sys.executable, "-m", "chaos.ramp", "summary", str(run_dir)], cwd=PROJECT_ROOT, check=False)


def _finalize(run_dir: Path) -> int:
    """The final read, checkers and gate, in a gevent-free subprocess; its exit code is the verdict."""
    if not (run_dir / "ramp_ticks.jsonl").exists():
        print("exam_ramp: the ramp never started (no tick recorded): nothing to judge", file=sys.stderr)
        return 2
    print(f"exam_ramp: final read and checks: python -m chaos.ramp finalize {run_dir}", flush=True)
    done = subprocess.run([sys.executable, "-m", "chaos.ramp", "finalize", str(run_dir)], cwd=PROJECT_ROOT,
                          check=False)
    return done.returncode


class ExamStudent(FastHttpUser):
    """One simulated exam client; each task run is exactly one request (the pacing unit)."""

    network_timeout = 10.0
    connection_timeout = 5.0

    def on_start(self) -> None:
        options = self.environment.parsed_options
        self._pace = constant_throughput(options.ramp_per_user_rate)
        self.history = history_for(Path(options.ramp_run_dir), _role(self.environment))
        self.cursor = StudentCursor.shared(options.ramp_roster, options.ramp_exam, _worker_index(self.environment))
        self.student: Student | None = None

    def wait_time(self) -> float:
        return self._pace(self)

    @task
    def step(self) -> None:
        if self.student is None or self.student.done:
            self.student = self.cursor.next_student(self.environment.parsed_options, self.history)
        self.student.step(self.client)


def _worker_index(environment) -> int:
    return max(0, getattr(environment.runner, "worker_index", 0))


def _role(environment) -> str:
    if isinstance(environment.runner, WorkerRunner):
        return f"worker{_worker_index(environment)}"
    return "master" if isinstance(environment.runner, MasterRunner) else "local"


class ExamRamp(LoadTestShape):
    """Steps of offered req/s; each tick records target, users and Locust's request counts."""

    def tick(self):  # Locust's contract: (users, spawn_rate) or None
        options = self.runner.environment.parsed_options
        plan = plan_of(options)
        elapsed = self.get_run_time()
        step = plan.at(elapsed)
        self._record(options, elapsed, step)
        if step is None:
            _state["plan_done"] = True
            return None
        return step.users, float(max(step.users, 10))

    def _record(self, options, elapsed: float, step) -> None:
        total = self.runner.stats.total
        tick = {"wall": time.time(), "elapsed": round(elapsed, 3), "target": step.rate if step else 0.0,
                "users_target": step.users if step else 0, "users": self.runner.user_count,
                "requests": total.num_requests, "failures": total.num_failures, "pid": os.getpid()}
        with open(Path(options.ramp_run_dir) / "ramp_ticks.jsonl", "a", encoding="utf-8") as out:
            out.write(json.dumps(tick) + "\n")
