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
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

from locust import FastHttpUser, LoadTestShape, events, task
from locust.exception import StopUser
from locust.runners import MasterRunner, WorkerRunner
from locust.user.wait_time import constant_throughput

from ramp_arrivals import ARRIVAL_MODES, DISTRIBUTIONS, ArrivalSchedule, GeneratorMeter, OpenArrivals, default_slots
from ramp_distributed import DRAIN_LIMIT, SCHEDULE_GRACE, MasterSide, WorkerSide, is_loopback, require_token
from ramp_plan import DEFAULT_STEPS, RampPlan, parse_steps
from ramp_stack import PROJECT_ROOT, EmbeddedRampStack, StackStartError, read_manifest
from ramp_student import (QUESTIONS, RosterExhausted, SlotConnection, Student, StudentCursor, StudentPool, history_for,
                          students_needed)
from ramp_wire import TOKEN_ENV
from stack.paths import new_run_dir

_state: dict[str, object] = {}  # the master's stack and run folder (module state: one Locust process)
_in_flight = [0]  # this process's requests between claim (or task start) and completion
_TOKEN_GIVEN = bool(os.environ.get(TOKEN_ENV))
_TOKEN = os.environ.get(TOKEN_ENV) or secrets.token_urlsafe(24)
"""The run's worker token: drawn at import, before ``--processes`` forks, so forked workers share it."""


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
    group.add_argument("--ramp-min-rate-ratio", type=float, default=0.95, 
                       help="gate: achieved / offered per step (offered: the intended starts in the step's window in "
                            "the open model, the target in the closed one)")
    group.add_argument("--ramp-quiet-timeout", type=float, default=None,
                       help="seconds to wait for every outcome to settle before the final read; default: derived "
                            "from the run (chaos/settle.py: backlog, measured throughput, provider limit)")
    group.add_argument("--ramp-seed", type=int, default=20261006, help="seed of every student's choices")
    group.add_argument("--ramp-web", type=int, default=2, help="web nodes of the embedded stack")
    group.add_argument("--ramp-run-dir", default="", help="run folder (default <results>/runs/<UTC>-ramp, stack.paths)")
    group.add_argument("--ramp-stack-dir", default="", help="drive a running `proctor up` stack: its run folder")
    group.add_argument("--ramp-roster", default="", help="with --host: roster.json {exams: {code: {student: code}}}")
    group.add_argument("--ramp-admin-url", default="", help="with --host: a web node's admin listener (exports)")
    group.add_argument("--ramp-ai-url", default="", help="with --host: the AI provider (its effect ledger)")
    group.add_argument("--ramp-sms-url", default="", help="with --host: the SMS gateway (its effect ledger)")
    group.add_argument("--ramp-haproxy-socket", default="", help="with --host: HAProxy's stats socket, if any")
    group.add_argument("--ramp-arrivals", default="open", choices=ARRIVAL_MODES,
                       help="open: request starts scheduled at the step's rate, latency corrected from the intended "
                            "start (default); closed: users wait for each response (Locust's model)")
    group.add_argument("--ramp-distribution", default="poisson", choices=DISTRIBUTIONS,
                       help="open model: gaps between intended starts (seeded by --ramp-seed)")
    group.add_argument("--ramp-max-in-flight", type=int, default=0,
                       help="open model: in-flight slots (k6's maxVUs); 0 = highest step rate x 2 s, at least 10")
    group.add_argument("--ramp-max-send-lag", type=float, default=0.0,
                       help="open model: an arrival sent later than this after its intended start is delayed by "
                            "the generator; 0 = a tenth of --ramp-p99")
    group.add_argument("--ramp-max-delayed-ratio", type=float, default=0.01,
                       help="gate: delayed / scheduled arrivals the generator may miss before the run is unknown")
    group.add_argument("--ramp-max-queue", type=float, default=10.0,
                       help="open model: an arrival that waited this long for a slot is dropped, never sent")
    group.add_argument("--ramp-allow-remote-workers", action="store_true",
                       help="let the master bind beyond loopback (clear text: a trusted network only)")
    group.add_argument("--ramp-master-timeout", type=float, default=10.0,
                       help="a worker quits after this many seconds without the master's heartbeat")


def plan_of(options) -> RampPlan:  # argparse namespace
    return RampPlan(parse_steps(options.ramp_steps), options.ramp_step_seconds, options.ramp_per_user_rate)


