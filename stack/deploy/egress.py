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
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from stack.deploy.secrets import HAPROXY_SOURCE

__all__ = [
    "ATTACHMENT_NAME",
    "Attachment",
    "SMS_RESERVED_ADDRESS",
    "new_attachment",
    "read_attachment",
    "sms_host_address",
    "write_attachment",
]

SMS_RESERVED_ADDRESS = "127.0.0.10"
ATTACHMENT_NAME = "egress/sms.json"
"""<run_dir>/egress/sms.json: the attachment record."""

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


def write_attachment(path: Path, attachment: Attachment) -> None:
    """Atomically (a reader never sees half a record), readable by the owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
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


def new_attachment(lane_holder: str, address_holder: str | None, reason: str) -> Attachment:
    return Attachment(lane_holder, address_holder, SMS_RESERVED_ADDRESS, time.time(), reason)
