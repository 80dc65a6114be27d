"""``EmbeddedStack``: the reference stack as supervised local processes on 127.0.0.1.

Start-up order: certs -> valkey (TLS) -> init_ledger once -> ai_provider, sms_gateway
(+ faultproxy when links are requested) -> web_1..N -> haproxy -> relay -> workers. Each stage is started in parallel and
must be ready before the next one starts. Stop order is the reverse in three stages
(front, providers, valkey: ``stack.components.STOP_STAGES``); see ``Supervisor.stop_all``.

The stack is a facade: every process is a ``stack.components.Component`` in one
``ComponentTable`` (role, lane, index, argv, ports, health probe), and the supervisor
runs them. URLs, ports and the manifest's component entries are read from the table.
"""

from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from redis import Redis
from sqlalchemy import Engine

from stack.components import Component, ComponentTable
from stack.config import Settings
from stack.embedded import StackError
from stack.embedded import haproxy as hap
from stack.embedded.binaries import Binary, find_haproxy, find_sentinel, find_valkey
from stack.embedded.certs import CertPaths, make_certs
from stack.embedded.control import CONTROL_ENV, ControlServer
from stack.embedded.drain import DrainReport, admit_server, drain_server_idle, retire_server
from stack.embedded.links import LinkManager
from stack.embedded.manifest import package_versions, write_manifest
from stack.paths import new_run_dir, update_latest_link
from stack.deploy.secrets import HAPROXY_SOURCE, ROSTER_NAME, roster_student_ids, write_private_json
from stack.deploy.ports import free_port
from stack.embedded.spec import (
    COMPONENT_MODULES,
    DEFAULT_COMMANDS,
    LANES,
    SCALABLE,
    StackSpec,
    http_probe,
    missing_component_modules,
    stack_settings,
)
from stack.embedded.supervisor import ProcessSpec, Supervisor
from stack.embedded.topology import Topology
from stack.embedded.watchdog import identity
from stack.ledger.engine import init_ledger, make_engine
from stack.ledger.roster import issue_roster

__all__ = [
    "EmbeddedStack",
    "StackSpec",
    "DEFAULT_COMMANDS",
    "COMPONENT_MODULES",
    "SCALABLE",
    "missing_component_modules",
    "http_probe",
]

_BIND_FAILURE = re.compile(r"address already in use", re.IGNORECASE)


