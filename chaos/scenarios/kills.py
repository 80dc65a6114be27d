"""Kill scenarios: workers SIGKILLed mid-job, the SMS lane killed after the gateway accepted,
web nodes frozen then killed, and their negative controls (reconciler off, no idempotency key,
write-behind acknowledgements, stalled lanes no kill explains)."""

from __future__ import annotations

from dataclasses import replace

from chaos.nemesis import FaultSpec, ProviderNemesis, periodic_schedule
from chaos.runner import Scenario
from chaos.load.exam import WorkloadSpec
from stack.config import WORKER_MODEL_DEFAULTS

__all__ = ["KILL_BOUNDS", "WEB_KILL_SCENARIOS", "WORKERS", "WORKER_KILL_SCENARIOS", "slow_ai_calls"]

WORKERS = ("worker_merit_1", "worker_sms_1", "worker_ai_1")


def _worker_kills(seed: int, scenario: Scenario) -> list[FaultSpec]:
    return periodic_schedule(
        seed, kind="kill", targets=WORKERS, load_seconds=scenario.workload.duration,
        mean_interval=1.5, duration=(0.5, 1.5), params={"wait_busy": 1.0},
    )


def _web_kills(seed: int, scenario: Scenario) -> list[FaultSpec]:
    """Freeze a web node for a second (requests pile up in flight), then SIGKILL it. One node down at a
    time: a node a slow machine is still restarting is not joined by the other (the schedule's
    spacing assumes restarts take no time; a container restart took 6 s on a loaded machine)."""
    return periodic_schedule(
        seed, kind="kill", targets=("web_1", "web_2"), load_seconds=scenario.workload.duration,
        mean_interval=4.0, duration=(1.5, 3.0), first_at=2.0, params={"freeze_first": 1.0}, exclusive="web pool",
    )


AIM_FLOOR_SECONDS = 5.0


def aim_seconds(scenario: Scenario, at: float) -> float:
    """How long a strike at ``at`` waits for its moment (a busy worker, a held answer): as long as
    the load still starts exams, and at least ``AIM_FLOOR_SECONDS``. A fixed 5 s was missed on a
    loaded machine: the first narrative of a ``valkey_failover`` run came 6.5 s after its failover
    began to wait, so it struck without a held answer and proved nothing (6 December 2026)."""
    return max(AIM_FLOOR_SECONDS, scenario.workload.duration - at)


def _one_busy_kill(target: str, **params: object):
    def schedule(seed: int, scenario: Scenario) -> list[FaultSpec]:
        return [FaultSpec(at=2.0, kind="kill", target=target, duration=1.0,
                          params={"wait_busy": aim_seconds(scenario, 2.0), **params})]
    return schedule


def _provider_faults(provider: str, knobs: dict[str, float]):  # a Scenario.prepare
    """Set a fake provider's fault knobs before the load, for the whole run: the provider
    nemesis's own start (merged into the current knobs through the loopback admin API), never ended."""

    def prepare(stack) -> None:  # chaos.deployment.Deployment
        nemesis = ProviderNemesis(stack.urls, stack.settings.admin_token)
        nemesis.start(FaultSpec(at=0.0, kind="provider", target=provider, duration=0.0, params=knobs))

    return prepare


_delay_sms_after_effect = _provider_faults("sms_gateway", {"delay_after_effect_seconds": 1.5})
"""The gateway records the SMS, then answers late: a kill then hides a completed send."""

slow_ai_calls = _provider_faults("ai_provider", {"latency_seconds": 0.5})
"""Each AI call waits 0.5 s at the provider before its work, so a busy AI worker's horse is still
running when the kill lands. Without it a 0.1 s call often ended between the nemesis seeing
the horse and the kill: on compose the kill itself takes about 0.4 s (the engine's kill),
and the control was then missed (the CI rehearsal of 30 November: a mid-job kill of a worker
whose tree was down to 1 pid at the kill, nothing lost, reported valid)."""


def _kill_ai_after_effect(seed: int, scenario: Scenario) -> list[FaultSpec]:
    """The AI provider records each narrative and answers 1.5 s late, for a window around the
    kill only (the jobs after it run at full speed, so the stuck job is seen sooner). The kill
    waits until the provider holds a new narrative's answer (its answer hold, armed by the kill
    and let go once the signal left: chaos/nemesis/provider.py ``answer_held``), not for a 2-pid
    tree: a horse seen alive can already be past its commit (a CI run of 2 December killed a
    2-pid tree on compose after the job had committed, so nothing was lost and the control read
    valid)."""
    late = FaultSpec(at=1.0, kind="provider", target="ai_provider", duration=7.0,
                     params={"delay_after_effect_seconds": 1.5})
    return [late, *_one_busy_kill("worker_ai_1", after_effect_at="ai_provider")(seed, scenario)]


