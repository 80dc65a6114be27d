"""TLS churn against Valkey: toxics on every Valkey link force fresh handshakes while a
generator opens a fresh TLS connection per operation, and the negative control (a fresh
connection per call against a small maxclients)."""

from __future__ import annotations

import random

from chaos.bounds import DEADLINE
from chaos.load.churn import ChurnSpec, churn_generator
from chaos.load.exam import WorkloadSpec
from chaos.nemesis import FaultSpec
from chaos.observe.valkey_stats import valkey_sampler
from chaos.runner import Scenario

__all__ = ["FRESH_CHURN", "FRESH_MAXCLIENTS", "TLS_SCENARIOS", "TLS_TOXICS", "VALKEY_LINKS", "tls_churn_on"]

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
    """Every toxic type on every Valkey link of the scenario at least once, in a seeded order, inside the load."""
    rng = random.Random(seed)
    plan = [(kind, link) for kind in TLS_TOXICS for link in scenario.links if link.startswith("valkey_")]
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

def tls_churn_on(name: str, description: str, links: tuple[str, ...], valkey: str = "single") -> Scenario:
    """The TLS churn scenario on the given Valkey links (and topology)."""
    return Scenario(
        name=name,
        description=description,
        workload=WorkloadSpec(arrival_rate=3.0, duration=12.0, questions=4),
        links=links,
        valkey=valkey,
        faults=_tls_toxics,
        background=_tls_background(ChurnSpec(rate=25.0, duration=14.0, max_ops=350, concurrency=8)),
        options=_TLS_OPTIONS,
        # derived from this run (chaos/bounds.py): the toxics on the job path as link windows,
        # crash restarts they caused, each lane's measured service time and backlog
        derive_bounds=(DEADLINE,),
    )


TLS_SCENARIOS: tuple[Scenario, ...] = (
    tls_churn_on(
        "tls_churn",
        "TLS Valkey: reset_peer / 500 ms timeout / limit_data toxics on the web, worker and relay "
        "links force fresh handshakes while a generator opens a fresh TLS connection per op",
        VALKEY_LINKS,
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
        expect_valid=False,
    ),
)
