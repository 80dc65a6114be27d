"""Valkey failover: SIGKILL (``failover``) or cut off (``partition``) the node the Sentinels
name primary, and measure the failover.

The fault ``failover`` (target ``primary``, resolved when it starts) keeps the killed node
down for the fault's duration, then lets the supervisor restart it; the Sentinels turn it
into a replica of the new primary. The fault ``partition`` (same target; the node needs its
node link, ``valkey_node_N``) puts a ``timeout`` toxic with no deadline on the downstream of
the primary's link: whatever the node sends (replies, the replication stream, answers to the
Sentinels' pings) is dropped while commands still arrive and run. The node stays up and keeps
what it applied; at the end the toxic is removed (which closes the link's connections) and
the Sentinels demote it. ``after_effect_at`` (a provider) times the kill or cut just after
that provider's next effect, while it holds the answer (chaos/nemesis/provider.py), so the
job in flight still has its Valkey writes to make; the start records ``after_effect`` and
``effect_age_at_kill``. A watcher thread measures, from outside the stack:

- ``switch_at``: when most Sentinels first name another node (their ``+switch-master``);
- ``first_success``: when each client component (web nodes, relay, workers) first holds a
  connection to the new primary (its ``CLIENT SETNAME <component>/<purpose>`` appears in
  the new primary's ``CLIENT LIST``, polled): the component found the new primary;
- ``serving``: when each worker is serving again on the new primary: it holds a queue
  connection there *and* its liveness key there was written after the switch. A first
  connection alone is not enough: a worker whose liveness beat failed for a whole TTL stops
  (stack/lanes/worker.py) and the supervisor restarts it, and under a partition the stopping
  process itself reconnects to the new primary (its last writes) before it exits. Measured in
  a run (seed 20261006): all four workers "connected" 8.13 s after the cut, then exited and
  were serving again after their restart at 11.6 s. A liveness key written before the switch
  has less than ``liveness_ttl - (now - switch)`` left, so a fresher one was written on the
  new primary by a worker whose beat is alive;
- ``rejoined_as_replica``: the restarted node became a replica with its link up;
- ``errors_by_component``: the connection errors each component counted from the kill to the
  fault's end (stack/connection_stats.py counters, by kind: refused, reset, timeout, ...).

All wall-clock (``time.time()``), as the ledgers; chaos/bounds.py turns the workers'
``first_success`` into their kill windows, so the verdict's bounds follow the measured switch.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError

from chaos.nemesis.base import FaultSpec, NemesisError
from chaos.nemesis.process import WorkerStates, wait_worker
from chaos.nemesis.provider import HeldAnswer, after_effect_timing, answer_held
from chaos.observe.valkey_stats import read_process_counters
from stack.components import LIVENESS_PREFIX
from stack.embedded.watchdog import identity, is_alive
from stack.valkey_client import primary_address, valkey_client

if TYPE_CHECKING:
    from chaos.deployment import Deployment

__all__ = ["CLIENT_ROLES", "PARTITION_TOXIC", "FailoverNemesis"]

CLIENT_ROLES = ("web", "relay", "worker")
"""Components that find the primary through the Sentinels; each must reach the new one."""
_POLL = 0.05


@dataclass
class _Watch:
    victim: str
    old_address: tuple[str, int]
    killed_at: float
    expected: tuple[str, ...]
    deadline: float
    switch_at: float | None = None
    new_address: tuple[str, int] | None = None
    first_success: dict[str, float] = field(default_factory=dict)
    serving: dict[str, float] = field(default_factory=dict)
    counters_before: dict[str, dict[str, Any]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None


PARTITION_TOXIC = {"type": "timeout", "stream": "downstream", "attributes": {"timeout": 0}, "name": "partition"}
"""Drop everything the node sends, keep the connections open: a silent one-way partition."""


class _ReleaseWhenGone:
    """Let a held answer go as soon as the victim's processes are gone from ``/proc``, not when the
    kill's call returns: a container engine returns only after its own bookkeeping (6.0-6.2 s
    after the exit on a loaded machine, docs/valkey.md), and the answer must come in the outage,
    before the Sentinels switch. Without a held answer, or pids this host can see, it does nothing."""

    def __init__(self, pids: list[int], held: HeldAnswer | None) -> None:
        self.gone_at: float | None = None
        self._stop = threading.Event()
        idents = [ident for ident in (identity(pid) for pid in pids) if ident is not None]
        self._thread: threading.Thread | None = None
        if held is not None and held.effect is not None and idents:
            self._thread = threading.Thread(target=self._watch, args=(idents, held), name="release-when-gone",
                                            daemon=True)
            self._thread.start()

    def _watch(self, idents: list[Any], held: HeldAnswer) -> None:
        while not self._stop.is_set():
            if not any(is_alive(ident) for ident in idents):
                self.gone_at = time.time()
                try:
                    held.release()
                except Exception:  # noqa: BLE001 - the block's end lets it go again
                    pass
                return
            time.sleep(0.002)

    def stop(self) -> float | None:
        """After the kill's call returned: stop watching; when the processes were seen gone, if they were."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return self.gone_at


