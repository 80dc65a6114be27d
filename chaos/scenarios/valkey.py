"""Valkey failover: the primary SIGKILLed mid-exam with a replica and three Sentinels
(``Scenario.valkey = "sentinel"``), and its negative control (the reconciler off).

The kill lands just after the AI provider recorded a narrative, while it holds the answer, so
the job in flight is certainly lost with the old primary (its next Valkey write falls in the
outage). What must hold: every acknowledged answer is in the
ledger (the answers never needed Valkey), every finished attempt's jobs complete (the
reconciler re-enqueues what the failover lost), no effect is duplicated, and every client
component reaches the new primary (the fault-end lists any that never did). The verdict's
bounds are derived from the measured switch (chaos/bounds.py, failover windows).

``tls_churn_sentinel`` is tls_churn on the Sentinel topology: its toxics sit on the node links,
the proxies in front of each node whose addresses the nodes announce."""

from __future__ import annotations

from dataclasses import replace

from chaos.load.exam import WorkloadSpec
from chaos.load.filler import FillerSpec, filler_generator
from chaos.nemesis import FaultSpec
from chaos.observe.valkey_stats import valkey_sampler
from chaos.runner import Scenario
from chaos.scenarios.kills import KILL_BOUNDS, aim_seconds, slow_ai_calls
from chaos.scenarios.tls import tls_churn_on
from stack.deploy.links import NODE_LINKS

__all__ = ["ANSWER_HELD_SECONDS", "FAILOVER_DOWN_SECONDS", "VALKEY_SCENARIOS"]

FAILOVER_DOWN_SECONDS = 8.0
"""How long the killed primary stays down: past the failover (measured ~2.5-3.3 s from the kill
to +switch-master with down-after 2 s), so the Sentinels, not a restart, end the outage."""


MEMORY_PRESSURE_MAXMEMORY = "24mb"
"""Small, so the filler reaches it in a second (about 90 writes of 256 KiB), bounded in bytes."""


def _memory_pressure_background() -> dict:
    """The filler, and the Valkey sampler that carries each component's OOM refusals, limiter
    fallbacks and failed relay passes (stack/connection_stats.py) into the connections checker."""
    return {"filler": filler_generator(FillerSpec(start_at=3.0, hold=4.0)), "valkey": valkey_sampler(0.5)}


ANSWER_HELD_SECONDS = 1.0
"""Around the kill, the AI provider answers this long after its answer hold lets a narrative's
answer go; the failover nemesis arms that hold, kills the primary once a new narrative's answer
is held, and lets it go once the kill has landed (``after_effect_at``, chaos/nemesis/provider.py
``answer_held``). The horse's next step, releasing its limiter slot in Valkey, then falls in the
outage, and so does its failure handling: the switch comes at least the Sentinels' down-after
(2 s) after the kill, about 1 s later than the answer. So the job in flight is certainly lost
with the old primary. Waiting only for a busy worker (a horse in its tree) missed that 1 time in
3 with two test workers on 2 cores: the horse was already past its last write, and the negative
control read valid (docs/valkey.md). Until the hold, this delay alone timed the answer, and a
kill slower than it (1.56 s on a slow CI machine) came after the answer."""


def _primary_kill(seed: int, scenario: Scenario) -> list[FaultSpec]:
    held = FaultSpec(at=2.0, kind="provider", target="ai_provider", duration=8.5,
                     params={"delay_after_effect_seconds": ANSWER_HELD_SECONDS})
    kill = FaultSpec(at=3.0, kind="failover", target="primary", duration=FAILOVER_DOWN_SECONDS,
                     params={"after_effect_at": "ai_provider", "wait_busy_worker": "worker_ai_1",
                             "wait_busy": aim_seconds(scenario, 3.0)})
    return [held, kill]


def _primary_cut(seed: int, scenario: Scenario) -> list[FaultSpec]:
    return [FaultSpec(at=3.0, kind="partition", target="primary", duration=FAILOVER_DOWN_SECONDS,
                      params={"wait_busy_worker": "worker_ai_1", "wait_busy": aim_seconds(scenario, 3.0)})]


_OPTIONS = {"expect_ops": ["session", "start", "answer", "finish", "merit_card"]}

_PARTITION = Scenario(
    name="valkey_partition",
    description="the Valkey primary cut off (everything it sends dropped, commands still arrive) via its node "
                "link, then healed: the Sentinels promote the replica, the old primary is demoted and loses "
                "what it applied alone; nothing acknowledged lost, nothing done twice",
    workload=WorkloadSpec(arrival_rate=2.0, duration=14.0, questions=3),
    valkey="sentinel",
    links=tuple(NODE_LINKS),
    prepare=slow_ai_calls,
    faults=_primary_cut,
    options=_OPTIONS,
    derive_bounds=KILL_BOUNDS,
)

VALKEY_SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        name="valkey_failover",
        description="Valkey primary SIGKILLed mid-exam (replica + 3 Sentinels, quorum 2): nothing acknowledged "
                    "lost, every finished attempt's jobs done, no effect twice, every client on the new primary",
        workload=WorkloadSpec(arrival_rate=2.0, duration=14.0, questions=3),
        valkey="sentinel",
        prepare=slow_ai_calls,
        faults=_primary_kill,
        options=_OPTIONS,
        derive_bounds=KILL_BOUNDS,
    ),
    Scenario(
        name="valkey_failover_no_reconciler",
        description="negative control: reconciler off; the job in flight when the primary died must be reported lost",
        workload=WorkloadSpec(arrival_rate=2.0, duration=10.0, questions=2),
        valkey="sentinel",
        settings={"reconciler_enabled": False},
        prepare=slow_ai_calls,
        faults=_primary_kill,
        options=_OPTIONS,
        expect_valid=False,
    ),
    _PARTITION,
    replace(_PARTITION, name="valkey_partition_min_replicas", valkey_min_replicas=1,
            description="valkey_partition with min-replicas-to-write 1 (max lag: the Sentinels' down-after) on both "
                        "nodes: what the write guard costs, and what it refuses (docs/valkey.md)"),
    Scenario(
        name="valkey_memory_pressure",
        description="a filler (its own ACL user and keys) fills Valkey to maxmemory under noeviction mid-exam, holds "
                    "it full 4 s, frees it: answers still accepted, nothing lost or done twice, no 5xx; OOM refusals, "
                    "limiter fallbacks and failed relay passes counted per component",
        workload=WorkloadSpec(arrival_rate=2.0, duration=12.0, questions=3),
        valkey_maxmemory=MEMORY_PRESSURE_MAXMEMORY,
        background=_memory_pressure_background(),
        options=_OPTIONS,
    ),
    Scenario(
        name="valkey_memory_pressure_early_mark",
        description="negative control: the relay marks a row enqueued before Valkey accepted its job (reconciler "
                    "off, the only other thing that would resend it); the job Valkey refused while full must be "
                    "reported stuck",
        workload=WorkloadSpec(arrival_rate=2.0, duration=10.0, questions=2),
        valkey_maxmemory=MEMORY_PRESSURE_MAXMEMORY,
        settings={"relay_mark_early": True, "reconciler_enabled": False},
        background=_memory_pressure_background(),
        options=_OPTIONS,
        expect_valid=False,
    ),
    tls_churn_on(
        "tls_churn_sentinel",
        "tls_churn with Sentinel: the toxics on the node links (the addresses the nodes announce, which the "
        "Sentinels hand every client) still reach the web nodes, relay and workers",
        tuple(NODE_LINKS), valkey="sentinel",
    ),
)
