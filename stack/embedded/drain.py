"""Graceful changes to HAProxy's web backend while traffic flows (``proctor scale web=N``).

Removing a node: ``drain`` (HAProxy sends it no new request) -> wait until the requests
it holds have finished (``scur`` + ``qcur`` of its server reach 0) -> ``maint`` (health
checks stop) -> the caller sends SIGTERM -> ``del server``. Adding one is the reverse:
the caller starts the node and waits for its readiness, then ``add server`` (which
starts in maintenance) and ``ready``. HAProxy is never restarted: a restart drops every
open connection, which is exactly the failure a graceful scale-in must not cause.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from stack.embedded import haproxy as hap

__all__ = ["DrainReport", "drain_server_idle", "admit_server", "retire_server"]

_POLL = 0.02


@dataclass(frozen=True)
class DrainReport:
    """What draining one node found: requests it held when the drain began, and whether
    they all finished before the limit (False: SIGTERM came with requests still open)."""

    node: str
    in_flight_at_drain: int
    idle: bool
    waited_seconds: float
    polls: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def drain_server_idle(
    socket_path: Path | str,
    server: str,
    limit: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> DrainReport:
    """Drain ``server`` and wait until it holds no request, then put it in maintenance.

    ``limit`` is the safety net for a request that never ends (default: HAProxy's
    ``timeout server``, after which HAProxy itself gives up on it); reaching it is
    reported (``idle=False``), not hidden."""
    started = clock()
    hap.drain_server(socket_path, server)
    first = held = hap.server_sessions(socket_path).get(server, 0)
    polls = 1
    while held > 0 and clock() - started < limit:
        sleep(_POLL)
        held = hap.server_sessions(socket_path).get(server, 0)
        polls += 1
    hap.disable_server(socket_path, server)
    return DrainReport(server, first, held == 0, round(clock() - started, 3), polls)


def retire_server(socket_path: Path | str, server: str) -> None:
    """After the node has stopped: take its (maintenance) server out of the running backend."""
    hap.delete_server(socket_path, server)


def admit_server(socket_path: Path | str, server: str, port: int, source: str | None) -> None:
    """A node that already answers readiness joins the backend: added in maintenance, then ready."""
    hap.add_server(socket_path, server, port, source)
    hap.enable_server(socket_path, server)
