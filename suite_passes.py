"""`make test`'s two pytest passes (issue #22 part 4).

The main pass runs every test but the container ones on pytest-xdist workers; the compose
pass runs the container tests (the scenarios' parity tests against docker-compose.yml, then
the compose stack's own test). Its set-up (engine packages, dockerd, base and stack images:
minutes on a fresh machine) runs ahead, beside the main pass, in the CPU the main pass leaves
idle (``python -m chaos.deployment.compose_setup --ahead``: nice 19, the engine's containers
at the lowest CPU weight); it holds the engine it started until the compose pass is done.
Once that set-up is ready the compose pass runs on ``--compose-workers`` xdist workers (each
worker's projects on networks of their own, conftest.py); without it, in one process, so two
workers never build the same image.

By default (``--compose tail``) the compose pass starts beside the main pass's tail: once its
set-up ahead is ready and the main pass's scenario files (chaos/, handed out first) have all
finished, so the compose pass's containers share the CPU only with the integration, security
and unit files, never with a scenario's load. ``--compose after`` starts it after the main
pass (the whole machine to each pass, the longest). ``--compose alongside``
starts it as soon as its set-up ahead is ready: shorter still, but beside the scenarios, with
both cores saturated, where load-sensitive tests have missed before (docs/harness.md).

What keeps the two apart when they run together:
- ports: each pass draws from its own part of the port range (``PROCTOR_PORT_RANGE``;
  the main pass's workers split theirs again, conftest.py), so no two stacks race for a port;
- the engine: only the compose set-up ahead and the compose pass start, use and stop dockerd;
- output: alongside, the compose pass writes ``results/compose-pass.log``, printed whole
  when it ends, so the two passes' lines never interleave; each writes its own junit file
  and ``suite-time`` rows (suite_time.py).

Ctrl-C or SIGTERM to this process reaches both passes as SIGINT (each pytest tears its
stacks down); if this process dies without a word, the kernel sends both SIGINT
(``PR_SET_PDEATHSIG``), so no pass outlives it. At the end it prints each pass's time and
how busy the machine's cores were (/proc/stat, every process, containers included).

Usage: python suite_passes.py [--workers N] [--compose after|tail|alongside|skip] [--compose-workers N]
       [-- PYTEST_ARGS...]
Exit: 0 when both passes passed; else the first non-zero exit of the main pass, then the compose pass;
130 or 143 when SIGINT or SIGTERM cut the run.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, TypeVar
from pathlib import Path

import pytest

from stack.deploy.ports import PORT_RANGE_ENV, listen_ports

__all__ = ["COMPOSE_TESTS", "LONGEST_FILES", "LONG_FILES_FIRST", "Pass", "SCENARIOS_DONE_ENV", "ScenariosDone",
           "long_files_first", "main", "passes", "setup_ahead", "split_ports"]

REPO = Path(__file__).resolve().parent
T = TypeVar("T")
LONG_FILES_FIRST = ("chaos/", "tests/integration/", "tests/security/")
"""The main pass hands whole files to its workers (``--dist loadfile``), and a file that starts stacks
takes minutes where a unit file takes seconds. xdist's default order (the files with the most tests
first) put the chaos files, a few long tests each, last, so the pass ended on them while other
workers sat idle. With ``--no-loadscope-reorder`` xdist keeps the collection's order, which the
root conftest.py sorts with ``long_files_first``: the short files fill the end (docs/harness.md)."""
LONGEST_FILES = (
    "chaos/test_ai_lane.py", "chaos/test_valkey_failover.py", "chaos/test_ramp.py", "chaos/test_worker_kill.py",
    "chaos/test_ramp_distributed.py", "chaos/test_lane_isolation.py", "chaos/test_valkey_connect_timeouts.py",
    "chaos/test_log_shipping.py",
    "tests/integration/test_stack_invariants.py", "tests/integration/test_relay.py",
    "tests/security/test_request_limits.py", "tests/security/test_schemathesis.py",
    "tests/integration/test_stack_registry.py", "tests/integration/test_embedded_stack.py",
)
"""These go first, longest first: the scenario files among the scenario files (wall seconds in rehearsal
run 46: 190, 182, 126, 92, 89, 81, 69, 54; every other under 42), then the rest of the main pass's long
files ahead of every other file of its folders (run 51, beside the compose pass: 111, 89, 89, 87, 65, 63;
every other under 31). A worker that draws a long file late ends the pass, or, with ``--compose tail``,
holds the compose pass back, while the others sit idle."""
SCENARIO_FOLDER = "chaos/"
SCENARIOS_DONE_ENV = "PROCTOR_SUITE_SCENARIOS_DONE"
"""The file the main pass's pytest writes once its scenario files are done (``ScenariosDone``)."""
SCENARIOS_DONE = "results/main-scenarios.done"
COMPOSE_TESTS = (
    # The issue #13 scenarios, each with its negative control, the Valkey failover on the Sentinel topology
    # (issue #25), the SMS worker failover with its reserved egress address and the log store outage (issue
    # #26; their negative controls run embedded only); `make test-compose-all` runs every scenario on compose.
    "chaos/test_worker_kill.py::test_worker_kills_lose_nothing_and_duplicate_nothing",
    "chaos/test_worker_kill.py::test_without_reconciler_a_killed_job_is_reported_lost",
    "chaos/test_web_node_kill.py", "chaos/test_tls_churn.py",
    "chaos/test_valkey_failover.py::test_a_primary_failover_loses_nothing_and_every_client_follows",
    "chaos/test_sms_egress.py::test_standby_takes_the_lane_and_the_reserved_address_and_every_sms_arrives_once",
    "chaos/test_log_shipping.py::test_every_line_is_shipped_or_counted_dropped_and_no_canary_reaches_the_store",
    # Last: the scenarios' session fixture has started the engine by then, so this module leaves it running.
    "tests/compose",
)
COMPOSE_LOG = "results/compose-pass.log"
SETUP_LOG = "results/compose-setup-ahead.log"
SETUP_READY = "results/compose-setup-ahead.ready"
MODES = ("after", "tail", "alongside", "skip")
BESIDE = ("tail", "alongside")
"""The modes whose compose pass runs while the main pass does (so it writes to its own log)."""
COMPOSE_WORKERS = 2
"""The compose pass's 19 tests took 350-405 s in one process on a fresh machine, waiting mostly (containers
coming up, time-scaled schedules); loadfile on two workers packs them into about 230 s (docs/harness.md)."""
_PR_SET_PDEATHSIG = 1


