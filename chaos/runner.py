"""One scenario, end to end: stack -> load + faults -> heal -> quiet -> final read -> analyze.

This is Jepsen's ``run!`` in miniature. The checkers only ever see the finished
history and the ledger snapshots on disk, so ``proctor check RUN_DIR`` reaches the
same verdict from the stored files.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import signal
import time
from contextlib import contextmanager
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterator

from chaos.analyze import analyze
from chaos.deployment import Deployment
from chaos.deployment.targets import DEFAULT_TARGET, build_deployment
from chaos.history import History
from chaos.interrupt import Interrupted, write_marker
from chaos.observe.monitor import admin_urls, require_samples, run_monitor
from chaos.nemesis import CompositeNemesis, FaultSpec, ProcessNemesis, ProviderNemesis, WorkerStates, run_schedule
from chaos.nemesis.ledger import LedgerNemesis
from chaos.nemesis.runner import check_nesting
from chaos.load.exam import WorkloadSpec, WorkloadStats, run_workload
import stack.config as stack_config
from stack.deploy.secrets import read_roster
from stack.paths import new_run_dir

__all__ = ["Scenario", "RunResult", "run_scenario", "new_run_dir"]

Progress = Callable[[str], None]

Background = Callable[[Deployment, History, asyncio.Event], Awaitable[dict[str, Any]]]
"""A generator that runs beside the load until ``stop`` is set (e.g. the TLS churn
generator); what it returns is stored under ``background`` in scenario.json."""


@dataclass
class Scenario:
    """What to run. ``faults(seed, scenario)`` builds the seeded fault schedule."""

    name: str
    description: str
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    web: int = 2
    merit_workers: int = 2  # redundant by default: a killed merit worker leaves the urgent lane served
    ai_workers: int = 1
    sms_workers: int = 1
    settings: dict[str, Any] = field(default_factory=dict)  # Settings overrides
    # Settings of single components on top (embedded only), e.g. {"web_1": {"valkey_fresh_connections": True}}
    component_settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    faults: Callable[[int, "Scenario"], list[FaultSpec]] = lambda seed, scenario: []
    options: dict[str, Any] = field(default_factory=dict)  # checker options (docs/checkers.md)
    prepare: Callable[[Deployment], None] | None = None  # e.g. set provider faults
    links: tuple[str, ...] = ()  # network links put behind the fault proxy (docs/architecture.md)
    valkey_maxclients: int | None = None
    valkey: str = "single"  # "sentinel": primary + replica + 3 Sentinels (StackSpec.valkey)
    valkey_maxmemory: str | None = None  # StackSpec.maxmemory (None: its default), small for memory pressure
    valkey_min_replicas: int = 0  # StackSpec.valkey_min_replicas: a Sentinel primary refuses writes without them
    background: dict[str, Background] = field(default_factory=dict)
    # Bounds derived at analysis time from what the run measured (chaos/bounds.py:
    # "outcome_deadline_seconds", "slo.merit.oldest_age"); stored in scenario.json.
    derive_bounds: tuple[str, ...] = ()
    # SMS egress from a reserved address (docs/egress.md): the deployment's failover policy,
    # "move" or "without_address" (negative control); None = off.
    sms_egress: str | None = None
    # Log shipping (docs/log-shipping.md): the shipper's policy, "redact" or a negative control
    # ("unredacted", "uncounted"); None = off.
    log_shipping: str | None = None
    expect_valid: bool = True  # False for a negative control: the checkers must catch it
    # Further top-level scenario.json keys a checker reads (e.g. "lane_isolation",
    # chaos/checkers/isolation.py); never one of the keys the runner writes itself.
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunResult:
    run_dir: Path
    verdict: dict[str, Any]
    valid: Any  # True | False | "unknown"
    workload: dict[str, Any]
    recovery_seconds: float
    reproduce: str

    @property
    def exit_code(self) -> int:
        return {True: 0, False: 1}.get(self.valid, 2)


def reproduce_command(scenario: Scenario, seed: int, time_scale: float, target: str = DEFAULT_TARGET) -> str:
    target_args = [] if target == DEFAULT_TARGET else ["--target", target]
    return shlex.join(["proctor", "run", scenario.name, "--seed", str(seed), "--time-scale", str(time_scale),
                       *target_args])


def run_scenario(
    scenario: Scenario,
    seed: int,
    time_scale: float | None = None,
    run_dir: Path | None = None,
    progress: Progress = lambda _msg: None,
    keep_stack: bool = False,
    target: str = DEFAULT_TARGET,
    plots: bool = True,
) -> RunResult:
    """Run one scenario and judge it; ``plots=False`` leaves the PNG plots undrawn (the pytest
    plugin draws them for a failed test only: docs/harness.md)."""
    settings = dict(scenario.settings)
    if time_scale is not None:
        settings["time_scale"] = time_scale
    run_dir = run_dir or new_run_dir(f"{scenario.name}-seed{seed}")
    deployment = build_deployment(target, scenario, settings, run_dir)
    phase = ["start-up"]  # what the run was doing, for the interrupted marker

    def step(message: str) -> None:
        if message.startswith("load:"):
            phase[0] = "load and faults"
        elif message.startswith("final read"):
            phase[0] = "final read"
        progress(message)

    progress(f"starting the {target} stack in {run_dir}")
    try:
        deployment.start()
        result = _run_on_stack(deployment, scenario, seed, step, target)
    except Interrupted as stop:
        # The faults were healed by _run_on_stack's finally; the stack stops below. The report
        # is written as for any run, and says the run was cut (chaos/analyze.py).
        write_marker(run_dir, stop.signum, phase[0])
        deployment.stop()  # even with --keep-stack: an interrupted run leaves nothing running
        progress(f"interrupted by {stop.signal_name} during {phase[0]}: stack stopped; writing the report")
        analyze(run_dir, plots=plots)
        raise
    except BaseException:
        _stop_or_keep(deployment, keep_stack, target, run_dir, progress)
        raise
    _stop_or_keep(deployment, keep_stack, target, run_dir, progress)
    progress("analyzing")
    verdict = analyze(run_dir, plots=plots)
    result.verdict = verdict
    result.valid = verdict.get("valid")
    return result


def _stop_or_keep(deployment: Deployment, keep_stack: bool, target: str, run_dir: Path, progress: Progress) -> None:
    if keep_stack:
        deployment.detach()  # the watchdog would otherwise stop it when this process exits
        stop = deployment.down_command() if target == "compose" else f"proctor down {run_dir}"
        progress(f"--keep-stack: stack left running; stop it with `{stop}`")
    else:
        deployment.stop()


def _run_on_stack(stack: Deployment, scenario: Scenario, seed: int, progress: Progress, target: str) -> RunResult:
    run_dir = stack.run_dir
    time_scale = stack.settings.time_scale
    faults = scenario.faults(seed, scenario)
    check_nesting(faults)  # before the load: a schedule that could never play is the scenario's error
    reproduce = reproduce_command(scenario, seed, time_scale, target)
    meta = {**_scenario_meta(scenario, seed, stack, faults, reproduce), "target": target}
    _write_json(run_dir / "scenario.json", meta)
    if scenario.prepare:
        scenario.prepare(stack)
    history = History(run_dir / "history.jsonl")
    meta["history_origin"] = history.origin_wall  # ledger times (epoch) -> run time, chaos/plots/ai_lane.py
    _write_json(run_dir / "scenario.json", meta)
    nemesis = _nemesis_for(stack, scenario)
    try:
        progress(f"load: {scenario.workload.arrival_rate}/s students for {scenario.workload.duration}s, "
                 f"{len(faults)} faults (seed {seed})")
        caught: list[int] = []
        stats = asyncio.run(_load_and_faults(stack, scenario, seed, faults, history, nemesis, progress, caught))
        if caught:  # raised here, outside the event loop: inside it, asyncio would report the task's exception
            raise Interrupted(caught[0])
    finally:
        nemesis.heal()  # always, even when the load or a fault raised
        progress("healed")
    progress("final read: waiting for every outcome to settle")
    final = stack.export(run_dir, frozenset(scenario.options.get("allow_pending", [])))
    progress(final.summary())
    history.close()
    meta.update(ended_at=time.time(), workload_stats=stats.as_dict(), recovery_seconds=round(final.waited, 3),
                settled=final.settled, settle_wait=final.settle, ledger_counts=final.counts, background=stats.background)
    _write_json(run_dir / "scenario.json", meta)
    return RunResult(run_dir, {}, None, stats.as_dict(), final.waited, reproduce)


def _nemesis_for(stack: Deployment, scenario: Scenario) -> CompositeNemesis:
    """Every nemesis a scheduled fault may name: processes (kill, pause, restart, scale), the fake
    providers' knobs (``provider``: targets are the deployment's URL names, e.g. ``ai_provider``)
    the ledger's write lock (``ledger_lock``) and, with links behind the fault proxy, the network (``toxic``)."""
    worker_states = WorkerStates.of(stack)
    members: list[Any] = [ProcessNemesis(stack, worker_states=worker_states),
                          ProviderNemesis(stack.urls, stack.settings.admin_token),
                          LedgerNemesis(stack)]  # connects only when a ledger_lock fault starts
    if scenario.valkey == "sentinel":
        from chaos.nemesis.failover import FailoverNemesis

        members.append(FailoverNemesis(stack, worker_states=worker_states))
    if scenario.sms_egress is not None:
        from chaos.nemesis.host import HostNemesis

        members.append(HostNemesis(stack))
    if scenario.links:
        from chaos.nemesis.network import NetworkNemesis

        members.append(NetworkNemesis(stack))
    return CompositeNemesis(*members)