class EmbeddedStack:
    """Start with ``with EmbeddedStack(spec) as stack:``; everything is stopped on exit."""

    def __init__(self, spec: StackSpec | None = None) -> None:
        self.spec = spec or StackSpec()
        self.spec.validate()
        raw = self.spec.run_dir
        self.run_dir = (Path(raw) if raw is not None else new_run_dir(self.spec.name)).resolve()
        self.settings: Settings = Settings()
        self.startup_seconds: float | None = None
        self._sup: Supervisor | None = None
        self._certs: CertPaths | None = None
        self._binaries: dict[str, Binary] = {}
        self._engine: Engine | None = None
        self._clients: list[Redis] = []
        self._status = "new"
        self._error: str | None = None
        self._manifest_lock = threading.Lock()
        self._scale_lock = threading.Lock()
        self._t0 = 0.0
        self._package_versions = package_versions()
        self._self_ticks = (identity(os.getpid()) or (0, 0))[1]
        self._watchdog_ident: tuple[int, int] | None = None
        self._control: ControlServer | None = None
        self._egress: Any = None  # stack.embedded.egress.FailoverController with StackSpec.sms_egress
        self._links = LinkManager(self.spec.links, self.run_dir, self.spec.faultproxy_seed)
        self._topo = Topology(self.spec, self.run_dir, self._links)
        self._table = self._topo.table

    # ------------------------------------------------------------ lifecycle
    def __enter__(self) -> "EmbeddedStack":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> "EmbeddedStack":
        if self._status != "new":
            raise StackError(f"stack already {self._status}")
        self._t0 = time.monotonic()
        missing = [] if set(COMPONENT_MODULES) <= set(self.spec.commands) else missing_component_modules(self.spec.commands)
        if missing:
            raise StackError(f"component modules not found: {', '.join(missing)} (see docs/architecture.md)")
        self._binaries = {"valkey": find_valkey(), "haproxy": find_haproxy()}
        if self.spec.valkey == "sentinel":
            self._binaries["sentinel"] = find_sentinel()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.run_dir.chmod(0o700)  # evidence (ledger.db, roster, history, exports) is the owner's alone
        self._status = "starting"
        try:
            self._start_all()
        except BaseException as exc:
            self._error = str(exc)
            self._shutdown("failed")
            raise
        self.startup_seconds = time.monotonic() - self._t0
        self._status = "ready"
        self._write_manifest()
        update_latest_link(self.run_dir)
        return self

    def stop(self) -> None:
        if self._status in ("new", "stopped", "failed", "detached"):
            return
        self._shutdown("stopped")

    def detach(self) -> None:
        """Leave the stack running after this process exits: no more autorestart and no
        orphan protection. Stop it later with ``proctor down <run_dir>``."""
        sup = self.supervisor
        for client in self._clients:
            client.close()
        self._clients.clear()
        sup.detach()
        self._status = "detached"
        self._write_manifest()

    def _shutdown(self, final_status: str) -> None:
        self._status = "stopping"
        self._write_manifest()
        for client in self._clients:
            client.close()
        self._clients.clear()
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None
        if self._control is not None:
            self._control.stop()
            self._control = None
        if self._egress is not None:
            self._egress.stop()
        if self._sup is not None:
            self._sup.stop_all(self.spec.stop_grace)
        self._links.cleanup_external()
        if self._topo.haproxy_socket is not None:
            hap.remove_admin_socket(self._topo.haproxy_socket)
        self._status = final_status
        self._write_manifest()

    def _start_all(self) -> None:
        certs = self._certs = make_certs(self.run_dir / "tls")
        self._topo.plan_services(free_port)
        self.settings = stack_settings(self.spec, self.run_dir, self.urls, certs.ca_cert).with_overrides(
            **self._topo.harness_credentials(), **self._topo.sentinel_settings())
        self._topo.proxy_secret = self.settings.proxy_secret
        self._start_control()
        self._sup = Supervisor(self.run_dir, on_change=self._write_manifest)
        self._watchdog_ident = self._sup.watchdog_identity  # kept after detach, for `proctor down`
        self._write_manifest()
        # With node links the replica syncs through the fault proxy: it must run first.
        proxy_first = self._topo.faultproxy_stage() if self._topo.node_links else None
        if proxy_first is not None:
            self._start_stage(proxy_first)
            self._links.mark_live()
            self._links.push()  # an external Toxiproxy gets the node links now
        self._start_stage(self._topo.valkey_nodes(self._binaries["valkey"].path, certs))
        self._start_log_shipping()
        init_ledger(self.engine, self.settings)  # once, so components never race to create tables
        self._issue_roster()
        # The Sentinels find each other (hellos every 2 s) while the providers start.
        sentinels = self._topo.sentinels(self._binaries["sentinel"].path, certs) if self._topo.sentinel else []
        proxy = self._topo.faultproxy_stage() if proxy_first is None else []
        self._start_stage([self._service("ai_provider"), self._service("sms_gateway"), *proxy, *sentinels])
        if self._links.active:
            self._links.mark_live()
            # Creates the proxies on an external Toxiproxy; for ours it re-points any proxy whose
            # provider moved to a new port after a lost bind race (unchanged ones stay untouched).
            self._links.push()
        self._start_stage([self._web(i) for i in range(1, self.spec.web + 1)])
        self._start_stage([self._service("haproxy")])
        self._start_stage([self._service("relay")])
        self._start_egress()
        self._start_stage([self._topo.worker(lane, i) for lane in LANES for i in range(1, self.spec.worker_count(lane) + 1)])
        if self._egress is not None:
            self._egress.start()

    def _start_log_shipping(self) -> None:
        """The log store, then the shipper following every component's log (docs/log-shipping.md)."""
        if self.spec.log_shipping is None:
            return
        from stack.embedded.logship import log_store_component, shipper_component

        self._log_relp_port = free_port()
        store = self._table.put(log_store_component(self.run_dir, free_port(), self._log_relp_port))
        self._start_stage([store])
        self._start_stage([self._table.put(shipper_component(self.run_dir, self._log_relp_port, self.spec.log_shipping))])

    def export_logs(self, dest: Path) -> dict[str, Any]:
        """The log store's ledger, the lines produced and the shipper's counters into dest/ledgers/."""
        from stack.embedded.logship import export_logs

        return export_logs(self.run_dir, self.urls["log_store"], self.settings.log_store_token, dest)

    def _start_egress(self) -> None:
        """Before the workers: SMS worker 1 holds the lane and the reserved address (docs/egress.md)."""
        if self.spec.sms_egress is None or self.spec.sms_workers < 1:
            return
        from stack.deploy.egress import FailoverController
        from stack.embedded.egress import failover_policy

        self._egress = FailoverController(self.run_dir, failover_policy(self.spec.sms_egress), self._is_alive,
                                          lambda: [c.name for c in self._table.pool("sms")])
        self._egress.attach_first("worker_sms_1")

    def _is_alive(self, name: str) -> bool:
        sup = self.supervisor
        return name in sup.names() and bool(sup.info(name).get("alive"))

    def egress(self) -> dict[str, Any]:
        """The SMS egress of this stack: reserved address, each SMS worker's host, the attachment
        and its history (``{}`` without ``StackSpec.sms_egress``)."""
        if self._egress is None:
            return {}
        from stack.deploy.egress import SMS_RESERVED_ADDRESS, sms_host_address

        current = self._egress.current()
        return {"policy": self._egress.policy.name, "reserved": SMS_RESERVED_ADDRESS,
                "hosts": {c.name: sms_host_address(c.index or 0) for c in self._table.pool("sms")},
                "attachment": None if current is None else current.__dict__, "events": self._egress.history()}

    def _start_control(self) -> None:
        """The runner-side executor of ``POST /admin/scale`` (stack/embedded/control.py); web
        nodes learn its URL from ``PROCTOR_CONTROL_URL``. Port 0: the kernel picks, no race."""
        self._control = ControlServer(self.settings.admin_token, self.scale, self.pool_sizes).start(0)
        self._topo.extra_env[CONTROL_ENV] = self._control.url

    def _issue_roster(self) -> None:
        """Enrol ``roster_size`` students per exam with fresh access codes; the codes go to
        ``roster.json`` (0600) for the harness, their HMACs to the ledger."""
        ids = roster_student_ids(self.settings.roster_size)
        exams = {code: issue_roster(self.engine, self.settings.roster_key, code, ids) for code in self.settings.exams}
        write_private_json(self.run_dir / ROSTER_NAME, {"exams": exams})

    def _start_stage(self, components: list[Component]) -> None:
        sup = self.supervisor
        for component in components:
            sup.start(self._process_spec(component))
        for component in components:
            try:
                sup.wait_ready(component.name, self.spec.ready_timeout)
            except StackError:
                if not self._lost_bind_race(component):
                    raise
                self._retry_on_new_port(component)

    def _lost_bind_race(self, component: Component) -> bool:
        """Another process took the port between our allocation and the child's bind."""
        return component.port is not None and bool(_BIND_FAILURE.search(self.supervisor.log_tail(component.name)))

    def _retry_on_new_port(self, lost: Component) -> None:
        sup = self.supervisor
        sup.remove(lost.name, grace=1.0)
        if lost.role == "web":
            component = self._web(lost.index or 0)  # allocates fresh ports itself
        elif lost.role == "faultproxy":  # no consumer has started yet: every proxy may move
            self._links.reallocate()
            component = self._topo.faultproxy()
        else:
            self._topo.move(lost.name, free_port())
            self._sync_settings()
            component = self._service(lost.name)
        sup.start(self._process_spec(component))
        sup.wait_ready(component.name, self.spec.ready_timeout)

    # ------------------------------------------------------------ the API
    @property
    def urls(self) -> dict[str, str]:
        """api, admin, the services, each web node, haproxy_socket, faultproxy (``Topology.urls``),
        and ``control``: the runner's control endpoint (stack/embedded/control.py)."""
        urls = self._topo.urls
        if urls and self._control is not None:
            urls["control"] = self._control.url
        return urls

    @property
    def ports(self) -> dict[str, int]:
        return self._topo.ports

    def links(self) -> dict[str, dict[str, str]]:
        """{link name: {"listen": "127.0.0.1:P", "upstream": "127.0.0.1:Q"}} of the proxied links."""
        return self._links.links()

    def component(self, name: str) -> Component:
        """One running component, with its current process group."""
        running = self.supervisor.names()
        if name not in running:
            raise StackError(f"no component named {name!r}; known: {', '.join(running)}")
        return replace(self._table.get(name), pgid=self.supervisor.pid(name))

    def component_table(self) -> ComponentTable:
        """The running components (start order), each with its current process group."""
        sup = self.supervisor
        running = ComponentTable([self._table.get(name) for name in sup.names()])
        return ComponentTable(running.with_pgids({name: sup.pid(name) for name in running.names()}))

    def restart(self, name: str) -> None:
        self.supervisor.restart(name, self.spec.stop_grace, self.spec.ready_timeout)

    def wait_healthy(self, name: str, timeout: float = 30.0) -> None:
        self.supervisor.wait_ready(name, timeout)

    def ready_seconds(self, name: str) -> float | None:
        """Seconds from the component's (re)start to its first passing readiness probe."""
        value = self.supervisor.info(name).get("ready_seconds")
        return float(value) if isinstance(value, (int, float)) else None

    def scale(self, pool: str, n: int) -> dict[str, Any]:
        """Set the number of web nodes ("web") or of workers of one lane ("merit", "ai", "sms") to ``n``.

        Web nodes leave gracefully (drain, wait idle, SIGTERM; stack/embedded/drain.py) and
        join only once ready. Returns ``{pool, from, to, drains}``, one drain report per node
        removed; calls are serialized (the control endpoint and a nemesis may both scale)."""
        if pool not in SCALABLE:
            raise StackError(f"scale: kind must be one of {sorted(SCALABLE)}, not {pool!r}")
        with self._scale_lock:
            before = len(self._table.pool(pool))
            drains = self._scale_web(n) if pool == "web" else self._scale_workers(pool, n)
            self._write_manifest()
        return {"pool": pool, "from": before, "to": n, "drains": [d.as_dict() for d in drains]}

    def pool_sizes(self) -> dict[str, int]:
        """{pool: running members} for "web" and every lane."""
        return {pool: len(self._table.pool(pool)) for pool in ("web", *LANES)}

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = make_engine(self.settings)
        return self._engine

    def valkey(self, purpose: str = "queue") -> Redis:
        """A redis-py client over TLS with the run's CA; closed when the stack stops."""
        from stack.valkey_client import valkey_client

        client = valkey_client(self.settings, purpose)
        self._clients.append(client)
        return client

    def valkey_as(self, user: str) -> Redis:
        """A client as one component's ACL user (stack/valkey_acl.py): what may that credential do?"""
        from stack.valkey_acl import LIMITER_USER
        from stack.valkey_client import valkey_client

        password = self._topo.valkey_passwords[user]
        settings = self.settings.with_overrides(valkey_user=user, valkey_password=password,
                                                valkey_limiter_password=password)
        client = valkey_client(settings, "limiter" if user == LIMITER_USER else "probe")
        self._clients.append(client)
        return client

    # ------------------------------------------------------------ scaling
    def _scale_web(self, n: int) -> list[DrainReport]:
        if n < 1:
            raise StackError("scale('web', n): at least one web node")
        current = self._table.pool("web")
        sock = self._haproxy_socket()
        if n > len(current):
            joining = [self._web(i) for i in range(len(current) + 1, n + 1)]
            self._start_stage(joining)  # ready before enabled
            for component in joining:
                admit_server(sock, component.name, self._topo.backend_port(component.name), HAPROXY_SOURCE)
        reports = []
        for component in reversed(current[n:]):
            reports.append(drain_server_idle(sock, component.name, self.spec.drain_limit))
            self._forget(component.name)  # SIGTERM, then SIGKILL after stop_grace
            retire_server(sock, component.name)
        self._topo.write_haproxy_config()  # a later HAProxy restart starts with these servers
        return reports

    def _scale_workers(self, lane: str, n: int) -> list[DrainReport]:
        if n < 0:
            raise StackError(f"scale({lane!r}, n): n must be >= 0")
        current = self._table.pool(lane)
        if n > len(current):
            self._start_stage([self._topo.worker(lane, i) for i in range(len(current) + 1, n + 1)])
        for component in reversed(current[n:]):
            self._forget(component.name)
        return []

    def _haproxy_socket(self) -> Path:
        if self._topo.haproxy_socket is None:
            raise StackError("scale: HAProxy has no runtime API socket yet")
        return self._topo.haproxy_socket

    def _forget(self, name: str) -> None:
        self.supervisor.remove(name, self.spec.stop_grace)
        self._links.remove(name)  # a web_N link goes with its node
        self._table.remove(name)

    # ------------------------------------------------------------ components
    def _web(self, index: int) -> Component:
        port = free_port()
        return self._topo.web(index, port, admin_port=free_port())  # admin: loopback only, HAProxy never routes it

    def _service(self, role: str) -> Component:
        """(Re)build a Valkey node, a Sentinel, HAProxy, a provider or the relay on its current port
        (``role`` is the component's name: a role for the singletons, ``valkey_2``, ``sentinel_N``)."""
        kind = self._table.get(role).role if role in self._table else role
        if kind in ("valkey", "sentinel"):
            assert self._certs is not None
            if kind == "sentinel":
                return self._topo.sentinel_component(self._binaries["sentinel"].path, self._certs, role)
            return self._topo.valkey(self._binaries["valkey"].path, self._certs, role)
        if role == "haproxy":
            return self._topo.haproxy(self._binaries["haproxy"].path)
        return self._topo.python(role)

    def _sync_settings(self) -> None:
        """Settings carry the service URLs: follow a service that moved to a new port."""
        urls = self.urls
        self.settings = self.settings.with_overrides(
            valkey_url=urls["valkey"], ai_url=urls["ai_provider"], sms_url=urls["sms_gateway"],
            **self._topo.sentinel_settings())

    def _env(self, name: str) -> dict[str, str]:
        return self._topo.env(name, self.settings)

    def _process_spec(self, component: Component) -> ProcessSpec:
        return self._topo.process_spec(component, self.settings, self.supervisor.pid)

    # ------------------------------------------------------------ manifest
    @property
    def supervisor(self) -> Supervisor:
        """The running components' processes: pids, kill, pause, resume, autorestart, log tails.
        Callers use it directly (no pass-throughs here); StackError before start."""
        if self._sup is None:
            raise StackError("the stack is not started (use `with EmbeddedStack(spec) as stack:`)")
        return self._sup

    def _write_manifest(self) -> None:
        with self._manifest_lock:
            watchdog = self._watchdog_ident
            data = {
                "name": self.spec.name,
                "origin": self.spec.origin,
                "status": self._status,
                "error": self._error,
                "run_dir": str(self.run_dir),
                "supervisor_pid": os.getpid(),
                "supervisor_start_ticks": self._self_ticks,
                "watchdog_pid": watchdog[0] if watchdog else None,
                "watchdog_start_ticks": watchdog[1] if watchdog else None,
                "startup_seconds": self.startup_seconds,
                "updated_at": time.time(),
                "spec": {f.name: getattr(self.spec, f.name) for f in fields(self.spec)
                         if f.name in ("web", "merit_workers", "ai_workers", "sms_workers", "valkey")},
                "urls": self.urls,
                "links": self.links(),
                "faultproxy": self._links.manifest() if self._links.active else None,
                "ports": self.ports,
                "components": self._topo.manifest_entries(self._sup) if self._sup else {},
                "versions": {
                    **{key: f"{b.name} {b.version}" for key, b in self._binaries.items()},
                    **self._package_versions,
                },
                "settings": self.settings.to_env(),
                "component_settings": {name: dict(o) for name, o in self.spec.component_settings.items()},
            }
            if self.run_dir.is_dir():
                write_manifest(self.run_dir, data)