def slots_of(options) -> int:
    """Open model: in-flight slots of the whole run (all workers together)."""
    return options.ramp_max_in_flight or default_slots(plan_of(options).steps)


def send_lag_of(options) -> float:
    """The lag past which an arrival counts as delayed: given, or a tenth of the p99 limit (a lag
    that size cannot carry a request over the limit by itself)."""
    return options.ramp_max_send_lag or options.ramp_p99 / 10


def _validate(options) -> None:
    """Every bad option is named before any stack starts."""
    try:
        plan_of(options)
    except ValueError as exc:
        sys.exit(f"exam_ramp: {exc}")
    for name, low, high in (("questions", 1, QUESTIONS), ("polls", 1, None), ("max_tries", 1, None),
                            ("max_in_flight", 0, None)):
        value = getattr(options, f"ramp_{name}")
        if value < low or (high is not None and value > high):
            sys.exit(f"exam_ramp: --ramp-{name.replace('_', '-')}={value}: must be >= {low}"
                     + (f" and <= {high} (the exam's questions)" if high else ""))
    for name in ("max_send_lag", "max_queue", "master_timeout", "max_delayed_ratio"):
        if getattr(options, f"ramp_{name}") < 0:
            sys.exit(f"exam_ramp: --ramp-{name.replace('_', '-')}={getattr(options, f'ramp_{name}')}: must be >= 0")


def _check_bind(options) -> None:
    """The master listens on loopback unless told otherwise: its channel is clear text."""
    host = options.master_bind_host
    if not is_loopback(host) and not options.ramp_allow_remote_workers:
        sys.exit(f"exam_ramp: --master-bind-host={host} listens beyond loopback; Locust's channel is clear text and "
                 "carries access codes: use --master-bind-host 127.0.0.1, or add --ramp-allow-remote-workers "
                 "on a trusted network")


@events.init.add_listener
def _on_init(environment, **_kwargs) -> None:
    if isinstance(environment.runner, WorkerRunner):
        require_token(environment, _TOKEN_GIVEN)  # then plan, roster and target come from the master
        _state["worker"] = WorkerSide(environment, _TOKEN, environment.parsed_options.ramp_master_timeout,
                                      _generator_summary, _schedule_over, lambda: _in_flight[0])
        return
    if environment.parsed_options is None:
        return
    options = environment.parsed_options
    _validate(options)
    _remember_signals(environment)
    if isinstance(environment.runner, MasterRunner):
        _check_bind(options)
        _state["master"] = MasterSide(environment, _TOKEN, options.expect_workers)
    run_dir = Path(options.ramp_run_dir or new_run_dir("ramp")).resolve()
    _state["run_dir"] = run_dir
    targets = _targets(environment, options, run_dir)
    _check_roster(targets["roster"], options)
    options.ramp_run_dir = str(run_dir)
    options.ramp_roster = targets["roster"]
    environment.host = targets["api"]
    _write_config(run_dir, options, targets, distributed=isinstance(environment.runner, MasterRunner))
    if isinstance(environment.runner, MasterRunner):
        _state["master"].configure(run_dir, targets["roster"])
        _announce_token(run_dir)


def _announce_token(run_dir: Path) -> None:
    """Workers started by hand need the token: given in the environment, or written here (0600)."""
    if _TOKEN_GIVEN:
        return
    path = run_dir / "worker_token"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with open(fd, "w") as out:
        out.write(_TOKEN + "\n")
    print(f"exam_ramp: workers started by hand need {TOKEN_ENV}=$(cat {path})", flush=True)


def _remember_signals(environment) -> None:
    """Note which signal stops the ramp, for the interrupted marker, and make both stop it.

    In a headless run Locust installs its SIGTERM watcher only after the shape ends (locust/
    main.py, 2.47), so SIGTERM did nothing until the plan was over; and it stops a shape on
    Ctrl-C only by the KeyboardInterrupt that Python raises in whichever greenlet happens to
    run. Both signals now take one way: the handler names the signal and schedules one
    KeyboardInterrupt, thrown from the hub into Locust's main greenlet (waiting on the shape).
    A SIGINT ignored by whoever started us (``cmd &`` in a script) stays ignored."""
    import gevent  # Locust's own

    main = gevent.getcurrent()  # init fires from Locust's main greenlet

    def interrupt(name: str) -> None:
        _state.setdefault("signal", name)
        if not _state.get("interrupt_thrown") and not _state.get("quitting"):  # a stop already under way ends alone
            _state["interrupt_thrown"] = True
            gevent.get_hub().loop.run_callback(main.throw, KeyboardInterrupt)

    def headless_shape_running() -> bool:  # the web UI's shape runs with Locust's watcher installed
        shape = getattr(environment.runner, "shape_greenlet", None)
        return bool(environment.parsed_options.headless) and shape is not None and not shape.dead

    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, lambda _signum, _frame: interrupt("SIGINT"))
    # After the shape, Locust's own watcher runs its shutdown; this one only names the signal.
    gevent.signal_handler(signal.SIGTERM, lambda: interrupt("SIGTERM") if headless_shape_running()
                          else _state.setdefault("signal", "SIGTERM"))


