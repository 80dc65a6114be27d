"""Host loss: an SMS worker's "host" disappears mid-exam (issue #26).

On the embedded stack a host is a loopback address (stack/deploy/egress.py). Losing it
means: the worker's whole process tree is SIGKILLed (by its pids and groups, through the
deployment), and so is every other process holding a socket bound to the host's addresses
(its own, and the reserved one while it held it), found in /proc/net/tcp by local address
and mapped to pids through /proc/<pid>/fd. Autorestart stays off until the fault ends: the
host is gone, and the lane must move to the standby (the deployment's failover controller).

The fault-start records what was killed and when; the fault-end records the attachment's
history (who got the lane and the address, when), from which the egress checker measures
the failover (chaos/checkers/egress.py). At the end the host comes back, as a standby.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chaos.nemesis.base import FaultSpec, NemesisError

if TYPE_CHECKING:
    from chaos.deployment import Deployment

__all__ = ["HostNemesis", "pids_bound_to"]


def _tcp_inodes(addresses: set[str]) -> set[str]:
    """Socket inodes of TCP sockets whose local address is one of ``addresses`` (IPv4)."""
    inodes = set()
    for table in ("/proc/net/tcp",):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local_hex = fields[1].split(":")[0]
            local = socket.inet_ntoa(struct.pack("<I", int(local_hex, 16)))
            if local in addresses and fields[9] != "0":
                inodes.add(fields[9])
    return inodes


def pids_bound_to(addresses: set[str]) -> set[int]:
    """Every process with a TCP socket bound to one of ``addresses``, never this process."""
    inodes = {f"socket:[{inode}]" for inode in _tcp_inodes(addresses)}
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            links = {os.readlink(f"/proc/{entry}/fd/{fd}") for fd in os.listdir(f"/proc/{entry}/fd")}
        except OSError:
            continue
        if links & inodes:
            found.add(int(entry))
    return found


class HostNemesis:
    kinds = frozenset({"host_loss"})

    def __init__(self, stack: Deployment, ready_timeout: float = 60.0) -> None:
        self.stack = stack
        self.ready_timeout = ready_timeout
        self._lost: set[str] = set()

    def _egress(self) -> dict[str, Any]:
        egress = getattr(self.stack, "egress", None)
        info = egress() if callable(egress) else {}
        if not info:
            raise NemesisError("host_loss needs a deployment with SMS egress hosts (StackSpec.sms_egress)")
        return info

    def start(self, fault: FaultSpec) -> dict[str, Any]:
        info = self._egress()
        if fault.target not in info["hosts"]:
            raise NemesisError(f"host_loss: {fault.target!r} has no host; hosts: {sorted(info['hosts'])}")
        addresses = {info["hosts"][fault.target]}
        attachment = info.get("attachment") or {}
        if attachment.get("address_holder") == fault.target:
            addresses.add(info["reserved"])
        self.stack.set_autorestart(fault.target, False)
        tree = self.stack.pids(fault.target)
        bound = pids_bound_to(addresses)
        self.stack.kill(fault.target, signal.SIGKILL)  # its tree, by pids and process groups
        others = sorted(bound - set(tree))
        for pid in others:  # bound to the lost host's addresses but not in the worker's tree
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._lost.add(fault.target)
        return {"killed_at": time.time(), "pids": tree, "bound_pids": sorted(bound), "other_pids": others,
                "addresses": sorted(addresses), "held": attachment}

    def end(self, fault: FaultSpec) -> dict[str, Any]:
        detail: dict[str, Any] = {"egress": self._egress()}
        if fault.target in self._lost:
            detail.update(self._revive(fault.target))
        return detail

    def _revive(self, name: str) -> dict[str, Any]:
        """The host comes back: its worker restarts as a standby (the lane stays where it went)."""
        self._lost.discard(name)
        self.stack.set_autorestart(name, True)
        try:
            self.stack.wait_healthy(name, self.ready_timeout)
        except Exception as exc:  # noqa: BLE001 - evidence, not a crash
            return {"restarted": True, "ready": False, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        return {"restarted": True, "ready": True}

    def heal(self) -> None:
        for name in sorted(self._lost):
            self._revive(name)