class FailoverNemesis:
    kinds = frozenset({"failover", "partition"})

    def __init__(self, stack: Deployment, ready_timeout: float = 60.0, worker_states: WorkerStates | None = None) -> None:
        """``worker_states``: None reads the process tree alone (a deployment whose workers all fork)."""
        self.stack = stack
        self.ready_timeout = ready_timeout
        self.worker_states = worker_states
        self._watches: dict[str, _Watch] = {}
        self._cut: dict[str, str] = {}  # fault target -> the link carrying the partition toxic
        self._network: Any = None

    # ------------------------------------------------------------------ start
    def start(self, fault: FaultSpec) -> dict[str, Any]:
        settings = self.stack.settings
        if not settings.valkey_sentinels:
            raise NemesisError("a failover needs the Sentinel topology (StackSpec.valkey='sentinel')")
        old_address = primary_address(settings)
        nodes = self.stack.valkey_nodes()
        if old_address not in nodes:
            raise NemesisError(f"the Sentinels name no node of this stack primary ({old_address}; nodes {nodes})")
        victim = nodes[old_address]
        expected = tuple(c.name for c in self.stack.components() if c.role in CLIENT_ROLES)
        pids = self.stack.pids(victim)  # before the effect: asking a container engine takes time
        if fault.kind != "partition":
            self.stack.set_autorestart(victim, False)  # before the effect too: the kill must follow it at once
        with answer_held(self.stack, fault.params) as held:
            # An answer the provider holds proves a job in flight; without one, look for a running job
            # (one more poll of the engine for each try on compose).
            mid_job = (held is not None and held.effect is not None) or self._wait_busy(
                fault.params.get("wait_busy_worker"), float(fault.params.get("wait_busy", 0)))
            killed_at = time.time()  # the signal's moment (an engine's kill returns once the container stopped)
            struck_at = self._strike(fault, victim, old_address, held, pids)
        # held answers went once the victim was seen gone, or go now that the kill returned: after the strike either way
        before = read_process_counters(self.stack.run_dir)
        watch = _Watch(victim, old_address, killed_at, expected, time.monotonic() + self.ready_timeout,
                       counters_before=before)
        watch.thread = threading.Thread(target=self._watch, args=(watch,), name=f"failover-{victim}", daemon=True)
        watch.thread.start()
        self._watches[fault.target] = watch
        timing = after_effect_timing(held, struck_at)
        errors = self.worker_states.take_errors() if self.worker_states is not None else {}
        return {"node": victim, "pids": pids, "killed_at": watch.killed_at, "mid_job": mid_job, **timing, **errors,
                "primary_before": f"{old_address[0]}:{old_address[1]}", **({"link": self._cut[fault.target]} if fault.target in self._cut else {})}

    def _strike(self, fault: FaultSpec, victim: str, old_address: tuple[str, int], held: HeldAnswer | None,
                pids: list[int]) -> float:
        """Kill the primary or cut it off; when the strike landed. On a loaded machine a signal can
        leave well after it was sent, so a kill has landed at the engine's (or the supervisor's)
        record of the exit, or when its processes were seen gone, whichever came first; a cut has
        landed when its toxic is in place."""
        if fault.kind == "partition":
            link = self._link_of(old_address[1])
            self._network_nemesis().start(self._toxic(link))
            self._cut[fault.target] = link
            return time.time()
        gone = _ReleaseWhenGone(pids, held)
        self.stack.kill(victim)
        landed = self.stack.kill_landed_at(victim) or time.time()
        gone_at = gone.stop()
        return landed if gone_at is None else min(landed, gone_at)

    def _link_of(self, port: int) -> str:
        """The node link whose proxy is the address the node announces (the Sentinels' view of it)."""
        for name, link in self.stack.links().items():
            if link["listen"].endswith(f":{port}"):
                return name
        raise NemesisError(f"a partition needs the primary's node link (valkey_node_N); links: {sorted(self.stack.links())}")

    def _network_nemesis(self) -> Any:
        if self._network is None:
            from chaos.nemesis.network import NetworkNemesis

            self._network = NetworkNemesis(self.stack)
        return self._network

    @staticmethod
    def _toxic(link: str) -> FaultSpec:
        return FaultSpec(at=0.0, kind="toxic", target=link, duration=0.0, params=dict(PARTITION_TOXIC))

    def _wait_busy(self, worker: Any, timeout: float) -> bool:
        """Kill while ``worker`` runs a job (a horse in its tree, or its published ``busy``), so a job is in flight."""
        return bool(worker) and wait_worker(self.stack, self.worker_states, str(worker), timeout, busy=True)

    # ------------------------------------------------------------------ the watcher
    def _watch(self, watch: _Watch) -> None:
        try:
            self._wait_switch(watch)
            if watch.new_address is not None:
                self._wait_clients(watch)
        except Exception as exc:  # noqa: BLE001 - a broken watch is evidence in the fault-end, never a crash
            watch.errors.append(f"{type(exc).__name__}: {str(exc)[:200]}")

    def _wait_switch(self, watch: _Watch) -> None:
        while time.monotonic() < watch.deadline and not watch.stop.is_set():
            address = primary_address(self.stack.settings)
            if address is not None and address != watch.old_address:
                watch.switch_at, watch.new_address = time.time(), address
                return
            time.sleep(_POLL)
        watch.errors.append("the Sentinels never named a new primary")

    def _wait_clients(self, watch: _Watch) -> None:
        assert watch.new_address is not None
        client = self._direct(*watch.new_address)  # the harness user, straight to the new primary
        workers = {name for name in watch.expected if name.startswith("worker_")}
        try:
            while time.monotonic() < watch.deadline and not watch.stop.is_set() and (
                    set(watch.expected) - set(watch.first_success) or workers - set(watch.serving)):
                try:
                    names = {str(c.get("name", "")) for c in client.client_list()}
                    beating = self._fresh_beats(client, watch, workers - set(watch.serving))
                except RedisError:
                    names, beating = set(), set()
                now = time.time()
                components = {name.split("/", 1)[0] for name in names}
                for name in components & set(watch.expected):
                    watch.first_success.setdefault(name, now)
                for name in beating & {name.split("/", 1)[0] for name in names if name.endswith("/queue")}:
                    watch.serving.setdefault(name, now)
                time.sleep(2 * _POLL)
        finally:
            client.close()

    def _fresh_beats(self, client: Any, watch: _Watch, workers: set[str]) -> set[str]:
        """The workers whose liveness key on the new primary was written after the switch."""
        if not workers:
            return set()
        assert watch.switch_at is not None
        since_switch_ms = (time.time() - watch.switch_at) * 1000
        ttl_ms = self.stack.settings.liveness_ttl * 1000
        fresh = set()
        for key in client.scan_iter(match=f"{LIVENESS_PREFIX}worker_*", count=100):
            name = (key.decode() if isinstance(key, bytes) else str(key))[len(LIVENESS_PREFIX):].split(".", 1)[0]
            if name in workers and client.pttl(key) > ttl_ms - since_switch_ms:
                fresh.add(name)
        return fresh

    # ------------------------------------------------------------------ end
    def end(self, fault: FaultSpec) -> dict[str, Any]:
        watch = self._watches.pop(fault.target, None)
        if watch is None:
            return {}
        assert watch.thread is not None
        revived = time.monotonic()
        link = self._cut.pop(fault.target, None)
        if link is not None:
            # Healed when the schedule says: removing the toxic closes the link's connections, so a
            # client still waiting on the silent node (a worker's blocking dequeue) moves now.
            self._network_nemesis().end(self._toxic(link))
        watch.thread.join(max(0.0, watch.deadline - time.monotonic()))  # the clients may still be coming back
        watch.stop.set()
        if link is None:  # a killed node stays down until every client found the new primary
            revived = time.monotonic()
            self.stack.set_autorestart(watch.victim, True)
        detail = {**self._timeline(watch), **({"healed_at": time.time() - (time.monotonic() - revived)} if link else {})}
        try:
            self.stack.wait_healthy(watch.victim, self.ready_timeout)
            detail.update(ready=True, ready_at=time.time(), restart_seconds=round(time.monotonic() - revived, 3),
                          rejoined_as_replica=self._wait_replica(watch))
        except Exception as exc:  # noqa: BLE001 - a node that never came back is evidence
            detail.update(ready=False, error=f"{type(exc).__name__}: {str(exc)[:200]}")
        return detail

    def _direct(self, host: str, port: int) -> Any:
        """A probe of one node, as the harness user, at the address the Sentinels name it by."""
        settings = self.stack.settings.with_overrides(valkey_sentinels="", valkey_url=f"rediss://{host}:{port}/0")
        return valkey_client(settings, "probe")

    def _timeline(self, watch: _Watch) -> dict[str, Any]:
        nodes = self.stack.valkey_nodes()
        since = {name: round(at - watch.killed_at, 3) for name, at in sorted(watch.first_success.items())}
        return {"node": watch.victim, "killed_at": watch.killed_at, "switch_at": watch.switch_at,
                "switch_seconds": round(watch.switch_at - watch.killed_at, 3) if watch.switch_at else None,
                "primary_after": nodes.get(watch.new_address) if watch.new_address else None, "first_success": dict(watch.first_success),
                "first_success_seconds": since, "serving": dict(watch.serving),
                "serving_seconds": {name: round(at - watch.killed_at, 3) for name, at in sorted(watch.serving.items())},
                "never_back": sorted(set(watch.expected) - set(watch.first_success)),
                "never_serving": sorted({n for n in watch.expected if n.startswith("worker_")} - set(watch.serving)), "errors": watch.errors,
                "errors_by_component": _error_delta(watch.counters_before, read_process_counters(self.stack.run_dir))}

    def _wait_replica(self, watch: _Watch) -> bool:
        """The restarted node follows the new primary (the Sentinels reconfigured it)."""
        client = self._direct(*watch.old_address)
        deadline = time.monotonic() + self.ready_timeout
        try:
            while time.monotonic() < deadline:
                try:
                    info = client.info("replication")
                    if info.get("role") == "slave" and info.get("master_link_status") == "up":
                        return True
                except RedisError:
                    pass
                time.sleep(0.1)
            return False
        finally:
            client.close()

    def heal(self) -> None:
        for target in list(self._watches):
            kind = "partition" if target in self._cut else "failover"
            self.end(FaultSpec(at=0.0, kind=kind, target=target, duration=0.0))


def _error_delta(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Connection errors per component and kind counted between two counter reads (only the nonzero)."""
    delta: dict[str, dict[str, int]] = {}
    for component, entry in sorted(after.items()):
        old = (before.get(component) or {}).get("errors") or {}
        kinds = {kind: int(n) - int(old.get(kind, 0)) for kind, n in (entry.get("errors") or {}).items()}
        kinds = {kind: n for kind, n in kinds.items() if n > 0}
        if kinds:
            delta[component] = kinds
    return delta
