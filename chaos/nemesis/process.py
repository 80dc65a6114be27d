"""Process faults on a deployment (``chaos.deployment.Deployment``): kill -9 a
component's whole process tree, pause/resume it (SIGSTOP/SIGCONT), restart it, or
scale a pool (``Component.pool``: "web" or a lane).

A kill switches the component's autorestart off until the fault ends, so the
outage lasts as long as the schedule says; the end restarts it and waits until
the component is ready again. The fault-end then records what the restart cost,
measured: ``restart_seconds`` (fault end -> ready) and ``startup_seconds`` (the
new process's spawn -> ready), so bounds that follow from the schedule are derived
from this run's restarts (chaos/bounds.py), not from a guess.

A kill with ``after_effect_at`` (a provider's name) strikes while that provider holds the
answer of a new effect, and the answer goes only after the signal (``answer_held``,
chaos/nemesis/provider.py): the killed caller committed a side effect it never hears of.

Whether an RQ worker is running a job: a forking worker's tree has a horse (two pids), but a
worker of the ``simple`` model runs the job in its own process (stack/lanes/worker.py). So a
worker's published state (``WorkerStates``: ``busy`` from RQ's bookkeeping of the job, before
it runs, until after it ended) counts as well: busy = a horse or ``busy``; idle = neither.
"""

from __future__ import annotations

import signal
import time
from typing import TYPE_CHECKING, Any

from chaos.nemesis.base import FaultSpec, NemesisError
from chaos.nemesis.provider import after_effect_timing, answer_held
from stack.components import WORKER_STATE_PREFIX

if TYPE_CHECKING:
    from chaos.deployment import Deployment

__all__ = ["ProcessNemesis", "WorkerStates"]


class WorkerStates:
    """Reads a worker component's published state (``stack.components.WORKER_STATE_PREFIX``) from
    Valkey as the harness user; the client is built on first use (redis-py is imported then, so the
    harness's imports stay light). A read that fails says "not busy": the tree still speaks. Failed
    reads are counted, and the nemesis that waited puts them in its fault's detail
    (``state_read_errors``): silent ones once hid that no in-process job was ever seen on compose."""

    def __init__(self, settings: Any) -> None:
        self.settings = settings
        self._client: Any = None
        self._failed = 0
        self._last_error = ""

    @classmethod
    def of(cls, stack: Deployment) -> WorkerStates:
        """Read at the harness's direct Valkey address (``stack.urls["valkey"]``) unless Sentinels
        name the primary. On compose the settings' URL names the containers' service, which the
        host cannot resolve: every read failed and said "not busy", so no in-process job was ever
        seen and a kill waiting for one landed after its wait, not mid-job (rehearsal run 24)."""
        settings, direct = stack.settings, stack.urls.get("valkey")
        if direct and not settings.valkey_sentinels:  # a deployment without Valkey keeps its settings
            settings = settings.with_overrides(valkey_url=direct)
        return cls(settings)

    def busy(self, component: str) -> bool:
        from redis.exceptions import RedisError

        try:
            return self._valkey().get(f"{WORKER_STATE_PREFIX}{component}") == b"busy"
        except RedisError as exc:
            self._failed += 1
            self._last_error = f"{type(exc).__name__}: {exc}"
            return False

    def take_errors(self) -> dict[str, Any]:
        """``{"state_read_errors": {"count", "last"}}`` for the reads that failed since the last call; {} if none."""
        failed, last = self._failed, self._last_error
        self._failed, self._last_error = 0, ""
        return {"state_read_errors": {"count": failed, "last": last}} if failed else {}

    def _valkey(self) -> Any:
        if self._client is None:
            from stack.valkey_client import valkey_client

            self._client = valkey_client(self.settings, "probe")
        return self._client


def running_a_job(name: str, pids: list[int], states: WorkerStates | None) -> bool:
    """A horse in the worker's tree (a forking worker), or the worker's own word that a job runs."""
    return len(pids) > 1 or (states is not None and states.busy(name))


def wait_worker(stack: Deployment, states: WorkerStates | None, name: str, timeout: float, busy: bool) -> bool:
    """Poll the worker until it is running a job (``busy``) or not; False once ``timeout`` passed."""
    deadline = time.monotonic() + timeout
    while True:
        if running_a_job(name, stack.pids(name), states) is busy:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.005)


