"""The component model: what a deployment runs, as typed values (standard library only).

A ``Component`` is one supervised process of a deployment (a web node, a worker of a
lane, Valkey, HAProxy ...): its name, role, lane and index, the command it runs, the
environment it adds, its health probe and, once started, its process group. A
``ComponentTable`` holds the components of one deployment and answers "which web
nodes", "which workers of the merit lane", "what stops first" without re-parsing
names. The embedded runner builds the table (``stack/embedded/spec.py``); the harness
reads it through ``chaos.deployment.Deployment.components()``; a container target
fills the same values from its own description.
"""

from __future__ import annotations

import re

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = [
    "LANES",
    "LIVENESS_PREFIX",
    "RELAY_LIVENESS",
    "POOLS",
    "ROLES",
    "STOP_STAGES",
    "WORKER_STATE_PREFIX",
    "Component",
    "ComponentTable",
    "HealthProbe",
    "worker_from_name",
]

LANES = ("merit", "ai", "sms")
LIVENESS_PREFIX = "proctor:alive:"
"""A worker's liveness key is this + its RQ name (``worker_merit_1.<pid>.<hex>``, stack/lanes/worker.py);
here, standard library only, so the harness reads it without importing RQ."""
RELAY_LIVENESS = "relay"
"""The relay's liveness name (``proctor:alive:relay``): no worker name is this short (``stack.lanes.worker.worker_name``)."""
WORKER_STATE_PREFIX = "proctor:worker-state:"
"""+ a worker component's name (``worker_merit_1``): ``busy`` while it runs a job, else ``idle`` (or
``starting`` until its first dequeue). Written by the worker with RQ's own state (stack/lanes/worker.py),
so the harness sees a job in flight without a horse process to look for (chaos/nemesis/process.py)."""
ROLES = ("valkey", "sentinel", "ai_provider", "sms_gateway", "faultproxy", "web", "haproxy", "relay", "worker", "log_store",
         "shipper")
POOLS = ("web", *LANES)
"""What ``scale(pool, n)`` accepts: the web nodes, or the workers of one lane."""
STOP_STAGES: dict[str, int] = {"ai_provider": 1, "sms_gateway": 1, "faultproxy": 1, "sentinel": 1, "shipper": 1, "valkey": 2,
                               "log_store": 2}
"""The one stop order: stage 0 (web, haproxy, relay, workers: the front) first, then the
providers, the fault proxy, the log shipper and the Sentinels (1: none may start a failover
while the nodes stop), Valkey and the log store last (2). Roles not listed are front."""
_PROBE_KINDS = ("http", "valkey", "ready_file", "alive")
_HTTP_ACCEPT = ("200", "not5xx", "any")


@dataclass(frozen=True)
class HealthProbe:
    """How to tell that a component is healthy.

    ``http``: GET ``target``, passing per ``accept`` ("200", "not5xx", "any");
    ``valkey``: a TLS PING to the URL ``target`` with the CA file ``ca``;
    ``ready_file``: the file ``target`` holds the component's pid (a worker that can take a job);
    ``alive``: the process is running (nothing more to ask).
    """

    kind: str
    target: str = ""
    accept: str = "200"
    ca: str = ""

    def __post_init__(self) -> None:
        if self.kind not in _PROBE_KINDS:
            raise ValueError(f"HealthProbe.kind={self.kind!r}: one of {list(_PROBE_KINDS)}")
        if self.accept not in _HTTP_ACCEPT:
            raise ValueError(f"HealthProbe.accept={self.accept!r}: one of {list(_HTTP_ACCEPT)}")

    def as_dict(self) -> dict[str, str]:
        """The manifest's ``health`` entry (its format predates this class and is kept)."""
        if self.kind == "http":
            return {"http": self.target, "accept": self.accept}
        if self.kind == "valkey":  # the URL's credential stays out of the manifest
            return {"valkey": re.sub(r"//[^@/]*@", "//", self.target), "ca": self.ca}
        if self.kind == "ready_file":
            return {"ready_file": self.target}
        return {"alive": "process"}

    @classmethod
    def from_dict(cls, data: Mapping[str, str] | None) -> HealthProbe:
        data = data or {}
        if "http" in data:
            return cls("http", data["http"], accept=data.get("accept", "200"))
        if "valkey" in data:
            return cls("valkey", data["valkey"], ca=data.get("ca", ""))
        if "ready_file" in data:
            return cls("ready_file", data["ready_file"])
        return cls("alive")