def _sms_kill_after_accept(name: str, idempotency: bool) -> Scenario:
    """Kill the SMS worker after the gateway recorded the send but before it answered.

    With the Idempotency-Key the re-run is a replay; without it (the negative
    control) the re-run is a second SMS, which the effects checker must report.
    """
    what = "exactly one SMS" if idempotency else "negative control: must show up as a duplicate SMS"
    return Scenario(
        name=name,
        description=f"SMS worker killed after the gateway accepted, Idempotency-Key {'on' if idempotency else 'off'}: {what}",
        workload=WorkloadSpec(arrival_rate=1.0, duration=4.0, questions=2, poll_deadline=10.0),
        settings={} if idempotency else {"sms_idempotency": False},
        faults=_one_busy_kill("worker_sms_1", after_effect_at="sms_gateway"),
        prepare=_delay_sms_after_effect,
        options=_WORKER_KILL_OPTIONS,
        expect_valid=idempotency,
    )


KILL_BOUNDS = ("outcome_deadline_seconds", "slo.merit.oldest_age")
"""Derived per run from the measured kills, restarts and job service times (chaos/bounds.py)."""

_WORKER_KILL_OPTIONS = {
    "expect_ops": ["session", "start", "answer", "finish", "merit_card"],
    # A product promise, fixed: acceptance writes only the ledger, so killing workers must not
    # slow it down (measured p99 ~0.05 s). The merit lane's oldest job and the outcome deadline
    # follow from the kills and are derived per run (KILL_BOUNDS).
    "slo": {"answer": {"p99": 1.0}},
}

_WORKER_KILL = Scenario(
    name="worker_kill",
    description="SIGKILL the merit, sms and ai workers' process groups mid-job on a seeded schedule",
    workload=WorkloadSpec(arrival_rate=3.0, duration=10.0, questions=4),
    faults=_worker_kills,
    options=_WORKER_KILL_OPTIONS,
    derive_bounds=KILL_BOUNDS,
)

def _stalls(seed: int, scenario: Scenario) -> list[FaultSpec]:
    """Both merit workers frozen (alive, ready, serving nobody), later the relay frozen:
    stalls no kill explains, so the derived bounds must not excuse them. Each merit worker is
    frozen between jobs: a horse frozen mid-job holds the ledger's write lock, which stalls the
    answers too and leaves the merit queue empty (no attempt finishes), so the lane's own stall
    would go unseen."""
    merit = [FaultSpec(at=2.0, kind="pause", target=f"worker_merit_{i}", duration=4.0,
                       params={"wait_idle": 1.0}) for i in (1, 2)]
    return merit + [FaultSpec(at=7.5, kind="pause", target="relay", duration=4.0)]


_LANES_STALLED = Scenario(
    name="lanes_stalled",
    description="negative control: both merit workers frozen 4 s, then the relay frozen 4 s, no kill: "
                "the merit lane's oldest job and the outcome deadline must exceed their derived bounds",
    workload=WorkloadSpec(arrival_rate=3.0, duration=12.0, questions=3),
    faults=_stalls,
    options=_WORKER_KILL_OPTIONS,
    derive_bounds=KILL_BOUNDS,
    expect_valid=False,
)


WORKER_KILL_SCENARIOS: tuple[Scenario, ...] = (
    _WORKER_KILL,
    _LANES_STALLED,
    Scenario(
        name="worker_kill_no_reconciler",
        description="negative control: reconciler off; an AI job killed after the provider recorded its narrative, before it answered, must be reported lost",
        workload=WorkloadSpec(arrival_rate=2.0, duration=5.0, questions=2),
        # The AI lane forks here (the default is in-process since 7 December 2026), so the
        # control keeps proving the horse's case: the tree read before the kill holds the horse.
        settings={"reconciler_enabled": False, "worker_models": {**WORKER_MODEL_DEFAULTS, "ai": "fork"}},
        faults=_kill_ai_after_effect,
        options=_WORKER_KILL_OPTIONS,
        expect_valid=False,
    ),
    _sms_kill_after_accept("sms_no_idempotency", idempotency=False),
    _sms_kill_after_accept("sms_kill_after_accept", idempotency=True),
    replace(_WORKER_KILL, name="demo", workload=replace(_WORKER_KILL.workload, duration=8.0),
            description="make demo: a short exam on 2 web nodes while merit, sms and ai workers are killed"),
)

WEB_KILL_SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        name="web_node_kill_write_behind",
        description="negative control: web nodes acknowledge answers 1 s before committing them; "
                    "acknowledged answers die with a killed node or lose the race with finish, "
                    "and the answers checker must report them lost",
        workload=WorkloadSpec(arrival_rate=4.0, duration=6.0, questions=5),
        settings={"answer_write_behind": 1.0},
        faults=_web_kills,
        options={"expect_ops": ["session", "start", "answer", "finish"]},
        expect_valid=False,
    ),
    Scenario(
        name="web_node_kill",
        description="SIGKILL a web node mid-load; acknowledged answers are kept, none duplicated",
        workload=WorkloadSpec(arrival_rate=4.0, duration=10.0, questions=5),
        faults=_web_kills,
        # A frozen node holds its requests for a second before the kill and the client's
        # retry: answers must still be accepted within the client's patience (p99 measured ~0.2 s).
        options={"expect_ops": ["session", "start", "answer", "finish"], "slo": {"answer": {"p99": 3.0}}},
    ),
)
