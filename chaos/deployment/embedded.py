"""``EmbeddedDeployment``: the ``Deployment`` interface over the embedded runner.

``stack.embedded`` (FastAPI, RQ, SQLAlchemy, redis-py) is imported when an adapter is
built, never when this module is imported: a harness pointed at another deployment
does not need the reference stack's dependencies.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chaos.settle import SettleTerms
from chaos.deployment.final_read import FinalRead, final_read, provider_urls
from stack.components import Component
from stack.config import Settings

if TYPE_CHECKING:
    from stack.embedded.stack import EmbeddedStack, StackSpec

__all__ = ["EmbeddedDeployment"]

HOST = "127.0.0.1"  # where the embedded runner's Valkey nodes listen and announce themselves


class EmbeddedDeployment:
    """Wraps a ``StackSpec`` (a new stack) or an ``EmbeddedStack`` (already built, maybe running)."""

    def __init__(self, spec: StackSpec | None = None, stack: EmbeddedStack | None = None) -> None:
        if spec is not None and stack is not None:
            raise ValueError("EmbeddedDeployment: pass spec or stack, not both")
        if stack is None:
            from stack.embedded.stack import EmbeddedStack

            stack = EmbeddedStack(spec)
        self.stack = stack
        self._kills_landed: dict[str, float] = {}

    # ------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self.stack.start()

    def stop(self) -> None:
        self.stack.stop()

    def detach(self) -> None:
        """Leave the processes running after we exit (``proctor down RUN_DIR`` stops them)."""
        self.stack.detach()

    def __enter__(self) -> EmbeddedDeployment:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------ what runs
    @property
    def run_dir(self) -> Path:
        return self.stack.run_dir

    @property
    def settings(self) -> Settings:
        return self.stack.settings

    @property
    def urls(self) -> dict[str, str]:
        return self.stack.urls

    def components(self) -> list[Component]:
        return list(self.stack.component_table())

    def links(self) -> dict[str, dict[str, str]]:
        return self.stack.links()

    def valkey_nodes(self) -> dict[tuple[str, int], str]:
        """By its own port, and by its node link's listen port (what it announces when it has one)."""
        nodes = {(HOST, c.port): c.name for c in self.components() if c.role == "valkey" and c.port is not None}
        for link in self.links().values():
            upstream, listen = (int(link[k].rsplit(":", 1)[1]) for k in ("upstream", "listen"))
            if (HOST, upstream) in nodes:
                nodes[(HOST, listen)] = nodes[(HOST, upstream)]
        return nodes

    def valkey_as(self, user: str) -> Any:
        """A Valkey client as one ACL user (the memory filler's own, chaos/load/filler.py); embedded only."""
        return self.stack.valkey_as(user)

    def pids(self, component: str) -> list[int]:
        return self.stack.supervisor.pids(component)

    # ------------------------------------------------------------ faults
    def kill(self, component: str, sig: int = signal.SIGKILL) -> list[int]:
        pids = self.stack.supervisor.kill(component, sig)
        if sig == signal.SIGKILL:
            self._kills_landed[component] = time.time()  # the signals are sent when kill returns
        return pids

    def kill_landed_at(self, component: str) -> float | None:
        return self._kills_landed.get(component)

    def pause(self, component: str) -> list[int]:
        return self.stack.supervisor.pause(component)

    def resume(self, component: str) -> list[int]:
        return self.stack.supervisor.resume(component)

    def restart(self, component: str) -> None:
        self.stack.restart(component)

    def set_autorestart(self, component: str, enabled: bool) -> None:
        self.stack.supervisor.set_autorestart(component, enabled)

    def wait_healthy(self, component: str, timeout: float = 30.0) -> None:
        self.stack.wait_healthy(component, timeout)

    def ready_seconds(self, component: str) -> float | None:
        return self.stack.ready_seconds(component)

    def scale(self, pool: str, n: int) -> dict[str, Any]:
        """The protocol's scale, plus what the embedded stack reports (drains per removed node)."""
        return self.stack.scale(pool, n)

    def egress(self) -> dict[str, Any]:
        """The SMS egress (reserved address, hosts, attachment and its history); ``{}`` when off.
        Not part of the Deployment protocol: the host-loss fault asks for it (chaos/nemesis/host.py)."""
        return self.stack.egress()

    # ------------------------------------------------------------ the final read
    def export(self, dest: Path, allow_pending: frozenset[str] = frozenset(),
               quiet_timeout: float | None = None) -> FinalRead:
        urls = self.urls
        final = final_read(urls["admin"], provider_urls(urls), self.settings.admin_token, dest,
                           SettleTerms.from_settings(self.settings), allow_pending, quiet_timeout)
        if "log_store" in urls:  # log shipping (docs/log-shipping.md): after the outbox settled
            self.stack.export_logs(dest)
        return final
