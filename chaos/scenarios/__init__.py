"""The named scenarios: what `pytest chaos/` and `proctor run NAME` execute, one module per family:
``kills`` (workers and web nodes killed), ``tls`` (TLS churn against Valkey), ``scale`` (scale-in),
``timeouts`` (the seed's Valkey connection timeouts), ``isolation`` (lane isolation under an AI backlog), ``revisions`` (answer revisions), ``ai_lane``
(the AI lane's failure table), ``valkey`` (Valkey failover with Sentinel),
``egress`` (the SMS worker's host lost, its reserved address moved), ``logship`` (the log store down),
``ledger`` (the ledger's write lock held while a web node is killed).

Each fault scenario has a negative control: the same faults against a stack with
one safeguard switched off, which the checkers must catch. A harness whose
checkers pass a broken stack proves nothing.
"""

from __future__ import annotations

from chaos.runner import Scenario
from chaos.scenarios.ai_lane import AI_LANE_SCENARIOS
from chaos.scenarios.egress import EGRESS_SCENARIOS
from chaos.scenarios.logship import LOGSHIP_SCENARIOS
from chaos.scenarios.isolation import ISOLATION_SCENARIOS
from chaos.scenarios.kills import WEB_KILL_SCENARIOS, WORKER_KILL_SCENARIOS
from chaos.scenarios.ledger import LEDGER_SCENARIOS
from chaos.scenarios.revisions import REVISION_SCENARIOS
from chaos.scenarios.scale import SCALE_SCENARIOS
from chaos.scenarios.timeouts import CONNECT_TIMEOUT_SCENARIOS
from chaos.scenarios.tls import TLS_SCENARIOS
from chaos.scenarios.valkey import VALKEY_SCENARIOS

__all__ = ["SCENARIOS", "get_scenario"]

SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        *WORKER_KILL_SCENARIOS,
        *TLS_SCENARIOS,
        *WEB_KILL_SCENARIOS,
        *SCALE_SCENARIOS,
        *ISOLATION_SCENARIOS,
        *REVISION_SCENARIOS,
        *AI_LANE_SCENARIOS,  # issue #11: the AI lane's failure table (chaos/scenarios/ai_lane.py)
        *VALKEY_SCENARIOS,  # issue #25: Valkey failover (chaos/scenarios/valkey.py)
        *CONNECT_TIMEOUT_SCENARIOS,  # issue #25 item 4: the seed's connection timeouts (chaos/scenarios/timeouts.py)
        *EGRESS_SCENARIOS,  # issue #26: SMS egress across a host failover (chaos/scenarios/egress.py)
        *LOGSHIP_SCENARIOS,  # issue #26: log shipping through a store outage (chaos/scenarios/logship.py)
        *LEDGER_SCENARIOS,  # issue #23: answer sinks under a held ledger lock and a kill (chaos/scenarios/ledger.py)
    )
}


def get_scenario(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise KeyError(f"unknown scenario {name!r}; known: {', '.join(sorted(SCENARIOS))}") from None
