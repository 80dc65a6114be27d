"""The embedded stack's SMS egress: hosts, the reserved address, and the failover controller.

With ``StackSpec.sms_egress`` set, SMS worker N runs "on" host address 127.0.0.(10 + N)
(``stack.deploy.egress``), the gateway allows exactly the reserved address 127.0.0.10/32,
and worker 1 starts holding both the lane and the reserved address; the others are
standbys (alive, ready, taking no job). The controller here plays the cloud's part: it
watches the lane holder's process and, once it is gone (its host lost), hands the lane
to the first live standby and applies the failover policy to the reserved address
(the controller and the policies are shared with the compose target: stack/deploy/egress.py).

The policy is an object chosen once when the stack is built (never a flag read later):
``MoveReservedAddress`` re-attaches the address to the standby (what production does);
``KeepAddressOnLostHost`` is the negative control: the standby takes the lane, the address
stays with the dead host, and the gateway's 403 must halt the lane with an alert.
"""

from __future__ import annotations

from pathlib import Path

from stack.deploy.egress import ATTACHMENT_NAME, FAILOVER_POLICIES, SMS_RESERVED_ADDRESS, FailoverPolicy, sms_host_address
from stack.embedded import StackError

__all__ = ["allowlist", "failover_policy", "worker_egress_env"]


def failover_policy(name: str) -> FailoverPolicy:
    try:
        return FAILOVER_POLICIES[name]()
    except KeyError:
        raise StackError(f"StackSpec.sms_egress={name!r}: one of {sorted(FAILOVER_POLICIES)}") from None


def worker_egress_env(run_dir: Path, index: int) -> dict[str, str]:
    return {"PROCTOR_EGRESS_HOST": sms_host_address(index), "PROCTOR_EGRESS_ATTACHMENT": str(run_dir / ATTACHMENT_NAME)}


def allowlist() -> tuple[str, ...]:
    """The gateway allows exactly the reserved address."""
    return (f"{SMS_RESERVED_ADDRESS}/32",)
