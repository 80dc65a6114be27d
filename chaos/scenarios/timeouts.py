"""The seed's connection timeouts (issue #25 item 4): a Valkey link slow to accept, one web node
opening a fresh TLS connection per call, the other pooling, both behind that link in one run.

The seed's first symptom was "2,854 connection timeouts" during a load test, put down to fresh
TLS connections to a managed Valkey. ``slow_open`` (our fault proxy's toxic, docs/faultproxy.md)
holds what a new connection sends first (its TLS ClientHello) for a delay drawn per connection
around the clients' connect timeout, so some handshakes run out of it; an established connection
is not slowed. A pool pays that at most once per connection it opens; a connection per call pays
it on every call. Toxiproxy's ``latency`` cannot make that difference: it slows every command,
pooled or not (measured in docs/valkey.md "Connection timeouts").
"""

from __future__ import annotations

from chaos.load.exam import WorkloadSpec
from chaos.nemesis import FaultSpec
from chaos.observe.valkey_stats import valkey_sampler
from chaos.runner import Scenario

__all__ = ["CONNECT_TIMEOUT", "CONNECT_TIMEOUT_SCENARIOS", "FRESH_NODE", "POOLED_NODE", "WARM_UP", "slow_open_fault"]

CONNECT_TIMEOUT = 0.5
"""``valkey_connect_timeout`` (real seconds) of every component in these runs. Shorter than the
stack's default 2 s so that a handshake slow enough to miss it still leaves the fresh node
serving; the toxic's delay is derived from it (``slow_open_fault``)."""
FRESH_NODE, POOLED_NODE = "web_1", "web_2"
LINK = "valkey_web"
DELAY_SHARE, JITTER_SHARE = 0.9, 0.5
"""The handshake delay is (0.9 +- 0.5) x the connect timeout, uniform per connection: 40 % of new
connections miss the timeout ((0.9 + 0.5 - 1) / (2 x 0.5)), so a pool's retries still open its
connections, while each fresh call has that chance to time out."""
WORKLOAD = WorkloadSpec(arrival_rate=6.0, duration=24.0, questions=1, poll_interval=0.5)
"""Many short exams: what the fresh node's timeouts grow with is its Valkey calls under the fault,
and a request's limiter call stops for 2 s after each failure (stack/web/ratelimit.py), so the
calls that keep coming are the enqueues after each finish. Measured with 4 students/s, 4
questions, 12 s: the fresh node 9-20 timeouts, the pooled one 0-8 (its pool still growing under
a CPU hog), too close to the 10x rule. The fresh node's timeouts grow with the fault's length,
the pool's only with its growth, which slows as it nears the load's peak concurrency: so the
fault lasts 16 s (it lasted 10 s until CI, 6 December 2026, counted fresh 28 against pooled 3 on
a slow machine, one short of the 30 needed)."""
WARM_UP = 8.0
"""Seconds of load before the link turns slow: a pool grows to what the load needs first, as a
production pool has long before a load test (measured: with the toxic from the first second,
the pooled node opened 7 connections under it and 4 attempts timed out; with 3 s of 12, under a
CPU hog, 8 of 8)."""


def slow_open_fault(seed: int, scenario: Scenario) -> list[FaultSpec]:
    """``slow_open`` on the web nodes' Valkey link from ``WARM_UP`` to the end of the load, its
    delay derived from the scenario's connect timeout (the fault log shows the attributes applied)."""
    timeout_ms = scenario.settings["valkey_connect_timeout"] * 1000
    attributes = {"delay": round(DELAY_SHARE * timeout_ms), "jitter": round(JITTER_SHARE * timeout_ms)}
    return [FaultSpec(at=WARM_UP, kind="toxic", target=LINK, duration=scenario.workload.duration - WARM_UP,
                      params={"type": "slow_open", "stream": "upstream", "name": "slow_handshake",
                              "attributes": attributes})]


_OPTIONS = {
    "expect_ops": ["session", "start", "answer", "finish", "merit_card"],
    "fresh_components": [FRESH_NODE],
    "pooled_components": [POOLED_NODE],
    "min_fresh_timeout_ratio": 10,  # the "at least 10x fewer" for pooled clients
}


def _scenario(name: str, description: str, fresh_nodes: tuple[str, ...], expect_valid: bool) -> Scenario:
    return Scenario(
        name=name,
        description=description,
        workload=WORKLOAD,
        links=(LINK,),
        settings={"valkey_connect_timeout": CONNECT_TIMEOUT},
        component_settings={node: {"valkey_fresh_connections": True} for node in fresh_nodes},
        faults=slow_open_fault,
        background={"valkey": valkey_sampler(0.5)},
        options=_OPTIONS,
        expect_valid=expect_valid,
    )


CONNECT_TIMEOUT_SCENARIOS: tuple[Scenario, ...] = (
    _scenario("valkey_connect_timeouts",
              f"slow_open on the web nodes' Valkey link: {FRESH_NODE} opens a fresh TLS connection per call and "
              f"counts connection timeouts, {POOLED_NODE} pools and may time out at most once per connection, "
              "at least 10x fewer", (FRESH_NODE,), True),
    _scenario("valkey_connect_timeouts_all_fresh",
              f"negative control: {POOLED_NODE} opens a fresh connection per call too; its timeouts are then "
              "of the fresh node's order and the 10x rule fails", (FRESH_NODE, POOLED_NODE), False),
)
