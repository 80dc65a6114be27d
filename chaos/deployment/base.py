"""The deployment interface: what the harness needs from a running system under test.

The scenario runner and the nemesis talk to a ``Deployment`` and to nothing else of the
stack. ``chaos.deployment.embedded.EmbeddedDeployment`` implements it over the embedded
runner (local processes); a container target implements the same methods over its own
engine. Components are ``stack.components.Component`` values (standard library only), so
a harness pointed at another deployment needs neither FastAPI nor RQ.

Names: a *component* is one process (``web_2``, ``worker_merit_1``, ``relay``, ...); a
*pool* is what ``scale`` resizes: ``"web"`` or a lane (``"merit"``, ``"ai"``, ``"sms"``);
a *link* is a consumer -> service path behind a named fault-proxy proxy.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol, runtime_checkable

from chaos.deployment.final_read import FinalRead
from stack.components import Component
from stack.config import Settings

__all__ = ["Deployment", "URL_KEYS"]

URL_KEYS = ("api", "admin", "ai_provider", "sms_gateway")
"""The URLs every deployment offers: the load balancer, one web node's admin listener
(exports), and the two providers' admin ledgers. ``faultproxy`` is there when links are."""


@runtime_checkable
class Deployment(Protocol):
    """A running system under test. Every method names components by ``Component.name``."""

    @property
    def run_dir(self) -> Path:
        """The run folder: evidence (history, ledgers, logs) goes here."""

    @property
    def settings(self) -> Settings:
        """The settings the components run with (time scale, admin token, ...)."""

    @property
    def urls(self) -> Mapping[str, str]:
        """At least ``URL_KEYS``; ``faultproxy`` when the deployment has links."""

    def start(self) -> None:
        """Start every component and return once each one is ready."""

    def stop(self) -> None:
        """Stop every component (front, then providers, Valkey last); idempotent."""

    def components(self) -> list[Component]:
        """The running components in start order, each with its current process group."""

    def pids(self, component: str) -> list[int]:
        """Every live pid of the component's process tree (a busy RQ worker has two)."""

    def kill(self, component: str, sig: int = signal.SIGKILL) -> list[int]:
        """Send ``sig`` to the component's whole tree; return the pids signalled."""

    def kill_landed_at(self, component: str) -> float | None:
        """When the component's latest SIGKILL landed (epoch seconds), or None if it had none: the
        moment the signal left on local processes, the engine's record of the exit on containers
        (whose kill returns only once the container stopped, so a stamp after it would be late)."""

    def pause(self, component: str) -> list[int]:
        """Freeze the component (SIGSTOP or the engine's pause)."""

    def resume(self, component: str) -> list[int]:
        """Undo ``pause``."""

    def restart(self, component: str) -> None:
        """Stop and start the component; return once it is ready again."""

    def set_autorestart(self, component: str, enabled: bool) -> None:
        """Off: a killed component stays down (the fault lasts as scheduled). On: a dead one comes back."""

    def wait_healthy(self, component: str, timeout: float = 30.0) -> None:
        """Block until the component's health probe passes; raise after ``timeout`` seconds."""

    def ready_seconds(self, component: str) -> float | None:
        """Measured seconds from the component's last (re)start to its first passing probe."""

    def scale(self, pool: str, n: int) -> None:
        """Run ``n`` web nodes (pool "web", n >= 1) or ``n`` workers of a lane (n >= 0)."""

    def links(self) -> dict[str, dict[str, str]]:
        """{link: {"listen": "host:port", "upstream": "host:port"}} of the proxied links."""

    def valkey_nodes(self) -> dict[tuple[str, int], str]:
        """Each Valkey data node by every address the Sentinels may name it by (and the harness
        reaches it at): the failover nemesis's map from "the primary" to a component."""

    def export(self, dest: Path, allow_pending: frozenset[str] = frozenset(),
               quiet_timeout: float | None = None) -> FinalRead:
        """The final read: wait for the outbox to settle, as long as chaos/settle.py derives from
        the run (kinds in ``allow_pending`` may stay open; ``quiet_timeout`` replaces the derived
        wait by a plain one), then write ``dest/ledgers/``: every ledger table
        through the admin export and each provider's effect ledger."""