@dataclass
class Pass:
    name: str
    argv: list[str]
    port_range: str | None  # None: draws no port (the set-up ahead)
    log: Path | None = None  # None: the terminal
    ready: Path | None = None  # the set-up ahead writes it when done
    scenarios_done: Path | None = None  # the main pass writes it when its scenario files are done
    spread: list[str] = field(default_factory=list)  # pytest-xdist options, given only when the set-up is ready
    process: subprocess.Popen | None = field(default=None, repr=False)
    started: float = 0.0
    took: float = 0.0


def split_ports(workers: int, ports: range) -> tuple[str, str]:
    """The main pass's part of ``ports`` and the compose pass's: one slice per main-pass worker and one
    more for compose, so the main pass's workers can split theirs evenly again."""
    slices = max(workers, 1) + 1
    size = len(ports) // slices
    compose_low = ports.start + (slices - 1) * size
    return f"{ports.start}-{compose_low - 1}", f"{compose_low}-{compose_low + size - 1}"


def long_files_first(items: list[T]) -> list[T]:
    """``items`` (pytest items, anything with a ``nodeid``) with the files of ``LONG_FILES_FIRST`` first,
    in that order; the scenario files of ``LONGEST_FILES`` ahead of the other scenario files, and its other
    files right after the scenario files; stable, so the order within each file and of the other files
    within a folder stays."""
    def rank(item: T) -> tuple[int, int]:
        path = item.nodeid.split("::", 1)[0]  # type: ignore[attr-defined]
        folder = next((i for i, top in enumerate(LONG_FILES_FIRST) if path.startswith(top)), len(LONG_FILES_FIRST))
        longest = LONGEST_FILES.index(path) if path in LONGEST_FILES else len(LONGEST_FILES)
        if path.startswith(SCENARIO_FOLDER):
            return 0, longest
        return (1, longest) if path in LONGEST_FILES else (folder + 1, longest)

    return sorted(items, key=rank)


def _spread(workers: int) -> list[str]:
    # xdist's own order (files with the most tests first) put the chaos files, a few long tests each,
    # last; --no-loadscope-reorder keeps the collection's, which long_files_first sorted
    return ["-n", str(workers), "--dist", "loadfile", "--no-loadscope-reorder"] if workers > 0 else []