async def _load_and_faults(
    stack: Deployment, scenario: Scenario, seed: int, faults: list[FaultSpec], history: History,
    nemesis: CompositeNemesis, progress: Progress, caught: list[int],
) -> WorkloadStats | None:
    """The load and the fault schedule; None when SIGINT/SIGTERM cut it (the signal is put in ``caught``)."""
    with _signals_cancel(asyncio.current_task(), caught):
        try:
            return await _load_and_faults_body(stack, scenario, seed, faults, history, nemesis, progress)
        except asyncio.CancelledError:
            if not caught:
                raise
            return None


@contextmanager
def _signals_cancel(task: "asyncio.Task[Any] | None", caught: list[int]) -> Iterator[None]:
    """While the load runs, SIGINT/SIGTERM cancel it (every task unwinds through its finally);
    the Python handlers in place before come back afterwards."""
    loop = asyncio.get_running_loop()
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def on_signal(signum: int) -> None:
        if not caught:
            caught.append(signum)
            if task is not None:
                task.cancel()

    try:
        for sig in previous:
            loop.add_signal_handler(sig, on_signal, sig)
    except (RuntimeError, ValueError):  # not the main thread: no handler; the caller's stays
        yield
        return
    try:
        yield
    finally:
        for sig, handler in previous.items():
            loop.remove_signal_handler(sig)
            signal.signal(sig, handler)