def _students_needed(options, senders: bool = True) -> int:
    """Students the plan can use up: those who finish, and (``senders``) one unfinished student per
    sender (open-model slot, closed-model user) at the end. A roster we enrol counts them all; a
    roster we are given must hold the finishing ones at least, and a run that still runs out of
    students stops with RosterExhausted (the default 1,000 slots would refuse a default roster)."""
    plan = plan_of(options)
    held = (slots_of(options) if options.ramp_arrivals == "open" else plan.most_users) if senders else 0
    return students_needed(plan.offered_requests, options.ramp_questions, held)


def _check_roster(roster_path: str, options) -> None:
    """Refuse a plan the roster cannot serve: each student sits the exam once (one attempt)."""
    try:
        enrolled = len(json.loads(Path(roster_path).read_text()).get("exams", {}).get(options.ramp_exam, {}))
    except (OSError, ValueError) as exc:
        sys.exit(f"exam_ramp: --ramp-roster {roster_path}: {exc}")
    needed = _students_needed(options, senders=False)
    if enrolled < needed:
        sys.exit(f"exam_ramp: the roster has {enrolled} students of {options.ramp_exam}; this plan needs up to "
                 f"{needed} (one attempt each, {options.ramp_questions + 3} requests a student at least): "
                 "enrol more (PROCTOR_ROSTER_SIZE) or shorten the plan")


def _roster_exhausted(environment, exc: RosterExhausted) -> None:
    """A student cannot be reused: stop the whole run, loudly, with a failing exit code."""
    if not _state.get("roster_exhausted"):
        _state["roster_exhausted"] = True
        print(f"exam_ramp: {exc}", file=sys.stderr)
        environment.process_exit_code = 2
        environment.runner.quit()
    raise StopUser()


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
        stack = EmbeddedRampStack(run_dir, web=options.ramp_web, roster_size=2 * _students_needed(options))
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


def _write_config(run_dir: Path, options, targets: dict[str, str], distributed: bool) -> None:
    """What chaos.ramp.command needs after Locust: the plan, the gate, the targets (no secret)."""
    config = {"plan": plan_of(options).to_dict(), "targets": targets, "exam_code": options.ramp_exam,
              "questions": options.ramp_questions, "polls": options.ramp_polls, "seed": options.ramp_seed,
              "max_tries": options.ramp_max_tries, "settle": options.ramp_settle,
              "quiet_timeout": options.ramp_quiet_timeout, "locust_processes": getattr(options, "processes", None),
              "arrivals": {"mode": options.ramp_arrivals, "distribution": options.ramp_distribution,
                           "slots": slots_of(options), "slots_given": bool(options.ramp_max_in_flight),
                           "max_send_lag": send_lag_of(options), "max_send_lag_given": bool(options.ramp_max_send_lag),
                           "max_queue": options.ramp_max_queue},
              "distributed": distributed,
              "gate": {"p99": options.ramp_p99, "max_failure_ratio": options.ramp_max_failure_ratio,
                       "min_rate_ratio": options.ramp_min_rate_ratio,
                       "max_delayed_ratio": options.ramp_max_delayed_ratio},
              "argv": sys.argv[1:]}
    (run_dir / "ramp_config.json").write_text(json.dumps(config, indent=2))


@events.quitting.add_listener
def _on_quitting(environment, **_kwargs) -> None:
    if isinstance(environment.runner, WorkerRunner):
        worker = _state.get("worker")
        if isinstance(worker, WorkerSide) and worker.setup is None:
            print("exam_ramp: the master never accepted this worker (is its PROCTOR_RAMP_TOKEN this run's?)",
                  file=sys.stderr, flush=True)
            environment.process_exit_code = 2
        return
    if "run_dir" not in _state:
        return
    _state["quitting"] = True  # a Ctrl-C from here on must not cut the final read or the stack's stop
    run_dir = Path(str(_state["run_dir"]))
    cut_short = not _state.get("plan_done") and not _state.get("roster_exhausted")  # that one has its own line
    if (run_dir / "ramp_ticks.jsonl").exists() and cut_short:
        _mark_interrupted(run_dir)
    master = _state.get("master")
    if isinstance(master, MasterSide):
        master.close()
    else:
        _write_generator_summary(run_dir / "histories", f"local-{os.getpid()}")
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


