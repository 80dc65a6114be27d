"""The SMS lane's egress addresses and the attachment record (standard library only).

The seed's gateway allowed one outbound address. So the SMS lane sends from a *reserved*
address of its own, and a standby SMS worker on another host takes the lane when the
active host is lost; the reserved address must move with the lane, as a cloud's reserved
IP is re-attached to the standby instance (docs/egress.md).

On the embedded stack every "host" is a loopback address: the reserved one is
``SMS_RESERVED_ADDRESS`` (127.0.0.10, never 127.0.0.2 = HAProxy's ``HAPROXY_SOURCE``), and
SMS worker N's own host address is 127.0.0.(10 + N). The *attachment* is a small JSON
file the deployment writes (atomically, 0600) and the workers read: which worker holds
the lane (may consume SMS jobs) and which holds the reserved address (sends from it).
A worker that holds the lane but not the address sends from its own host address, and
the gateway refuses it (403): assigning the lane alone proves nothing.

The failover controller and its policies live here too, shared by both deployments: the
embedded runner watches the holder's process, the compose adapter its container, and
the compose adapter also moves the address in the engine (``FailoverController.move``)
before the record says so (chaos/deployment/compose_egress.py).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Protocol

from stack.deploy.secrets import HAPROXY_SOURCE

__all__ = [
    "ATTACHMENT_NAME",
    "Attachment",
    "EVENTS_NAME",
    "FAILOVER_POLICIES",
    "FailoverController",
    "FailoverPolicy",
    "KeepAddressOnLostHost",
    "MoveReservedAddress",
    "SMS_RESERVED_ADDRESS",
    "new_attachment",
    "read_attachment",
    "sms_host_address",
    "write_attachment",
]

SMS_RESERVED_ADDRESS = "127.0.0.10"
ATTACHMENT_NAME = "egress/sms.json"
"""<run_dir>/egress/sms.json: the attachment record."""
EVENTS_NAME = "egress/failovers.jsonl"
WATCH_INTERVAL = 0.1
"""How often the controller looks at the lane holder (real seconds): part of the measured failover."""

log = logging.getLogger("proctor.egress")

assert SMS_RESERVED_ADDRESS != HAPROXY_SOURCE


def sms_host_address(index: int) -> str:
    """SMS worker ``index``'s own host address on the embedded stack: 127.0.0.11, .12, ..."""
    if not 1 <= index <= 200:
        raise ValueError(f"SMS worker index {index}: 1..200")
    return f"127.0.0.{10 + index}"


@dataclass(frozen=True)
class Attachment:
    """Who holds the SMS lane and who holds the reserved address; ``since`` is epoch seconds."""

    lane_holder: str
    address_holder: str | None
    reserved: str
    since: float
    reason: str = "start"

    def source_for(self, component: str, own_host: str) -> str:
        """The address ``component`` sends from: the reserved one if attached to it, else its own."""
        return self.reserved if self.address_holder == component else own_host


def write_attachment(path: Path, attachment: Attachment, owner: int | None = None) -> None:
    """Atomically (a reader never sees half a record), readable by the owner only; ``owner``
    (a uid) when the readers run as another user (the containers' ``proctor``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    if owner is not None:
        os.fchown(fd, owner, -1)
    with os.fdopen(fd, "w") as out:
        json.dump(asdict(attachment), out)
    os.replace(tmp, path)


def read_attachment(path: str | Path) -> Attachment | None:
    """The current record, or None when there is none (yet) or it cannot be read."""
    try:
        data: dict[str, Any] = json.loads(Path(path).read_text())
        return Attachment(**data)
    except (OSError, ValueError, TypeError):
        return None


def new_attachment(lane_holder: str, address_holder: str | None, reason: str,
                   reserved: str = SMS_RESERVED_ADDRESS) -> Attachment:
    """A record from now; ``reserved`` is the deployment's (a fixed container IP on compose)."""
    return Attachment(lane_holder, address_holder, reserved, time.time(), reason)


class FailoverPolicy(Protocol):
    name: str

    def attach(self, lost: str, standby: str, current: Attachment) -> Attachment: ...


class MoveReservedAddress:
    """The standby gets the lane and the reserved address (re-attached, as a cloud's reserved IP)."""

    name = "move"

    def attach(self, lost: str, standby: str, current: Attachment) -> Attachment:
        return new_attachment(standby, standby, f"{lost} lost: lane and reserved address moved to {standby}",
                              current.reserved)


class KeepAddressOnLostHost:
    """Negative control: the standby gets the lane, the reserved address stays on the lost host."""

    name = "without_address"

    def attach(self, lost: str, standby: str, current: Attachment) -> Attachment:
        return new_attachment(standby, current.address_holder, f"{lost} lost: lane moved to {standby}, address not moved",
                              current.reserved)


FAILOVER_POLICIES: dict[str, Callable[[], FailoverPolicy]] = {"move": MoveReservedAddress,
                                                               "without_address": KeepAddressOnLostHost}


def _no_move(current: Attachment, new: Attachment) -> None:
    """The embedded stack: the record is the attachment (workers bind what it names)."""


class FailoverController:
    """A daemon thread: promote a standby when the lane holder is gone.

    ``is_alive`` asks the deployment about a worker (a process, a container); ``move`` makes
    the record's new address holder real in the deployment before the record is written
    (compose: the engine re-attaches the address; a worker told first would bind an address
    its container does not have yet); ``owner`` is the uid the workers read the record as;
    ``reserved`` the deployment's reserved address (the workers bind what the record says)."""

    def __init__(self, run_dir: Path, policy: FailoverPolicy, is_alive: Callable[[str], bool],
                 sms_workers: Callable[[], list[str]], move: Callable[[Attachment, Attachment], None] = _no_move,
                 owner: int | None = None, reserved: str = SMS_RESERVED_ADDRESS) -> None:
        self.path = run_dir / ATTACHMENT_NAME
        self.events = run_dir / EVENTS_NAME
        self.policy = policy
        self.is_alive = is_alive
        self.sms_workers = sms_workers
        self.move = move
        self.owner = owner
        self.reserved = reserved
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="egress-failover", daemon=True)

    def attach_first(self, holder: str) -> Attachment:
        attachment = new_attachment(holder, holder, f"start: {holder} holds the lane and the reserved address",
                                    self.reserved)
        write_attachment(self.path, attachment, self.owner)
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
        self.move(current, attachment)
        write_attachment(self.path, attachment, self.owner)
        self._record(attachment, lost=current.lane_holder)
        log.warning("egress failover (%s): %s", self.policy.name, attachment.reason)
        return attachment

    def _record(self, attachment: Attachment, lost: str | None) -> None:
        self.events.parent.mkdir(parents=True, exist_ok=True)
        with self.events.open("a") as out:
            out.write(json.dumps({**asdict(attachment), "lost": lost, "policy": self.policy.name,
                                  "written_at": time.time()}) + "\n")