class ProcessNemesis:
    kinds = frozenset({"kill", "pause", "restart", "scale"})

    def __init__(self, stack: Deployment, ready_timeout: float = 60.0, worker_states: WorkerStates | None = None) -> None:
        """``worker_states``: None reads the process tree alone (a deployment whose workers all fork)."""
        self.stack = stack
        self.ready_timeout = ready_timeout
        self.worker_states = worker_states
        self._killed: set[str] = set()
        self._paused: set[str] = set()
        self._scaled: dict[str, int] = {}

    def _check_target(self, name: str) -> None:
        running = sorted(c.name for c in self.stack.components())
        if name not in running:
            raise NemesisError(f"unknown component {name!r}; running: {running}")

    def start(self, fault: FaultSpec) -> dict[str, Any]:
        if fault.kind == "scale":
            return self._scale(fault)
        self._check_target(fault.target)
        if fault.kind == "kill":
            return self._kill(fault)
        if fault.kind == "pause":
            return self._pause(fault)
        self.stack.restart(fault.target)
        return {}

    def _kill(self, fault: FaultSpec) -> dict[str, Any]:
        detail: dict[str, Any] = {}
        with answer_held(self.stack, fault.params) as held:
            detail["mid_job"] = self._wait_busy(fault.target, float(fault.params.get("wait_busy", 0)))
            detail.update(self.worker_states.take_errors() if self.worker_states is not None else {})
            self.stack.set_autorestart(fault.target, False)
            if fault.params.get("freeze_first"):
                # SIGSTOP first: requests already sent to the node stall in flight, so the kill
                # lands mid-request (a fast node would otherwise rarely have one open).
                self.stack.pause(fault.target)
                time.sleep(float(fault.params["freeze_first"]))
            detail["pids"] = self.stack.pids(fault.target)
            self.stack.kill(fault.target, signal.SIGKILL)
            detail["killed_at"] = time.time()  # wall clock, as the ledgers' timestamps (chaos/bounds.py)
        # a held answer goes only now: the killed caller never hears of its effect
        detail.update(after_effect_timing(held, detail["killed_at"]))
        self._killed.add(fault.target)
        return detail

    def _pause(self, fault: FaultSpec) -> dict[str, Any]:
        """``params``: ``wait_idle`` (seconds, default 0) freezes an RQ worker only between jobs.
        A horse frozen mid-job can hold the ledger's write lock for the whole pause, which
        stalls every writer (answers included) instead of the lane alone. The worker may fork
        between the look and the SIGSTOP, so the tree is read again once frozen; a horse found
        then is thawed and the pause tried again, until ``wait_idle`` runs out."""
        timeout = float(fault.params.get("wait_idle", 0))
        deadline = time.monotonic() + timeout
        attempts = 0
        while True:
            attempts += 1
            idle = self._wait_idle(fault.target, max(0.0, deadline - time.monotonic())) if timeout else None
            self.stack.pause(fault.target)
            pids = self.stack.pids(fault.target)
            frozen_idle = not self._busy(fault.target, pids)
            if not idle or frozen_idle or time.monotonic() >= deadline:
                break
            self.stack.resume(fault.target)
        self._paused.add(fault.target)
        detail: dict[str, Any] = {"pids": pids}
        if timeout:
            detail.update(idle=frozen_idle, pause_attempts=attempts)
        return detail

    def _busy(self, name: str, pids: list[int]) -> bool:
        return running_a_job(name, pids, self.worker_states)

    def _wait_idle(self, name: str, timeout: float) -> bool:
        """An idle RQ worker: no horse, and not ``busy``."""
        return wait_worker(self.stack, self.worker_states, name, timeout, busy=False)

    def _wait_busy(self, name: str, timeout: float) -> bool:
        """An RQ worker with a job running: a horse, or ``busy``."""
        return wait_worker(self.stack, self.worker_states, name, timeout, busy=True)

    def _scale(self, fault: FaultSpec) -> dict[str, Any]:
        """``params``: ``count``; ``restore`` (default True) scales back at the fault's end.
        A deployment whose scale reports drains (the embedded one) has them logged."""
        pool, count = fault.target, int(fault.params["count"])
        before = len([c for c in self.stack.components() if c.pool == pool])
        if fault.params.get("restore", True):
            self._scaled.setdefault(pool, before)
        result = self.stack.scale(pool, count)
        drains = result.get("drains") if isinstance(result, dict) else None
        return {"from": before, "to": count, **({"drains": drains} if drains else {})}

    def end(self, fault: FaultSpec) -> dict[str, Any]:
        if fault.kind == "kill" and fault.target in self._killed:
            return self._revive_and_wait(fault.target)
        if fault.kind == "pause" and fault.target in self._paused:
            self.stack.resume(fault.target)
            self._paused.discard(fault.target)
        if fault.kind == "scale" and fault.target in self._scaled:
            self.stack.scale(fault.target, self._scaled.pop(fault.target))
        return {}

    def _revive_and_wait(self, name: str) -> dict[str, Any]:
        """Restart the killed component and block until it is ready: the measured restart."""
        revived = time.monotonic()
        self._revive(name)
        try:
            self.stack.wait_healthy(name, self.ready_timeout)
        except Exception as exc:  # noqa: BLE001 - a component that never came back is evidence, not a crash
            return {"restarted": True, "ready": False, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        return {"restarted": True, "ready": True, "ready_at": time.time(),
                "restart_seconds": round(time.monotonic() - revived, 3),
                "startup_seconds": self.stack.ready_seconds(name)}

    def _revive(self, name: str) -> None:
        """Autorestart back on: the supervisor restarts a component killed on purpose at once."""
        self._killed.discard(name)
        self.stack.set_autorestart(name, True)

    def heal(self) -> None:
        for name in sorted(self._paused):
            self.stack.resume(name)
        self._paused.clear()
        for name in sorted(self._killed):
            self._revive_and_wait(name)
        for pool, count in sorted(self._scaled.items()):
            self.stack.scale(pool, count)
        self._scaled.clear()