# ------------------------------------------------------------------ the generator of this process
def _generator(options, cursor: StudentCursor, history) -> dict[str, object]:
    """This process's meter (CPU per step) and, in the open model, its arrival schedule: made
    when its first user starts, which is where its clock begins."""
    if "generator" not in _state:
        plan = plan_of(options)
        meter = GeneratorMeter(plan.step_seconds, len(plan.steps))
        generator: dict[str, object] = {"meter": meter, "arrivals": None}
        if options.ramp_arrivals == "open":
            generator["students"] = StudentPool(cursor, options, history)
            worker = _state.get("worker")
            part, parts = (worker.setup["worker"], worker.setup["workers"]) if isinstance(worker, WorkerSide) else (0, 1)
            schedule = ArrivalSchedule(plan.steps, plan.step_seconds, options.ramp_distribution,
                                       seed=f"{options.ramp_seed}-arrivals-{part}", share=1.0 / parts)
            generator["arrivals"] = OpenArrivals(schedule, meter, send_lag_of(options), options.ramp_max_queue)
        _state["generator"] = generator
    return _state["generator"]  # type: ignore[return-value]


def _schedule_over() -> bool:
    """This process sent (or gave up) every arrival of its schedule; always true in the closed model."""
    generator = _state.get("generator")
    arrivals = generator.get("arrivals") if isinstance(generator, dict) else None
    if not isinstance(arrivals, OpenArrivals):
        return True
    return arrivals.finished or time.monotonic() - arrivals.origin >= arrivals.schedule.duration + 0.5


def _generator_summary() -> dict[str, object] | None:
    generator = _state.get("generator")
    if not isinstance(generator, dict):
        return None
    arrivals = generator["arrivals"]
    if isinstance(arrivals, OpenArrivals):
        arrivals.close()
    return {"mode": "open" if arrivals else "closed", "pid": os.getpid(), **generator["meter"].summary()}


def _write_generator_summary(folder: Path, name: str) -> None:
    summary = _generator_summary()
    if summary is not None:
        (folder / f"generator-{name}.json").write_text(json.dumps(summary))


# ------------------------------------------------------------------ users
class ExamStudent(FastHttpUser):
    """One simulated exam client; each task run is exactly one request. Closed model: a user
    paces itself (constant_throughput). Open model: a user is an in-flight slot that sends the
    process's next scheduled arrival at its intended start."""

    network_timeout = 10.0
    connection_timeout = 5.0

    def on_start(self) -> None:
        options = self.environment.parsed_options
        worker = _state.get("worker")
        if isinstance(worker, WorkerSide):
            if not worker.ready.wait(timeout=options.ramp_master_timeout * 3):
                raise StopUser()  # never set up by the master: this worker sends nothing
            self.history, self.cursor = worker.history, _worker_cursor(worker, options.ramp_exam)
        else:
            self.history = history_for(Path(options.ramp_run_dir), _role(self.environment))
            self.cursor = StudentCursor.shared(options.ramp_roster, options.ramp_exam, 0)
        self._pace = constant_throughput(options.ramp_per_user_rate)
        generator = _generator(options, self.cursor, self.history)
        self.meter, self.arrivals, self.students = generator["meter"], generator["arrivals"], generator.get("students")
        self.student: Student | None = None
        self.connection = SlotConnection()  # this slot's client keeps one pooled connection between requests

    def wait_time(self) -> float:
        return 0.0 if self.arrivals is not None else self._pace(self)

    @task
    def step(self) -> None:
        worker = _state.get("worker")
        if isinstance(worker, WorkerSide) and worker.draining:
            time.sleep(0.5)  # the master asked for the end of the history: nothing new is sent
            return
        if self.arrivals is not None and self.arrivals.finished:
            time.sleep(0.5)  # this process's schedule is over; the shape ends the run
            return
        _in_flight[0] += 1  # from the claim on: a drain waits for a slot sleeping toward its arrival too
        try:
            self._next_request(worker)
        finally:
            _in_flight[0] -= 1

    def _next_request(self, worker: WorkerSide | None) -> None:
        if self.arrivals is None:
            self._send(None)
            return
        claimed = self.arrivals.claim()
        if claimed is None:
            return  # the schedule is over (finished is set)
        arrival, queued = claimed
        intended = self.arrivals.origin + arrival.offset
        time.sleep(max(0.0, intended - time.monotonic()))
        if isinstance(worker, WorkerSide) and worker.draining:
            return  # claimed, never sent: the ramp ended first
        now = time.monotonic()
        self.arrivals.sent(arrival, queued, now - intended)
        self._send((time.time() - (now - intended), intended))

    def _send(self, intended: tuple[float, float] | None) -> None:
        try:
            student = self._student()
        except RosterExhausted as exc:  # every student sat the exam once: stop, never reuse one
            _roster_exhausted(self.environment, exc)
        try:
            student.step(self.client, intended, self.connection)
        finally:
            if self.students is not None:
                self.students.release(student)
            self.meter.completed()

    def _student(self) -> Student:
        if self.students is not None:
            return self.students.acquire()  # open model: any idle student of this process
        if self.student is None or self.student.done:  # closed model: this user's own student
            self.student = self.cursor.next_student(self.environment.parsed_options, self.history)
        return self.student