async def _load_and_faults_body(
    stack: Deployment, scenario: Scenario, seed: int, faults: list[FaultSpec], history: History,
    nemesis: CompositeNemesis, progress: Progress,
) -> WorkloadStats:
    started = time.monotonic()
    stop_monitor = asyncio.Event()
    monitor = asyncio.create_task(run_monitor(lambda: admin_urls(stack.urls), history, 0.5, stop_monitor,
                                             stack.settings.admin_token))
    schedule = asyncio.create_task(run_schedule(nemesis, faults, history, started))
    counts: Counter = Counter()
    ticker = asyncio.create_task(_tick(counts, started, progress))
    stop_background = asyncio.Event()
    background = {name: asyncio.create_task(gen(stack, history, stop_background))
                  for name, gen in scenario.background.items()}
    try:
        roster = read_roster(stack.run_dir, scenario.workload.exam_code)
        stats = await run_workload(stack.urls["api"], history, scenario.workload, seed, counts, roster=roster)
        await schedule
        stop_background.set()
        for name, task in background.items():
            stats.background[name] = await task
    finally:
        for task in (schedule, ticker, *background.values()):
            task.cancel()
        stop_monitor.set()
        stop_background.set()
        await asyncio.gather(monitor, schedule, ticker, *background.values(), return_exceptions=True)
    require_samples(monitor.result(), admin_urls(stack.urls))
    return stats


async def _tick(counts: Counter, started: float, progress: Progress) -> None:
    """A progress line every two seconds: long runs must show they are alive."""
    while True:
        await asyncio.sleep(2.0)
        progress(f"t={time.monotonic() - started:5.1f}s ok={counts.get('ok', 0)} fail={counts.get('fail', 0)} "
                 f"info={counts.get('info', 0)}")


def _scenario_meta(
    scenario: Scenario, seed: int, stack: Deployment, faults: list[FaultSpec], reproduce: str
) -> dict[str, Any]:
    settings = stack.settings
    return {
        **scenario.extra,
        "name": scenario.name,
        "description": scenario.description,
        "seed": seed,
        "time_scale": settings.time_scale,
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(settings).items()
                     if k not in {"token_secret", "admin_token", "roster_key", "proxy_secret"}},
        # The seed's durations, for the report's case-vs-real table: `proctor check` imports no stack code.
        "case_constants": {name: getattr(stack_config, name) for name in stack_config.__all__ if name.startswith("CASE_")},
        "options": _deployment_options(scenario, stack),
        "derive_bounds": list(scenario.derive_bounds),
        "expect_valid": scenario.expect_valid,
        "workload": asdict(scenario.workload),
        "faults": [f.as_dict() for f in faults],
        "stack": {"web": scenario.web, "merit_workers": scenario.merit_workers,
                  "ai_workers": scenario.ai_workers, "sms_workers": scenario.sms_workers, "valkey": scenario.valkey},
        "started_at": time.time(),
        "reproduce": reproduce,
    }


def _deployment_options(scenario: Scenario, stack: Deployment) -> dict[str, Any]:
    """The scenario's checker options, with what only the deployment knows: the reserved SMS
    egress address is 127.0.0.10 embedded and a fixed IP of the egress network on compose."""
    egress = getattr(stack, "egress", None)
    reserved = (egress() if callable(egress) else {}).get("reserved")
    if "egress_address" in scenario.options and reserved:
        return {**scenario.options, "egress_address": reserved}
    return scenario.options


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, default=str))
