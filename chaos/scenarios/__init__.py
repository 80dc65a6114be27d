"""The named scenarios: what `pytest chaos/` and `proctor run NAME` execute.

Each fault scenario has a negative control: the same faults against a stack with
one safeguard switched off, which the checkers must catch. A harness whose
checkers pass a broken stack proves nothing.
"""

from __future__ import annotations

import random
from dataclasses import replace

from chaos.scenarios.ai_lane import AI_LANE_SCENARIOS
from chaos.load.churn import ChurnSpec, churn_generator
from chaos.scenarios.isolation import ISOLATION_SCENARIOS
from chaos.nemesis import FaultSpec, ProviderNemesis, periodic_schedule
from chaos.runner import Scenario
from chaos.scenarios.scale import SCALE_SCENARIOS
from chaos.scenarios.revisions import REVISION_SCENARIOS
from chaos.observe.valkey_stats import valkey_sampler
from chaos.load.exam import WorkloadSpec
from stack.config import CASE_AI_CALL_SECONDS, Settings

__all__ = ["SCENARIOS", "get_scenario"]

WORKERS = ("worker_merit_1", "worker_sms_1", "worker_ai_1")


def _worker_kills(seed: int, scenario: Scenario) -> list[FaultSpec]:
    return periodic_schedule(
        seed, kind="kill", targets=WORKERS, load_seconds=scenario.workload.duration,
        mean_interval=1.5, duration=(0.5, 1.5), params={"wait_busy": 1.0},
    )


def _web_kills(seed: int, scenario: Scenario) -> list[FaultSpec]:
    """Freeze a web node for a second (requests pile up in flight), then SIGKILL it."""
    return periodic_schedule(
        seed, kind="kill", targets=("web_1", "web_2"), load_seconds=scenario.workload.duration,
        mean_interval=4.0, duration=(1.5, 3.0), first_at=2.0, params={"freeze_first": 1.0},
    )


def _one_busy_kill(target: str, **params: object):
    def schedule(seed: int, scenario: Scenario) -> list[FaultSpec]:
        return [FaultSpec(at=2.0, kind="kill", target=target, duration=1.0, params={"wait_busy": 5.0, **params})]
    return schedule


def _provider_faults(provider: str, knobs: dict[str, float]):  # noqa: ANN202 - a Scenario.prepare
    """Set a fake provider's fault knobs before the load, for the whole run: the provider
    nemesis's own start (merged into the current knobs through the loopback admin API), never ended."""

    def prepare(stack) -> None:  # noqa: ANN001 - chaos.deployment.Deployment
        nemesis = ProviderNemesis(stack.urls, stack.settings.admin_token)
        nemesis.start(FaultSpec(at=0.0, kind="provider", target=provider, duration=0.0, params=knobs))

    return prepare


_delay_sms_after_effect = _provider_faults("sms_gateway", {"delay_after_effect_seconds": 1.5})
"""The gateway records the SMS, then answers late: a kill then hides a completed send."""

_slow_ai_calls = _provider_faults("ai_provider", {"latency_seconds": 0.5})
"""Each AI call waits 0.5 s at the provider before its work, so a busy AI worker's horse is still
running when the kill lands. Without it a 0.1 s call often ended between the nemesis seeing
the horse and the kill: on compose the kill itself takes about 0.4 s (the engine's kill),
and the control was then missed (the CI rehearsal of 30 November: a mid-job kill of a worker
whose tree was down to 1 pid at the kill, nothing lost, reported valid)."""


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


VALKEY_LINKS = ("valkey_web", "valkey_workers", "valkey_relay")

TLS_TOXICS: dict[str, dict] = {
    # an RST on the next chunk: every client on the link reconnects (new TCP + TLS handshake)
    "reset_peer": {"type": "reset_peer", "stream": "downstream", "attributes": {"timeout": 0}},
    # replies vanish; after 500 ms of silence the proxy closes the connection
    "timeout": {"type": "timeout", "stream": "downstream", "attributes": {"timeout": 500}},
    # each connection may carry 2 KB more, then it is closed: new handshakes die part-way, repeatedly
    "limit_data": {"type": "limit_data", "stream": "downstream", "attributes": {"bytes": 2048}},
}


def _tls_toxics(seed: int, scenario: Scenario) -> list[FaultSpec]:
    """Every toxic type on every Valkey link at least once, in a seeded order, inside the load."""
    rng = random.Random(seed)
    plan = [(kind, link) for kind in TLS_TOXICS for link in VALKEY_LINKS]
    rng.shuffle(plan)
    faults, at, end = [], 1.0, scenario.workload.duration - 0.5
    for kind, link in plan:
        length = round(rng.uniform(0.6, 1.2), 3)
        if at + length > end:
            break
        faults.append(FaultSpec(at=round(at, 3), kind="toxic", target=link, duration=length,
                                params={**TLS_TOXICS[kind], "name": f"churn_{kind}"}))
        at += rng.uniform(0.6, 1.2)  # spread over the load; the runner never overlaps two on one link
    return faults