def _worker_cursor(worker: WorkerSide, exam: str) -> StudentCursor:
    if "cursor" not in _state:
        _state["cursor"] = StudentCursor.from_students(worker.setup["roster"][exam], exam)
    return _state["cursor"]  # type: ignore[return-value]


def _role(environment) -> str:
    return "master" if isinstance(environment.runner, MasterRunner) else "local"


class ExamRamp(LoadTestShape):
    """Steps of offered req/s; each tick records target, users and Locust's request counts.
    Distributed: the ramp's clock starts once every expected worker is set up, and after the
    last step the master waits for each worker's end of history (or its loss) before it quits."""

    _started = False

    def tick(self):  # Locust's contract: (users, spawn_rate) or None
        options = self.runner.environment.parsed_options
        master = _state.get("master")
        if isinstance(master, MasterSide) and not self._started:
            # Wait here, not with a (0 users) tick: Locust would dispatch to whatever workers are
            # connected, a refused one included, and its spawn could wait for it forever.
            while not master.all_ready():
                if self.get_run_time() > options.ramp_master_timeout * 6:
                    print(f"exam_ramp: {len(master.ready)} of {master.expected} workers set up after "
                          f"{self.get_run_time():.0f}s: the ramp does not start", file=sys.stderr, flush=True)
                    return None
                time.sleep(0.2)  # gevent-patched: the message handlers run meanwhile
            self.reset_time()
        self._started = True
        plan = plan_of(options)
        elapsed = self.get_run_time()
        step = plan.at(elapsed)
        self._record(options, elapsed, step)
        if step is None:
            _state["plan_done"] = True
            return self._after_last_step(master, options, elapsed - plan.duration)
        users = slots_of(options) if options.ramp_arrivals == "open" else step.users
        self._last = (users, float(max(users, 10)))
        return self._last

    def _after_last_step(self, master, options, overtime: float):
        """Local: the process's own schedule (begun with its first user) may have arrivals left,
        and requests in flight; wait for both (bounded). Distributed: every worker's end."""
        if not isinstance(master, MasterSide):
            if options.ramp_arrivals == "closed":
                return None  # closed users have no schedule to finish
            done = _schedule_over() and _in_flight[0] == 0
            return None if done or overtime > SCHEDULE_GRACE else self._last
        master.drain()
        if master.drained() or overtime > DRAIN_LIMIT:
            if not master.drained():
                print(f"exam_ramp: workers still draining after {DRAIN_LIMIT:g}s: their histories are incomplete",
                      file=sys.stderr, flush=True)
            return None
        return self._last

    def _record(self, options, elapsed: float, step) -> None:
        total = self.runner.stats.total
        tick = {"wall": time.time(), "elapsed": round(elapsed, 3), "target": step.rate if step else 0.0,
                "users_target": step.users if step else 0, "users": self.runner.user_count,
                "requests": total.num_requests, "failures": total.num_failures, "pid": os.getpid()}
        with open(Path(options.ramp_run_dir) / "ramp_ticks.jsonl", "a", encoding="utf-8") as out:
            out.write(json.dumps(tick) + "\n")
