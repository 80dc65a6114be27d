"""SMS egress across a worker failover (issue #26): the active SMS worker's host is lost
mid-exam; the standby takes the lane and the reserved address moves with it (docs/egress.md).

The SMS path runs without a fault-proxy link here: the gateway must see the worker's own
source address, and a proxy would put its own address in between (the embedded stack
refuses ``sms_egress`` together with the ``sms_gateway`` link).
"""

from __future__ import annotations

from chaos.load.exam import WorkloadSpec
from chaos.nemesis import FaultSpec
from chaos.runner import Scenario
from stack.deploy.egress import SMS_RESERVED_ADDRESS

__all__ = ["EGRESS_SCENARIOS"]

_LOAD_SECONDS = 10.0


def _host_loss(seed: int, scenario: Scenario) -> list[FaultSpec]:
    """The active SMS worker's host goes at 4 s and stays gone past the load (it comes back,
    as a standby, only at the fault's end)."""
    return [FaultSpec(at=4.0, kind="host_loss", target="worker_sms_1", duration=_LOAD_SECONDS - 4.0 + 1.0)]


_OPTIONS = {
    "expect_ops": ["session", "start", "answer", "finish", "merit_card"],
    "egress_address": SMS_RESERVED_ADDRESS,
}


def _failover(name: str, policy: str, description: str, expect_valid: bool) -> Scenario:
    return Scenario(
        name=name,
        description=description,
        workload=WorkloadSpec(arrival_rate=2.0, duration=_LOAD_SECONDS, questions=2),
        sms_workers=2,  # the active one (worker_sms_1) and its standby on another host
        sms_egress=policy,
        faults=_host_loss,
        options=_OPTIONS,
        expect_valid=expect_valid,
    )


EGRESS_SCENARIOS: tuple[Scenario, ...] = (
    _failover("sms_worker_failover", "move",
              "the active SMS worker's host is lost mid-exam; the standby takes the lane and the reserved "
              "address: every finished attempt's SMS delivered once, from the allowed address", True),
    _failover("sms_worker_failover_no_address", "without_address",
              "negative control: the standby takes the lane WITHOUT the reserved address: the gateway "
              "answers 403, the lane halts with an alert, and the SMS must be reported not delivered", False),
)