def _tls_background(churn: ChurnSpec) -> dict:
    return {"valkey": valkey_sampler(0.5), "churn": churn_generator(churn)}


FRESH_MAXCLIENTS = 12
FRESH_CHURN = ChurnSpec(rate=25.0, duration=8.0, max_ops=200, concurrency=4)

_TLS_OPTIONS = {
    "expect_ops": ["session", "start", "answer", "finish", "merit_card"],
    "max_rejected_connections": 0,
    # pooled clients open a handful per process even through the toxics (measured: at most 8);
    # one connection per call opens one per call (measured: 41-144 per process)
    "max_connects_per_process": 25,
}

WORKER_RESTART_SECONDS = 5.0
"""Allowance for a component to come back after a fault, for scenarios whose faults are not
process kills (tls_churn's toxics); kill scenarios derive their bounds from the measured
restarts instead (chaos/bounds.py)."""


def recovery_bound(settings: Settings, faults: list[FaultSpec]) -> float:
    """How long a finished attempt may wait for its outcomes when Valkey links are faulted.

    One outage is the longest fault plus a restart; the relay notices an orphaned job within
    a liveness TTL (also the grace for a job held between dequeue and start) plus a relay
    pass, and the slowest job is one AI call. Twice that covers back-to-back faults of one
    lane and the backlog an outage leaves behind.
    """
    longest_fault = max((f.duration for f in faults), default=0.0)
    outage = longest_fault + WORKER_RESTART_SECONDS
    detection = settings.liveness_ttl + 2 * settings.relay_interval
    return 2 * (outage + detection + settings.scaled(CASE_AI_CALL_SECONDS))


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
    stalls no kill explains, so the derived bounds must not excuse them."""
    merit = [FaultSpec(at=2.0, kind="pause", target=f"worker_merit_{i}", duration=4.0) for i in (1, 2)]
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

SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        _WORKER_KILL,
        _LANES_STALLED,
        Scenario(
            name="worker_kill_no_reconciler",
            description="negative control: reconciler off; an AI job killed mid-run must be reported lost",
            workload=WorkloadSpec(arrival_rate=2.0, duration=5.0, questions=2),
            settings={"reconciler_enabled": False},
            prepare=_slow_ai_calls,
            faults=_one_busy_kill("worker_ai_1"),
            options=_WORKER_KILL_OPTIONS,
            quiet_timeout=8.0,
            expect_valid=False,
        ),
        _sms_kill_after_accept("sms_no_idempotency", idempotency=False),
        _sms_kill_after_accept("sms_kill_after_accept", idempotency=True),
        replace(_WORKER_KILL, name="demo", workload=replace(_WORKER_KILL.workload, duration=8.0),
                description="make demo: a short exam on 2 web nodes while merit, sms and ai workers are killed"),
        Scenario(
            name="tls_churn",
            description="TLS Valkey: reset_peer / 500 ms timeout / limit_data toxics on the web, worker and relay "
                        "links force fresh handshakes while a generator opens a fresh TLS connection per op",
            workload=WorkloadSpec(arrival_rate=3.0, duration=12.0, questions=4),
            links=VALKEY_LINKS,
            faults=_tls_toxics,
            background=_tls_background(ChurnSpec(rate=25.0, duration=14.0, max_ops=350, concurrency=8)),
            options=_TLS_OPTIONS,
            outcome_bound=recovery_bound,
        ),
        Scenario(
            name="tls_churn_fresh_connections",
            description="negative control: a fresh TLS connection per Valkey call (PROCTOR_VALKEY_FRESH_CONNECTIONS) "
                        "plus the churn generator against maxclients 12: connections rejected, components see errors, one process opens dozens",
            workload=WorkloadSpec(arrival_rate=3.0, duration=6.0, questions=3, poll_deadline=4.0),
            settings={"valkey_fresh_connections": True},
            valkey_maxclients=FRESH_MAXCLIENTS,
            background=_tls_background(FRESH_CHURN),
            options={**_TLS_OPTIONS, "max_component_connection_errors": 0},
            quiet_timeout=5.0,
            expect_valid=False,
        ),
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
        *SCALE_SCENARIOS,
        *ISOLATION_SCENARIOS,
        *REVISION_SCENARIOS,
        *AI_LANE_SCENARIOS,  # issue #11: the AI lane's failure table (chaos/scenarios/ai_lane.py)
    )
}


def get_scenario(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise KeyError(f"unknown scenario {name!r}; known: {', '.join(sorted(SCENARIOS))}") from None