def passes(workers: int, pytest_args: list[str], python: str = sys.executable,
           compose_workers: int = 1) -> tuple[Pass, Pass]:
    """``compose_workers`` > 1: the compose pass on that many xdist workers, each with a project network of
    its own (conftest.py), once the set-up ahead has the engine and the images ready (else one process:
    two workers must never build the same image)."""
    main_ports, compose_ports = split_ports(workers, listen_ports())
    pytest = [python, "-m", "pytest"]
    main = Pass("main", [*pytest, *_spread(workers), "--ignore=tests/compose", "--durations=25",
                         "--junitxml=results/junit.xml", *pytest_args], main_ports,
                scenarios_done=REPO / SCENARIOS_DONE)
    # --timeout: a hang guard for a cold machine (engine, base and image are built inside the first test).
    compose = Pass("compose", [*pytest, "--chaos-target", "compose", "--timeout", "1500",
                               "--junitxml=results/junit-compose.xml", *COMPOSE_TESTS, *pytest_args],
                   compose_ports, log=REPO / COMPOSE_LOG, spread=_spread(compose_workers) if compose_workers > 1 else [])
    return main, compose


class ScenariosDone:
    """Registered in the main pass's pytest that hands out the tests (the xdist controller, or the one process
    without workers): writes ``path`` once every collected test of chaos/ has finished, so ``--compose tail``
    can start the compose pass beside the rest. A worker that crashed reports its test (``when`` "???"), so
    it counts as finished; a run that never writes it leaves the compose pass to start after the main pass."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.waiting: set[str] | None = None  # None: nothing collected yet

    def _collected(self, nodeids: list[str]) -> None:
        if self.waiting is None:  # every worker collects the same tests: the first one's are enough
            self.waiting = {nodeid for nodeid in nodeids if nodeid.startswith(SCENARIO_FOLDER)}
            self._write_when_done()

    def _write_when_done(self) -> None:
        if self.waiting == set() and not self.path.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(f"{time.time()!r}\n")

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: object, ids: list[str]) -> None:
        self._collected(ids)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self._collected([item.nodeid for item in session.items])  # without workers; the controller collects none

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.waiting and report.when in ("teardown", "???"):
            self.waiting.discard(report.nodeid)
            self._write_when_done()


def setup_ahead(python: str = sys.executable) -> Pass:
    """The compose pass's set-up, run beside the main pass; it writes SETUP_READY when done."""
    ready = REPO / SETUP_READY
    return Pass("compose set-up ahead", [python, "-m", "chaos.deployment.compose_setup", "--ahead", str(ready)],
                None, log=REPO / SETUP_LOG, ready=ready)


def _setup_state(setup: Pass) -> str | None:
    """What the set-up ahead wrote (ready, unavailable, failed), ``ended with exit N``, or None while it runs."""
    assert setup.ready is not None and setup.process is not None
    if setup.ready.exists():
        return setup.ready.read_text().strip()
    return f"ended with exit {setup.process.returncode}" if _ended(setup) else None


def _await_setup(setup: Pass, caught: list[int]) -> None:
    """Until the set-up ahead is ready (or ended, or the run was cut): the compose pass then finds it done."""
    if _setup_state(setup) is None:
        print(f"suite: main pass done; waiting for the compose set-up ahead (log {_shown(setup.log)})", flush=True)
    while _setup_state(setup) is None and not caught:
        time.sleep(0.2)


def _time_setup(setup: Pass) -> None:
    """The set-up ahead's time until it was ready (it then holds the engine, which is no work): when it wrote
    the file, not when the runner looked."""
    assert setup.ready is not None
    setup.took = time.monotonic() - setup.started
    if setup.ready.exists():
        setup.took -= max(0.0, time.time() - setup.ready.stat().st_mtime)


def _show_setup(setup: Pass) -> None:
    print(f"suite: compose set-up ahead: {_setup_state(setup)} after {setup.took:.0f} s (log {_shown(setup.log)}):",
          flush=True)
    sys.stdout.write(setup.log.read_text(errors="replace") if setup.log is not None and setup.log.exists() else "")
    sys.stdout.flush()


