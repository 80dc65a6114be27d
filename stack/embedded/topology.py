"""What runs where in one embedded stack: its component table and what follows from it.

``Topology`` builds each ``Component`` (through the builders of ``spec.py``) with its
ports, and derives the rest from the table alone: the URLs, the ports, the links a
component reaches its services through, HAProxy's backends and the manifest's
component entries. The stack (``stack.py``) decides when to start what.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from stack.components import Component, ComponentTable, HealthProbe
from stack.config import Settings
from stack.embedded import StackError
from stack.embedded import haproxy as hap
from stack.embedded import sentinel as st
from stack.embedded import valkey as vk
from stack.embedded.certs import CertPaths
from stack.embedded.links import COMPONENT as FAULTPROXY
from stack.embedded.links import LinkManager
from stack.deploy.links import NODE_LINKS
from stack.deploy.ports import HOST
from stack.deploy.secrets import HAPROXY_SOURCE
from stack.embedded.spec import StackSpec, probe_health, python_component, web_component, worker_component
from stack.embedded.supervisor import ProcessSpec, Probe, Supervisor
from stack.valkey_acl import LIMITER_USER, draw_passwords, user_of_role

__all__ = ["SERVICES", "Topology"]

SERVICES = ("valkey", "ai_provider", "sms_gateway", "haproxy")
"""Every other component is pointed at these, so their ports are chosen first."""


class Topology:
    def __init__(self, spec: StackSpec, run_dir: Path, links: LinkManager) -> None:
        self.spec = spec
        self.run_dir = run_dir
        self.links = links
        self.table = ComponentTable()
        self.haproxy_socket: Path | None = None
        self.extra_env: dict[str, str] = {}  # e.g. PROCTOR_CONTROL_URL (the runner's control endpoint)
        self.proxy_secret = ""  # the run's PROCTOR_PROXY_SECRET, which HAProxy adds for the nodes
        self.valkey_passwords = draw_passwords()  # one per ACL user, fresh per run (stack/valkey_acl.py)
        self.sentinel = spec.valkey == "sentinel"

    # ------------------------------------------------------------ derived from the table
    def port(self, name: str) -> int:
        port = self.table.get(name).port
        assert port is not None, name
        return port

    @property
    def urls(self) -> dict[str, str]:
        """api (HAProxy), admin (first web node's admin listener), the services, each web node,
        haproxy_socket and faultproxy; empty before the services are planned."""
        if "haproxy" not in self.table:
            return {}
        urls = {"api": _http(self.port("haproxy")), "ai_provider": _http(self.port("ai_provider")),
                "sms_gateway": _http(self.port("sms_gateway")), "valkey": vk.valkey_url(self.port("valkey"))}
        if self.links.active:
            urls["faultproxy"] = self.links.url
        for web in self.table.pool("web"):
            urls.update({web.name: _http(web.port), f"{web.name}_admin": _http(web.admin_port)})
            urls.setdefault("admin", urls[f"{web.name}_admin"])
        if self.haproxy_socket is not None:
            urls["haproxy_socket"] = str(self.haproxy_socket)
        if self.sentinel:
            urls.update({name: vk.valkey_url(self.port(name)) for name in (*st.NODES[1:], *st.SENTINELS)})
        if "log_store" in self.table:
            urls["log_store"] = _http(self.port("log_store"))
        return urls

    def sentinel_settings(self) -> dict[str, str]:
        """Settings overrides that send every client through the Sentinels; none for one Valkey."""
        if not self.sentinel:
            return {}
        return {"valkey_sentinels": ",".join(f"{HOST}:{self.port(name)}" for name in st.SENTINELS),
                "valkey_service": st.SERVICE, "valkey_sentinel_password": self.valkey_passwords["discovery"]}

    @property
    def ports(self) -> dict[str, int]:
        """Every port the stack listens on, by component (``web_N_admin``: a node's admin listener)."""
        ports = {}
        for component in self.table:
            if component.port is not None:
                ports[component.name] = component.port
            if component.admin_port is not None:
                ports[f"{component.name}_admin"] = component.admin_port
        return ports

    def link_env(self, component: Component | None) -> dict[str, str]:
        """The environment that points ``component`` at the proxies of its links."""
        if not self.links.active or component is None:
            return {}
        urls = self.urls
        return self.links.env_for(component.role, urls["valkey"], urls["ai_provider"], urls["sms_gateway"])

    def manifest_entries(self, sup: Supervisor) -> dict[str, dict[str, Any]]:
        entries = {}
        trees = sup.trees()
        for name in trees:
            try:
                entry: dict[str, Any] = dict(sup.info(name))
                entry["argv"] = list(sup.spec(name).argv)
                component = self.table.get(name)
            except (StackError, KeyError):
                continue  # removed (scale down) since the snapshot
            entry.update(component.manifest_entry())
            if self.link_env(component):
                entry["via_links"] = self.link_env(component)  # environment pointing at proxies
            tree = sorted(trees[name])
            entry.update(pids=[pid for pid, _ in tree], tree=[list(i) for i in tree])
            entries[name] = entry
        return entries

    # ------------------------------------------------------------ running components
    def env(self, name: str, settings: Settings) -> dict[str, str]:
        """The environment of a process of the stack: ours, the settings, its links, its own additions."""
        component = self.table.get(name) if name in self.table else None
        env = dict(os.environ)
        env.update(settings.with_overrides(**self.spec.component_settings.get(name, {})).to_env())
        env.update(self.link_env(component))
        env.update(self.extra_env)
        env.update(PROCTOR_COMPONENT=name, PROCTOR_NODE_NAME=name, PYTHONUNBUFFERED="1")
        env.update(self.valkey_env(component.role if component is not None else ""))
        if component is not None:
            if component.admin_port is not None:
                env["PROCTOR_ADMIN_PORT"] = str(component.admin_port)
            env.update(component.env)
        return env

    def valkey_env(self, role: str) -> dict[str, str]:
        """A component's own Valkey credential, replacing the harness's that ``settings.to_env`` carries;
        a component that never talks to Valkey (a provider) gets none at all."""
        user = user_of_role(role)
        env = {"PROCTOR_VALKEY_USER": user or "", "PROCTOR_VALKEY_PASSWORD": self.valkey_passwords[user] if user else "",
               "PROCTOR_VALKEY_LIMITER_PASSWORD": ""}
        if role == "web":
            env["PROCTOR_VALKEY_LIMITER_PASSWORD"] = self.valkey_passwords[LIMITER_USER]
        return env

    def harness_credentials(self) -> dict[str, str]:
        """Settings overrides of the harness (this process): the ``harness`` ACL user."""
        return {"valkey_user": "harness", "valkey_password": self.valkey_passwords["harness"]}

    def process_spec(self, component: Component, settings: Settings, pid_of: Callable[[str], int | None]) -> ProcessSpec:
        """How the supervisor runs a component; Valkey, HAProxy and the fault proxy get our environment only."""
        alive_only = component.health.kind == "alive"
        own_env = component.role in ("valkey", "sentinel", "haproxy", "faultproxy", "shipper")
        env = dict(os.environ) if own_env else self.env(component.name, settings)
        if component.role == "faultproxy":
            env = self.links.server_env(env)
        return ProcessSpec(component.name, component.argv, env=env, ready=self._readiness(component, pid_of),
                           settle=self.spec.worker_settle if alive_only else 0.0, stop_stage=component.stop_stage)

    def _readiness(self, component: Component, pid_of: Callable[[str], int | None]) -> Probe | None:
        if component.role == "faultproxy":
            return self.links.ready  # its API answers and every planned proxy exists
        if component.health.kind == "alive":
            return None  # ready once alive for StackSpec.worker_settle
        if component.role == "sentinel":
            port, ca, password = component.port or 0, component.health.ca, self.valkey_passwords["discovery"]
            return lambda: st.sentinel_ready(port, ca, password)
        if self.sentinel and component.role == "valkey":
            url, ca = component.health.target, component.health.ca
            return lambda: vk.replication_ready(url, ca)
        health, name = component.health, component.name
        return lambda: bool(probe_health(health, pid_of(name)))

    # ------------------------------------------------------------ building components
    def plan_services(self, allocate: Callable[[], int]) -> None:
        for role in SERVICES:
            self.table.put(Component(role, role, port=allocate()))
        if self.sentinel:
            for index, name in enumerate(st.NODES[1:], 2):
                self.table.put(Component(name, "valkey", index=index, port=allocate()))
            for index, name in enumerate(st.SENTINELS, 1):
                self.table.put(Component(name, "sentinel", index=index, port=allocate()))

    def move(self, name: str, port: int) -> None:
        """A service lost its port to another process: it (and its link, if any) moves."""
        self.table.put(replace(self.table.get(name), port=port))
        if name in ("ai_provider", "sms_gateway") and self.links.wants(name):
            self.links.add(name, port)

    @property
    def node_links(self) -> bool:
        """Sentinel with node links: the fault proxy must run before the nodes (replication goes through it)."""
        return self.sentinel and any(self.links.wants(link) for link in NODE_LINKS)

    def announced_port(self, node: str) -> int:
        """Where everyone reaches ``node``: its link's proxy when it has one, else the node itself."""
        link = next((link for link, name in NODE_LINKS.items() if name == node), None)
        return (self.links.listen_port(link) if link else None) or self.port(node)

    def valkey(self, binary: Path, certs: CertPaths, name: str = "valkey") -> Component:
        """A data node: the one Valkey, or (Sentinel) ``valkey`` starting as primary, ``valkey_2`` as its replica."""
        port = self.port(name)
        extra: list[str] = []
        if self.sentinel:
            primary = None if name == st.NODES[0] else self.announced_port(st.NODES[0])
            extra = st.node_lines(self.announced_port(name), self.valkey_passwords, replica_of=primary,
                                  min_replicas=self.spec.valkey_min_replicas)
        conf = vk.write_valkey_config(self.run_dir, port, certs, self.spec.maxmemory, self.spec.valkey_maxclients,
                                      passwords=self.valkey_passwords, name=name, extra=extra)
        prober = self.harness_credentials()  # the supervisor's probe runs in the harness, as the harness user
        health = HealthProbe("valkey", vk.valkey_url(port, user=prober["valkey_user"], password=prober["valkey_password"]),
                             ca=str(certs.ca_cert))
        argv = tuple(vk.valkey_argv(binary, conf))
        index = self.table.get(name).index
        return self.table.put(Component(name, "valkey", index=index, argv=argv, health=health, port=port))

    def valkey_nodes(self, binary: Path, certs: CertPaths) -> list[Component]:
        return [self.valkey(binary, certs, name) for name in (st.NODES if self.sentinel else ("valkey",))]

    def sentinels(self, binary: Path, certs: CertPaths) -> list[Component]:
        """The three Sentinels (none for one Valkey), each monitoring ``valkey``, the first primary."""
        if not self.sentinel:
            return []
        return [self.sentinel_component(binary, certs, name) for name in st.SENTINELS]

    def sentinel_component(self, binary: Path, certs: CertPaths, name: str) -> Component:
        port = self.port(name)
        conf = st.write_sentinel_config(self.run_dir, name, port, certs, self.announced_port(st.NODES[0]),
                                        self.valkey_passwords)
        health = HealthProbe("valkey", vk.valkey_url(port, user="discovery", password=self.valkey_passwords["discovery"]),
                             ca=str(certs.ca_cert))
        index = self.table.get(name).index
        return self.table.put(Component(name, "sentinel", index=index, argv=(str(binary), str(conf)), health=health,
                                        port=port))

    def python(self, role: str) -> Component:
        """A provider (on its planned port) or the relay."""
        port = self.table.get(role).port if role in self.table else None
        return self.table.put(python_component(self.spec, self.run_dir, role, port))

    def web(self, index: int, port: int, admin_port: int) -> Component:
        component = self.table.put(web_component(self.spec, self.run_dir, index, port, admin_port))
        if self.links.wants(component.name):
            self.links.add(component.name, port)  # HAProxy reaches the node through it
        return component

    def worker(self, lane: str, index: int) -> Component:
        return self.table.put(worker_component(self.spec, self.run_dir, lane, index))

    def backend_port(self, name: str) -> int:
        """Where HAProxy reaches a web node: its link's proxy when it has one, else the node."""
        return self.links.listen_port(name) or self.table.get(name).port or 0

    def write_haproxy_config(self, without: Sequence[str] = ()) -> Path:
        webs = {c.name: self.backend_port(c.name) for c in self.table.pool("web") if c.name not in without}
        config, sock = hap.write_haproxy_config(self.run_dir, self.port("haproxy"), webs, source=HAPROXY_SOURCE,
                                                proxy_secret=self.proxy_secret)
        self.haproxy_socket = sock
        return config

    def haproxy(self, binary: Path) -> Component:
        config = self.write_haproxy_config()
        # Ready once the frontend answers at all: a 503 still proves HAProxy is up.
        health = HealthProbe("http", f"{self.urls['api']}/healthz", accept="any")
        argv = tuple(hap.haproxy_argv(binary, config))
        return self.table.put(Component("haproxy", "haproxy", argv=argv, health=health, port=self.port("haproxy")))

    def faultproxy_stage(self) -> list[Component]:
        """Plan the fixed links' proxies; the supervised fault proxy to start, if any."""
        if not self.links.active:
            return []
        self.links.plan_services(self.ports)
        return [self.faultproxy()] if self.links.supervised else []

    def faultproxy(self) -> Component:
        health = HealthProbe("http", f"{self.links.url}/proxies")
        return self.table.put(Component(FAULTPROXY, "faultproxy", argv=tuple(self.links.argv()), health=health,
                                        port=self.links.api_port, kind=self.links.backend))


def _http(port: int | None) -> str:
    return f"http://{HOST}:{port}"
