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
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from redis import Redis
from sqlalchemy import Engine

from stack.components import Component, ComponentTable, HealthProbe
from stack.config import Settings, load_settings
from stack.embedded import StackError
from stack.embedded import haproxy as hap
from stack.embedded import valkey as vk
from stack.embedded.binaries import Binary, find_haproxy, find_valkey
from stack.embedded.certs import CertPaths, make_certs
from stack.embedded.links import COMPONENT as FAULTPROXY
from stack.embedded.links import LinkManager
from stack.embedded.manifest import package_versions, update_latest_link, write_manifest
from stack.embedded.secrets import HAPROXY_SOURCE, ROSTER_NAME, roster_student_ids, run_secrets, write_private_json
from stack.embedded.ports import HOST, free_port
from stack.embedded.spec import (
    COMPONENT_MODULES,
    DEFAULT_COMMANDS,
    LANES,
    SCALABLE,
    StackSpec,
    default_run_dir,
    http_probe,
    missing_component_modules,
    probe_health,
    python_component,
    web_component,
    worker_component,
)
from stack.embedded.supervisor import ProcessSpec, Probe, Supervisor
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
    "default_run_dir",
    "http_probe",
]

_BIND_FAILURE = re.compile(r"address already in use", re.IGNORECASE)


class EmbeddedStack:
    """Start with ``with EmbeddedStack(spec) as stack:``; everything is stopped on exit."""

    def __init__(self, spec: StackSpec | None = None) -> None:
        self.spec = spec or StackSpec()
        self.spec.validate()
        raw = self.spec.run_dir
        self.run_dir = (Path(raw) if raw is not None else default_run_dir(self.spec.name)).resolve()
        self.settings: Settings = Settings()
        self.startup_seconds: float | None = None
        self._table = ComponentTable()
        self._haproxy_socket: Path | None = None
        self._sup: Supervisor | None = None
        self._certs: CertPaths | None = None
        self._binaries: dict[str, Binary] = {}
        self._engine: Engine | None = None
        self._clients: list[Redis] = []
        self._status = "new"
        self._error: str | None = None
        self._manifest_lock = threading.Lock()
        self._t0 = 0.0
        self._package_versions = package_versions()
        self._self_ticks = (identity(os.getpid()) or (0, 0))[1]
        self._watchdog_ident: tuple[int, int] | None = None
        self._links = LinkManager(self.spec.links, self.run_dir, self.spec.faultproxy_seed)

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
        sup = self._supervisor()
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
        if self._sup is not None:
            self._sup.stop_all(self.spec.stop_grace)
        self._links.cleanup_external()
        if self._haproxy_socket is not None:
            hap.remove_admin_socket(self._haproxy_socket)
        self._status = final_status
        self._write_manifest()

    def _start_all(self) -> None:
        self._certs = make_certs(self.run_dir / "tls")
        self._plan_services()
        self.settings = self._make_settings()
        self._sup = Supervisor(self.run_dir, on_change=self._write_manifest)
        self._watchdog_ident = self._sup.watchdog_identity  # kept after detach, for `proctor down`
        self._write_manifest()
        self._start_stage([self._valkey()])
        init_ledger(self.engine, self.settings)  # once, so components never race to create tables
        self._issue_roster()
        self._start_stage([self._python("ai_provider"), self._python("sms_gateway"), *self._faultproxy_stage()])
        if self._links.active:
            self._links.mark_live()
            # Creates the proxies on an external Toxiproxy; for ours it re-points any proxy whose
            # provider moved to a new port after a lost bind race (unchanged ones stay untouched).
            self._links.push()
        self._start_stage([self._web(i) for i in range(1, self.spec.web + 1)])
        self._start_stage([self._haproxy()])
        self._start_stage([self._python("relay")])
        self._start_stage([self._worker(lane, i) for lane in LANES for i in range(1, self.spec.worker_count(lane) + 1)])

    def _issue_roster(self) -> None:
        """Enrol ``roster_size`` students per exam with fresh access codes; the codes go to
        ``roster.json`` (0600) for the harness, their HMACs to the ledger."""
        ids = roster_student_ids(self.settings.roster_size)
        exams = {code: issue_roster(self.engine, self.settings.roster_key, code, ids) for code in self.settings.exams}
        write_private_json(self.run_dir / ROSTER_NAME, {"exams": exams})

    def _start_stage(self, components: list[Component]) -> None:
        sup = self._supervisor()
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
        return component.port is not None and bool(_BIND_FAILURE.search(self._supervisor().log_tail(component.name)))

    def _retry_on_new_port(self, lost: Component) -> None:
        sup = self._supervisor()
        sup.remove(lost.name, grace=1.0)
        if lost.role == "web":
            component = self._web(lost.index or 0)  # allocates fresh ports itself
        elif lost.role == "faultproxy":  # no consumer has started yet: every proxy may move
            self._links.reallocate()
            component = self._faultproxy()
        else:
            port = self._table.put(replace(lost, port=free_port())).port
            self._sync_settings()
            if lost.role in ("ai_provider", "sms_gateway") and self._links.wants(lost.name):
                self._links.add(lost.name, port or 0)
            component = {"valkey": self._valkey, "haproxy": self._haproxy}.get(lost.role, lambda: self._python(lost.role))()
        sup.start(self._process_spec(component))
        sup.wait_ready(component.name, self.spec.ready_timeout)

    # ------------------------------------------------------------ the API
    @property
    def urls(self) -> dict[str, str]:
        """api (HAProxy), admin (first web node's admin listener), the services, each web node,
        haproxy_socket and faultproxy; empty before start."""
        if "haproxy" not in self._table:
            return {}
        urls = {"api": _http(self._port("haproxy")), "ai_provider": _http(self._port("ai_provider")),
                "sms_gateway": _http(self._port("sms_gateway")), "valkey": vk.valkey_url(self._port("valkey"))}
        if self._links.active:
            urls["faultproxy"] = self._links.url
        for web in self._table.pool("web"):
            urls.update({web.name: _http(web.port), f"{web.name}_admin": _http(web.admin_port)})
            urls.setdefault("admin", urls[f"{web.name}_admin"])
        if self._haproxy_socket is not None:
            urls["haproxy_socket"] = str(self._haproxy_socket)
        return urls

    @property
    def ports(self) -> dict[str, int]:
        """Every port the stack listens on, by component (``web_N_admin``: a node's admin listener)."""
        ports = {}
        for component in self._table:
            if component.port is not None:
                ports[component.name] = component.port
            if component.admin_port is not None:
                ports[f"{component.name}_admin"] = component.admin_port
        return ports

    def links(self) -> dict[str, dict[str, str]]:
        """{link name: {"listen": "127.0.0.1:P", "upstream": "127.0.0.1:Q"}} of the proxied links."""
        return self._links.links()

    def components(self) -> list[str]:
        """The names of the running components, in start order."""
        return self._supervisor().names()

    def component(self, name: str) -> Component:
        """One running component, with its current process group."""
        if name not in self.components():
            raise StackError(f"no component named {name!r}; known: {', '.join(self.components())}")
        return replace(self._table.get(name), pgid=self._supervisor().pid(name))

    def component_table(self) -> ComponentTable:
        """The running components (start order), each with its current process group."""
        return ComponentTable([self.component(name) for name in self.components()])

    def pids(self, name: str) -> list[int]:
        return self._supervisor().pids(name)

    def kill(self, name: str, sig: int = signal.SIGKILL) -> list[int]:
        return self._supervisor().kill(name, sig)

    def pause(self, name: str) -> list[int]:
        return self._supervisor().pause(name)

    def resume(self, name: str) -> list[int]:
        return self._supervisor().resume(name)

    def restart(self, name: str) -> None:
        self._supervisor().restart(name, self.spec.stop_grace, self.spec.ready_timeout)

    def set_autorestart(self, name: str, enabled: bool) -> None:
        self._supervisor().set_autorestart(name, enabled)

    def wait_healthy(self, name: str, timeout: float = 30.0) -> None:
        self._supervisor().wait_ready(name, timeout)

    def ready_seconds(self, name: str) -> float | None:
        """Seconds from the component's (re)start to its first passing readiness probe."""
        value = self._supervisor().info(name).get("ready_seconds")
        return float(value) if isinstance(value, (int, float)) else None

    def log_tail(self, name: str, lines: int = 40) -> str:
        return self._supervisor().log_tail(name, lines)

    def scale(self, pool: str, n: int) -> None:
        """Set the number of web nodes ("web") or of workers of one lane ("merit", "ai", "sms") to ``n``."""
        if pool not in SCALABLE:
            raise StackError(f"scale: kind must be one of {sorted(SCALABLE)}, not {pool!r}")
        if pool == "web":
            self._scale_web(n)
        else:
            self._scale_workers(pool, n)
        self._write_manifest()

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = make_engine(self.settings)
        return self._engine

    def valkey(self, purpose: str = "queue") -> Redis:
        """A redis-py client over TLS with the run's CA; closed when the stack stops."""
        from stack.lanes.connection import valkey_client

        client = valkey_client(self.settings, purpose)
        self._clients.append(client)
        return client

    # ------------------------------------------------------------ scaling
    def _scale_web(self, n: int) -> None:
        if n < 1:
            raise StackError("scale('web', n): at least one web node")
        current = self._table.pool("web")
        if n > len(current):
            self._start_stage([self._web(i) for i in range(len(current) + 1, n + 1)])
            self._reload_haproxy()
        elif n < len(current):
            doomed = [c.name for c in current[n:]]
            self._reload_haproxy(without=doomed)  # stop sending traffic before the nodes go away
            for name in reversed(doomed):
                self._forget(name)

    def _scale_workers(self, lane: str, n: int) -> None:
        if n < 0:
            raise StackError(f"scale({lane!r}, n): n must be >= 0")
        current = self._table.pool(lane)
        if n > len(current):
            self._start_stage([self._worker(lane, i) for i in range(len(current) + 1, n + 1)])
        for component in reversed(current[n:]):
            self._forget(component.name)

    def _forget(self, name: str) -> None:
        self._supervisor().remove(name, self.spec.stop_grace)
        self._links.remove(name)  # a web_N link goes with its node
        self._table.remove(name)

    def _reload_haproxy(self, without: Sequence[str] = ()) -> None:
        self._write_haproxy_config(without)
        self._supervisor().restart("haproxy", self.spec.stop_grace, self.spec.ready_timeout)

    # ------------------------------------------------------------ components
    def _plan_services(self) -> None:
        """The services every other component is pointed at get their ports first."""
        for role in ("valkey", "ai_provider", "sms_gateway", "haproxy"):
            self._table.put(Component(role, role, port=free_port()))

    def _port(self, name: str) -> int:
        port = self._table.get(name).port
        assert port is not None, name
        return port

    def _sync_settings(self) -> None:
        """Settings carry the service URLs: follow a service that moved to a new port."""
        urls = self.urls
        self.settings = self.settings.with_overrides(
            valkey_url=urls["valkey"], ai_url=urls["ai_provider"], sms_url=urls["sms_gateway"])

    def _make_settings(self) -> Settings:
        assert self._certs is not None
        overrides = dict(self.spec.settings_overrides)
        if "run_dir" in overrides:
            raise StackError("settings_overrides['run_dir']: use StackSpec.run_dir")
        base = load_settings()  # the caller's environment (e.g. TIME_SCALE=...) is the default
        urls = self.urls
        return base.with_overrides(
            **{**run_secrets(), "trusted_proxies": (HAPROXY_SOURCE,)},
            **overrides,
            run_dir=self.run_dir,
            valkey_url=urls["valkey"],
            valkey_ca=str(self._certs.ca_cert),
            ai_url=urls["ai_provider"],
            sms_url=urls["sms_gateway"],
        )

    def _env(self, name: str) -> dict[str, str]:
        """The environment of a process of the stack: ours, the settings, its links, its own additions."""
        component = self._table.get(name) if name in self._table else None
        env = dict(os.environ)
        env.update(self.settings.to_env())
        env.update(self._link_env(component))
        env.update(PROCTOR_COMPONENT=name, PROCTOR_NODE_NAME=name, PYTHONUNBUFFERED="1")
        if component is not None:
            if component.admin_port is not None:
                env["PROCTOR_ADMIN_PORT"] = str(component.admin_port)
            env.update(component.env)
        return env

    def _process_spec(self, component: Component) -> ProcessSpec:
        """How the supervisor runs a component; Valkey and HAProxy inherit our environment."""
        alive_only = component.health.kind == "alive"
        env = dict(os.environ) if component.role in ("valkey", "haproxy", "faultproxy") else self._env(component.name)
        return ProcessSpec(component.name, component.argv, env=env, ready=self._readiness(component),
                           settle=self.spec.worker_settle if alive_only else 0.0, stop_stage=component.stop_stage)

    def _readiness(self, component: Component) -> Probe | None:
        if component.role == "faultproxy":
            return self._links.ready  # its API answers and every planned proxy exists
        if component.health.kind == "alive":
            return None  # ready once alive for StackSpec.worker_settle
        sup, health, name = self._supervisor(), component.health, component.name
        return lambda: bool(probe_health(health, sup.pid(name)))

    def _valkey(self) -> Component:
        assert self._certs is not None
        port = self._port("valkey")
        conf = vk.write_valkey_config(self.run_dir, port, self._certs, self.spec.maxmemory, self.spec.valkey_maxclients)
        health = HealthProbe("valkey", vk.valkey_url(port), ca=str(self._certs.ca_cert))
        argv = tuple(vk.valkey_argv(self._binaries["valkey"].path, conf))
        return self._table.put(Component("valkey", "valkey", argv=argv, health=health, port=port))

    def _python(self, role: str) -> Component:
        port = self._table.get(role).port if role in self._table else None
        return self._table.put(python_component(self.spec, self.run_dir, role, port))

    def _web(self, index: int) -> Component:
        port = free_port()
        admin_port = free_port()  # loopback admin listener; HAProxy never routes it
        component = self._table.put(web_component(self.spec, self.run_dir, index, port, admin_port))
        if self._links.wants(component.name):
            self._links.add(component.name, port)  # HAProxy reaches the node through it
        return component

    def _worker(self, lane: str, index: int) -> Component:
        return self._table.put(worker_component(self.spec, self.run_dir, lane, index))

    def _write_haproxy_config(self, without: Sequence[str] = ()) -> Path:
        webs = {c.name: self._links.listen_port(c.name) or c.port or 0
                for c in self._table.pool("web") if c.name not in without}
        config, sock = hap.write_haproxy_config(self.run_dir, self._port("haproxy"), webs, source=HAPROXY_SOURCE)
        self._haproxy_socket = sock
        return config

    def _haproxy(self) -> Component:
        config = self._write_haproxy_config()
        # Ready once the frontend answers at all: a 503 still proves HAProxy is up.
        health = HealthProbe("http", f"{self.urls['api']}/healthz", accept="any")
        argv = tuple(hap.haproxy_argv(self._binaries["haproxy"].path, config))
        return self._table.put(Component("haproxy", "haproxy", argv=argv, health=health, port=self._port("haproxy")))

    # ------------------------------------------------------------ manifest
    def _supervisor(self) -> Supervisor:
        if self._sup is None:
            raise StackError("the stack is not started (use `with EmbeddedStack(spec) as stack:`)")
        return self._sup

    def _component_entries(self) -> dict[str, dict[str, Any]]:
        sup = self._sup
        if sup is None:
            return {}
        entries = {}
        trees = sup.trees()
        for name in trees:
            try:
                entry: dict[str, Any] = dict(sup.info(name))
                entry["argv"] = list(sup.spec(name).argv)
                component = self._table.get(name)
            except (StackError, KeyError):
                continue  # removed (scale down) since the snapshot
            entry.update(component.manifest_entry())
            if self._link_env(component):
                entry["via_links"] = self._link_env(component)  # environment pointing at proxies
            tree = sorted(trees[name])
            entry.update(pids=[pid for pid, _ in tree], tree=[list(i) for i in tree])
            entries[name] = entry
        return entries

    def _write_manifest(self) -> None:
        with self._manifest_lock:
            watchdog = self._watchdog_ident
            data = {
                "name": self.spec.name,
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
                         if f.name in ("web", "merit_workers", "ai_workers", "sms_workers")},
                "urls": self.urls,
                "links": self.links(),
                "faultproxy": self._links.manifest() if self._links.active else None,
                "ports": self.ports,
                "components": self._component_entries(),
                "versions": {
                    **{key: f"{b.name} {b.version}" for key, b in self._binaries.items()},
                    **self._package_versions,
                },
                "settings": self.settings.to_env(),
            }
            if self.run_dir.is_dir():
                write_manifest(self.run_dir, data)

    # ------------------------------------------------------------ links
    def _link_env(self, component: Component | None) -> dict[str, str]:
        if not self._links.active or component is None:
            return {}
        urls = self.urls
        return self._links.env_for(component.role, urls["valkey"], urls["ai_provider"], urls["sms_gateway"])

    def _faultproxy_stage(self) -> list[Component]:
        """Plan the fixed links' proxies; the supervised fault proxy to start, if any."""
        if not self._links.active:
            return []
        self._links.plan_services(self.ports)
        return [self._faultproxy()] if self._links.supervised else []

    def _faultproxy(self) -> Component:
        health = HealthProbe("http", f"{self._links.url}/proxies")
        return self._table.put(Component(FAULTPROXY, "faultproxy", argv=tuple(self._links.argv()), health=health,
                                         port=self._links.api_port, kind=self._links.backend))


def _http(port: int | None) -> str:
    return f"http://{HOST}:{port}"