def _start_compose(compose: Pass, setup: Pass | None) -> None:
    """The compose pass on its xdist workers only when the set-up ahead has the engine and images ready;
    else in one process, whose own set-up builds (or reports) what is missing once."""
    if compose.spread and setup is not None and _setup_state(setup) == "ready":
        compose.argv = [*compose.argv[:3], *compose.spread, *compose.argv[3:]]
    start(compose)


def _release(setup: Pass | None) -> None:
    """SIGINT to the set-up ahead itself (not its group: the engine it started is stopped by its pid), then wait."""
    if setup is None or setup.process is None:
        return
    if setup.process.poll() is None:
        setup.process.send_signal(signal.SIGINT)
    setup.process.wait()


def _die_with_parent() -> None:
    """In the child before exec: SIGINT when the runner dies, so a pass never outlives it."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGINT)


def start(run: Pass) -> None:
    env = {**os.environ, **({PORT_RANGE_ENV: run.port_range} if run.port_range is not None else {}),
           **({SCENARIOS_DONE_ENV: str(run.scenarios_done)} if run.scenarios_done is not None else {})}
    if run.scenarios_done is not None:
        run.scenarios_done.unlink(missing_ok=True)  # an earlier run's must not count
    out = None
    if run.log is not None:
        run.log.parent.mkdir(parents=True, exist_ok=True)
        out = run.log.open("w")
    # Its own process group: a terminal's Ctrl-C reaches the runner, which passes it on to both, once.
    run.process = subprocess.Popen(run.argv, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT if out else None,
                                   start_new_session=True, preexec_fn=_die_with_parent)
    if out is not None:
        out.close()
    run.started = time.monotonic()


def _ended(run: Pass) -> bool:
    """Whether the pass has ended; its time is taken the first time this sees it so."""
    if run.process is None or run.process.poll() is None:
        return False
    if not run.took:
        run.took = time.monotonic() - run.started
    return True


def finish(run: Pass, *others: Pass, tick: Callable[[], None] = lambda: None) -> int:
    """Wait for ``run`` to end, noting meanwhile when each of ``others`` ends (each pass's own time), and
    calling ``tick`` about twice a second."""
    assert run.process is not None
    while not _ended(run):
        for other in others:
            _ended(other)
        tick()
        try:
            run.process.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            pass
    return run.process.returncode


def _interrupt(running: list[Pass]) -> None:
    for run in running:
        if run.process is not None and run.process.poll() is None:
            os.killpg(run.process.pid, signal.SIGINT)


def _shown(path: Path | None) -> str:
    return str(path.relative_to(REPO)) if path is not None and path.is_relative_to(REPO) else str(path)


def _show_log(run: Pass) -> None:
    assert run.log is not None
    print(f"\n===== the {run.name} pass ({_shown(run.log)}) =====", flush=True)
    sys.stdout.write(run.log.read_text(errors="replace"))
    sys.stdout.flush()


def cpu_ticks(stat: str | None = None) -> tuple[int, int]:
    """The machine's (busy, total) CPU ticks so far, every process counted (containers too): /proc/stat."""
    text = stat if stat is not None else Path("/proc/stat").read_text()
    fields = [int(x) for x in text.splitlines()[0].split()[1:9]]  # user nice system idle iowait irq softirq steal
    return sum(fields) - fields[3] - fields[4], sum(fields)


def cores_busy(before: tuple[int, int], after: tuple[int, int], cores: int) -> float:
    total = after[1] - before[1]
    return cores * (after[0] - before[0]) / total if total > 0 else 0.0


def run_passes(main_pass: Pass, compose: Pass, mode: str, setup: Pass | None = None) -> int:
    """``setup``: the compose set-up ahead, started beside the main pass, and released (it stops the engine it
    started) when the compose pass is done. ``after``: the compose pass starts once the main pass is done and
    the set-up is ready; ``tail``: once the set-up is ready and the main pass has written its ``scenarios_done``
    (without a set-up ahead, once that file is there); ``alongside``: as soon as the set-up is ready (without one,
    at once)."""
    running = [main_pass] + ([compose] if mode != "skip" else [])
    setup = setup if mode != "skip" else None
    caught: list[int] = []
    ticks = cpu_ticks()

    def interrupt(signum: int, _frame: object) -> None:
        caught.append(signum)
        _interrupt(running)

    def scenarios_running() -> bool:
        return mode == "tail" and not (main_pass.scenarios_done is not None and main_pass.scenarios_done.exists())

    def start_alongside() -> None:
        if (compose.process is not None or caught or (setup is not None and _setup_state(setup) is None)
                or scenarios_running()):
            return
        if setup is not None:
            _time_setup(setup)
        _start_compose(compose, setup)
        since = (f"the main pass's scenario files are done ({time.monotonic() - main_pass.started:.0f} s in): "
                 if mode == "tail" else "") + "the compose pass runs alongside"
        print(f"suite: {since} from now on ({' '.join(compose.spread) or 'one process'}, ports {compose.port_range}; "
              f"log {_shown(compose.log)}, shown when it ends)", flush=True)

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        if setup is not None:
            if setup.ready is not None:
                setup.ready.unlink(missing_ok=True)
            start(setup)
            print(f"suite: the compose pass's set-up runs ahead, beside the main pass, at nice 19 (log "
                  f"{_shown(setup.log)})", flush=True)
        if mode == "alongside":
            start_alongside()
        start(main_pass)
        codes = {"main": finish(main_pass, compose, *([setup] if setup is not None else []),
                                tick=start_alongside if mode in BESIDE else lambda: None)}
        if setup is not None and compose.process is None and not caught:
            _await_setup(setup, caught)
            _time_setup(setup)
        if setup is not None and setup.took:
            _show_setup(setup)
        if compose.process is None and mode != "skip" and not caught:
            print(f"suite: main pass done; the compose pass runs now ({' '.join(compose.spread) or 'one process'})",
                  flush=True)
            _start_compose(compose, setup)
        if compose.process is not None:
            if compose.log is not None and compose.process.poll() is None:
                print(f"suite: main pass done; waiting for the compose pass (log {_shown(compose.log)})", flush=True)
            codes["compose"] = finish(compose)
            if compose.log is not None:
                _show_log(compose)
    finally:
        _interrupt(running)  # an exception here must not leave a pass behind
        for run in running:
            if run.process is not None:
                run.process.wait()  # its teardown used the engine: release it only after
        _release(setup)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    summary = ", ".join(f"{run.name} pass exit {codes[run.name]} in {run.took:.0f} s" for run in running
                        if run.name in codes)
    print(f"suite: {summary}", flush=True)
    if setup is not None and setup.took:
        print(f"suite: the compose set-up ahead was done {setup.took:.0f} s after it started, beside the main pass",
              flush=True)
    cores = os.cpu_count() or 1
    print(f"suite: {cores_busy(ticks, cpu_ticks(), cores):.2f} of {cores} cores busy over the passes (every process "
          "on the machine, containers included; /proc/stat)", flush=True)
    if caught:  # the shell's convention, as chaos/interrupt.py: 130 for SIGINT, 143 for SIGTERM
        return 128 + caught[0]
    return next((code for code in codes.values() if code != 0), 0)


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    ours, pytest_args = argv, []
    if "--" in argv:  # everything after it is pytest's, for both passes (make test PYTEST_ARGS=...)
        at = argv.index("--")
        ours, pytest_args = argv[:at], argv[at + 1:]
    p = argparse.ArgumentParser(prog="suite_passes.py", description="make test's main and compose passes")
    p.add_argument("--workers", type=int, default=3, help="pytest-xdist workers of the main pass (0: one process)")
    p.add_argument("--compose", choices=MODES, default="tail",
                   help="when the compose pass runs: after the main pass, beside its tail once its "
                        "scenario files are done (default), alongside it from its set-up's end, or not at all")
    p.add_argument("--compose-workers", type=int, default=COMPOSE_WORKERS,
                   help=f"pytest-xdist workers of the compose pass once its set-up ahead is ready (default "
                        f"{COMPOSE_WORKERS}; 1: one process)")
    args = p.parse_args(ours)
    if args.workers < 0:
        p.error(f"--workers must be 0 or more, not {args.workers}")
    if args.compose_workers < 1:
        p.error(f"--compose-workers must be 1 or more, not {args.compose_workers}")
    return args, pytest_args


def main(argv: list[str] | None = None) -> int:
    args, pytest_args = parse(sys.argv[1:] if argv is None else argv)
    main_pass, compose = passes(args.workers, pytest_args, compose_workers=args.compose_workers)
    if args.compose not in BESIDE:
        compose.log = None  # nothing to interleave with: the compose pass writes to the terminal, as the main one
    return run_passes(main_pass, compose, args.compose, setup_ahead() if args.compose != "skip" else None)


if __name__ == "__main__":
    sys.exit(main())
