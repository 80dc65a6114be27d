"""Log shipping through a store outage (issue #26, docs/log-shipping.md): the log store is
down for part of the exam, then comes back; the shipper (rsyslog) buffers up to its bound,
drops and counts past it, and re-sends what RELP left unacknowledged.

The canaries: no component of this stack logs an answer or an access code, so the scenario
writes two lines into web_1's log the way a careless component would (one with a canary
answer, one with a canary access code) before the load; redaction must keep both out of the
store.
"""

from __future__ import annotations

import time
from pathlib import Path

from chaos.load.exam import WorkloadSpec
from chaos.nemesis import FaultSpec
from chaos.runner import Scenario

__all__ = ["CANARY_ANSWER", "CANARY_CODE", "LOGSHIP_SCENARIOS"]

CANARY_ANSWER = "CANARY-ANSWER-d41d8cd98f"
CANARY_CODE = "CANARY-CODE-0cc175b9c0"
_LOAD_SECONDS = 10.0


def _store_outage(seed: int, scenario: Scenario) -> list[FaultSpec]:
    """The store is SIGKILLed at 2 s and restarted 6 s later (a kill of its whole tree)."""
    return [FaultSpec(at=2.0, kind="kill", target="log_store", duration=6.0)]


def _leaky_lines(stack) -> None:  # a Scenario.prepare: chaos.deployment.Deployment
    """Two lines a careless web node could have logged, appended like its own lines."""
    log = Path(stack.run_dir) / "logs" / "web_1.log"
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    with log.open("a") as out:
        out.write(f'{stamp},000 proctor.web DEBUG answer body {{"question": "q1", "content": "{CANARY_ANSWER}"}}\n')
        out.write(f"{stamp},000 proctor.web DEBUG login rejected for student-00001 access_code={CANARY_CODE}\n")


_OPTIONS = {"expect_ops": ["session", "start", "answer", "finish"], "log_canaries": [CANARY_ANSWER, CANARY_CODE]}


def _outage(name: str, policy: str, description: str, expect_valid: bool) -> Scenario:
    return Scenario(
        name=name,
        description=description,
        workload=WorkloadSpec(arrival_rate=3.0, duration=_LOAD_SECONDS, questions=3),
        log_shipping=policy,
        prepare=_leaky_lines,
        faults=_store_outage,
        options=_OPTIONS,
        expect_valid=expect_valid,
    )


LOGSHIP_SCENARIOS: tuple[Scenario, ...] = (
    _outage("log_store_outage", "redact",
            "the log store is down 6 s mid-exam: every line shipped or counted dropped, duplicates within "
            "RELP's at-least-once, no canary in the store", True),
    _outage("log_store_outage_unredacted", "unredacted",
            "negative control: the shipper redacts nothing: the canary check must find the canaries in the store", False),
    _outage("log_store_outage_uncounted", "uncounted",
            "negative control: the buffer's limit is reached and nothing counts the drops: the lines must be "
            "reported neither shipped nor counted", False),
)