@dataclass(frozen=True)
class Component:
    """One process of a deployment. ``pgid`` is None until it is started (and after it exits)."""

    name: str
    role: str
    lane: str | None = None
    index: int | None = None  # 1-based within its pool (web_2, worker_merit_1); None for singletons
    argv: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict, hash=False)  # added to the caller's environment
    health: HealthProbe = HealthProbe("alive")
    port: int | None = None
    admin_port: int | None = None  # a web node's loopback admin listener
    kind: str = ""  # the command that runs it when it differs from the role (fault proxy: its backend)
    pgid: int | None = None

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"Component {self.name!r}: role={self.role!r}, known: {list(ROLES)}")
        if (self.role == "worker") != (self.lane is not None):
            raise ValueError(f"Component {self.name!r}: a worker needs a lane, no other role has one")
        if self.lane is not None and self.lane not in LANES:
            raise ValueError(f"Component {self.name!r}: lane={self.lane!r}, known: {list(LANES)}")

    @property
    def pool(self) -> str | None:
        """What scaling counts it in: "web", a lane, or None (not scalable)."""
        return "web" if self.role == "web" else self.lane

    @property
    def stop_stage(self) -> int:
        return STOP_STAGES.get(self.role, 0)

    def manifest_entry(self) -> dict[str, Any]:
        return {"kind": self.kind or self.role, "role": self.role, "lane": self.lane, "index": self.index,
                "port": self.port, "health": self.health.as_dict(), "stop_stage": self.stop_stage}


def worker_from_name(name: str) -> Component:
    """The worker a component name denotes: ``worker_merit_2`` is the merit lane's worker 2.

    For a name that is all a caller has (a nemesis target in a history); anything but
    ``worker_{lane}_{index}`` with a known lane and an index from 1 is refused by name.
    """
    role, _, rest = name.partition("_")
    lane, _, index = rest.rpartition("_")
    if role != "worker" or lane not in LANES or not index.isdigit() or int(index) < 1:
        raise ValueError(f"component name {name!r} is not a worker's: expected worker_{{lane}}_{{index}} "
                         f"with lane in {list(LANES)} and index >= 1")
    return Component(name=name, role="worker", lane=lane, index=int(index))


class ComponentTable:
    """The components of one deployment, in start order, by name."""

    def __init__(self, components: Iterator[Component] | list[Component] = ()) -> None:
        self._by_name: dict[str, Component] = {}
        for component in components:
            self.add(component)

    def add(self, component: Component) -> Component:
        if component.name in self._by_name:
            raise ValueError(f"component {component.name!r} already exists")
        self._by_name[component.name] = component
        return component

    def put(self, component: Component) -> Component:
        """Add, or replace the component of that name in place (its start order is kept)."""
        self._by_name[component.name] = component
        return component

    def remove(self, name: str) -> Component | None:
        return self._by_name.pop(name, None)

    def get(self, name: str) -> Component:
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"no component named {name!r}; known: {', '.join(self._by_name)}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[Component]:
        return iter(list(self._by_name.values()))

    def __len__(self) -> int:
        return len(self._by_name)

    def names(self) -> list[str]:
        return list(self._by_name)

    def by_role(self, role: str) -> list[Component]:
        return sorted((c for c in self if c.role == role), key=_index_key)

    def pool(self, pool: str) -> list[Component]:
        """The web nodes ("web") or the workers of one lane, by index."""
        if pool not in POOLS:
            raise ValueError(f"pool must be one of {list(POOLS)}, not {pool!r}")
        return sorted((c for c in self if c.pool == pool), key=_index_key)

    def find(self, role: str, lane: str | None = None, index: int | None = None) -> Component | None:
        for component in self:
            if component.role == role and component.lane == lane and component.index == index:
                return component
        return None

    def with_pgids(self, pgid_of: Mapping[str, int | None]) -> list[Component]:
        """A copy of every component with its current process group filled in."""
        return [replace(c, pgid=pgid_of.get(c.name)) for c in self]


def _index_key(component: Component) -> int:
    return component.index or 0
