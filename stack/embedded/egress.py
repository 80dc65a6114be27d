"""The embedded stack's SMS egress: hosts, the reserved address, and the failover controller.

With ``StackSpec.sms_egress`` set, SMS worker N runs "on" host address 127.0.0.(10 + N)
(``stack.deploy.egress``), the gateway allows exactly the reserved address 127.0.0.10/32,
and worker 1 starts holding both the lane and the reserved address; the others are
standbys (alive, ready, taking no job). The controller here plays the cloud's part: it
watches the lane holder's process and, once it is gone (its host lost), hands the lane
to the first live standby and applies the failover policy to the reserved address.

The policy is an object chosen once when the stack is built (never a flag read later):
``MoveReservedAddress`` re-attaches the address to the standby (what production does);
``KeepAddressOnLostHost`` is the negative control: the standby takes the lane, the address
stays with the dead host, and the gateway's 403 must halt the lane with an alert.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Protocol

from stack.deploy.egress import ATTACHMENT_NAME, SMS_RESERVED_ADDRESS, Attachment, new_attachment, read_attachment, sms_host_address, write_attachment
from stack.embedded import StackError

__all__ = [
    "EVENTS_NAME",
    "FAILOVER_POLICIES",
    "FailoverController",
    "FailoverPolicy",
    "KeepAddressOnLostHost",
    "MoveReservedAddress",
    "failover_policy",
    "worker_egress_env",
]

EVENTS_NAME = "egress/failovers.jsonl"
WATCH_INTERVAL = 0.1
"""How often the controller looks at the lane holder (real seconds): part of the measured failover."""

log = logging.getLogger("proctor.egress")


class FailoverPolicy(Protocol):
    name: str

    def attach(self, lost: str, standby: str, current: Attachment) -> Attachment: ...


class MoveReservedAddress:
    """The standby gets the lane and the reserved address (re-attached, as a cloud's reserved IP)."""

    name = "move"

    def attach(self, lost: str, standby: str, current: Attachment) -> Attachment:
        return new_attachment(standby, standby, f"{lost} lost: lane and reserved address moved to {standby}")


class KeepAddressOnLostHost:
    """Negative control: the standby gets the lane, the reserved address stays on the lost host."""

    name = "without_address"

    def attach(self, lost: str, standby: str, current: Attachment) -> Attachment:
        return new_attachment(standby, current.address_holder, f"{lost} lost: lane moved to {standby}, address not moved")


FAILOVER_POLICIES: dict[str, Callable[[], FailoverPolicy]] = {"move": MoveReservedAddress,
                                                               "without_address": KeepAddressOnLostHost}


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


class FailoverController:
    """A daemon thread: promote a standby when the lane holder's process is gone."""

    def __init__(self, run_dir: Path, policy: FailoverPolicy, is_alive: Callable[[str], bool],
                 sms_workers: Callable[[], list[str]]) -> None:
        self.path = run_dir / ATTACHMENT_NAME
        self.events = run_dir / EVENTS_NAME
        self.policy = policy
        self.is_alive = is_alive
        self.sms_workers = sms_workers
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="egress-failover", daemon=True)

    def attach_first(self, holder: str) -> Attachment:
        attachment = new_attachment(holder, holder, f"start: {holder} holds the lane and the reserved address")
        write_attachment(self.path, attachment)
        self._record(attachment, lost=None)
        return attachment

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)

    def current(self) -> Attachment | None:
        return read_attachment(self.path)

    def history(self) -> list[dict]:
        try:
            return [json.loads(line) for line in self.events.read_text().splitlines() if line.strip()]
        except OSError:
            return []

    def _loop(self) -> None:
        while not self._stop.wait(WATCH_INTERVAL):
            try:
                self.check_once()
            except Exception:  # the controller must outlive one bad read
                log.exception("egress failover check failed")

    def check_once(self) -> Attachment | None:
        """One look: if the holder is gone and a standby lives, fail over (returns the new record)."""
        current = self.current()
        if current is None or self.is_alive(current.lane_holder):
            return None
        standbys = [name for name in self.sms_workers() if name != current.lane_holder and self.is_alive(name)]
        if not standbys:
            return None
        attachment = self.policy.attach(current.lane_holder, standbys[0], current)
        write_attachment(self.path, attachment)
        self._record(attachment, lost=current.lane_holder)
        log.warning("egress failover (%s): %s", self.policy.name, attachment.reason)
        return attachment

    def _record(self, attachment: Attachment, lost: str | None) -> None:
        self.events.parent.mkdir(parents=True, exist_ok=True)
        with self.events.open("a") as out:
            out.write(json.dumps({**asdict(attachment), "lost": lost, "policy": self.policy.name,
                                  "written_at": time.time()}) + "\n")
