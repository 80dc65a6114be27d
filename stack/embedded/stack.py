"""``EmbeddedStack``: the reference stack as supervised local processes on 127.0.0.1.

Start-up order: certs -> valkey (TLS) -> init_ledger once -> ai_provider, sms_gateway
(+ faultproxy when links are requested) -> web_1..N -> haproxy -> relay -> workers. Each stage is started in parallel and
must be ready before the next one starts. Stop order is the reverse in three stages
(front, providers, valkey); see ``Supervisor.stop_all``.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

from redis import Redis
from sqlalchemy import Engine

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
    READY_DIR,
    SCALABLE,
    STAGE_FRONT,
    STAGE_PROVIDERS,
    STAGE_VALKEY,
    StackSpec,
    default_run_dir,
    http_probe,
    missing_component_modules,
)
from stack.embedded.supervisor import ProcessSpec, Supervisor
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
        self._urls: dict[str, str] = {}
        self._ports: dict[str, int] = {}
        self._kinds: dict[str, str] = {}
        self._health: dict[str, dict[str, str]] = {}
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
        if "haproxy_socket" in self._urls:
            hap.remove_admin_socket(Path(self._urls["haproxy_socket"]))
        self._status = final_status
        self._write_manifest()

    def _start_all(self) -> None:
        self._certs = make_certs(self.run_dir / "tls")
        self._allocate_ports()
        self.settings = self._make_settings()
        self._sup = Supervisor(self.run_dir, on_change=self._write_manifest)
        self._watchdog_ident = self._sup.watchdog_identity  # kept after detach, for `proctor down`
        self._write_manifest()
        self._start_stage([self._valkey_spec()])
        init_ledger(self.engine, self.settings)  # once, so components never race to create tables
        self._issue_roster()
        providers = [self._python_spec("ai_provider", "ai_provider"), self._python_spec("sms_gateway", "sms_gateway")]
        self._start_stage(providers + self._faultproxy_stage())
        if self._links.active:
            self._links.mark_live()
            # Creates the proxies on an external Toxiproxy; for ours it re-points any proxy whose
            # provider moved to a new port after a lost bind race (unchanged ones stay untouched).
            self._links.push()
        self._start_stage([self._web_spec(i) for i in range(1, self.spec.web + 1)])
        self._start_stage([self._haproxy_spec()])
        self._start_stage([self._python_spec("relay", "relay")])
        self._start_stage([self._worker_spec(lane, i) for lane in LANES for i in range(1, self.spec.worker_count(lane) + 1)])

    def _issue_roster(self) -> None:
        """Enrol ``roster_size`` students per exam with fresh access codes; the codes go to
        ``roster.json`` (0600) for the harness, their HMACs to the ledger."""
        ids = roster_student_ids(self.settings.roster_size)
        exams = {code: issue_roster(self.engine, self.settings.roster_key, code, ids) for code in self.settings.exams}
        write_private_json(self.run_dir / ROSTER_NAME, {"exams": exams})

    def _start_stage(self, specs: list[ProcessSpec]) -> None:
        sup = self._supervisor()
        for spec in specs:
            sup.start(spec)
        for spec in specs:
            try:
                sup.wait_ready(spec.name, self.spec.ready_timeout)
            except StackError:
                if not self._lost_bind_race(spec.name):
                    raise
                self._retry_on_new_port(spec.name)

    def _lost_bind_race(self, name: str) -> bool:
        """Another process took the port between our allocation and the child's bind."""
        return name in self._ports and bool(_BIND_FAILURE.search(self._supervisor().log_tail(name)))

    def _retry_on_new_port(self, name: str) -> None:
        sup = self._supervisor()
        sup.remove(name, grace=1.0)
        if name.startswith("web_"):
            spec = self._web_spec(int(name.rsplit("_", 1)[1]))  # allocates a fresh port itself
        elif name == FAULTPROXY:  # no consumer has started yet: every proxy may move
            self._links.reallocate()
            self._ports[FAULTPROXY] = self._links.api_port or 0
            self._urls[FAULTPROXY] = self._links.url
            spec = self._faultproxy_spec()
        else:
            self._ports[name] = free_port()
            self._refresh_urls()
            if name in ("ai_provider", "sms_gateway") and self._links.wants(name):
                self._links.add(name, self._ports[name])
            spec = {"valkey": self._valkey_spec, "haproxy": self._haproxy_spec}.get(
                name, lambda: self._python_spec(name, name))()
        sup.start(spec)
        sup.wait_ready(name, self.spec.ready_timeout)

    # ------------------------------------------------------------ the API
    @property
    def urls(self) -> dict[str, str]:
        return dict(self._urls)

    def links(self) -> dict[str, dict[str, str]]:
        """{link name: {"listen": "127.0.0.1:P", "upstream": "127.0.0.1:Q"}} of the proxied links."""
        return self._links.links()

    def components(self) -> list[str]:
        return self._supervisor().names()

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

    def scale(self, kind: str, n: int) -> None:
        """Set the number of web nodes or of workers of one lane to ``n``."""
        if kind not in SCALABLE:
            raise StackError(f"scale: kind must be one of {sorted(SCALABLE)}, not {kind!r}")
        if kind == "web":
            self._scale_web(n)
        else:
            self._scale_workers(kind, n)
        self._write_manifest()

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

    # ------------------------------------------------------------ scaling
    def _names_of(self, kind: str, lane: str | None = None) -> list[str]:
        prefix = "web_" if kind == "web" else f"worker_{lane}_"
        names = [n for n, k in self._kinds.items() if k == kind and n.startswith(prefix) and n in self.components()]
        return sorted(names, key=lambda n: int(n.rsplit("_", 1)[1]))

    def _scale_web(self, n: int) -> None:
        if n < 1:
            raise StackError("scale('web', n): at least one web node")
        current = self._names_of("web")
        if n > len(current):
            self._start_stage([self._web_spec(i) for i in range(len(current) + 1, n + 1)])
            self._reload_haproxy()
        elif n < len(current):
            doomed = current[n:]
            for name in doomed:
                self._ports.pop(name, None)
            self._reload_haproxy()  # stop sending traffic before the nodes go away
            for name in reversed(doomed):
                self._forget(name)

    def _scale_workers(self, lane: str, n: int) -> None:
        if n < 0:
            raise StackError(f"scale({lane!r}, n): n must be >= 0")
        current = self._names_of("worker", lane)
        if n > len(current):
            self._start_stage([self._worker_spec(lane, i) for i in range(len(current) + 1, n + 1)])
        for name in reversed(current[n:]):
            self._forget(name)

    def _forget(self, name: str) -> None:
        self._supervisor().remove(name, self.spec.stop_grace)
        self._links.remove(name)  # a web_N link goes with its node
        for table in (self._kinds, self._health, self._ports, self._urls):
            table.pop(name, None)  # type: ignore[attr-defined]
            table.pop(f"{name}_admin", None)  # type: ignore[attr-defined]

    def _reload_haproxy(self) -> None:
        self._write_haproxy_config()
        self._supervisor().restart("haproxy", self.spec.stop_grace, self.spec.ready_timeout)

    # ------------------------------------------------------------ specs
    def _allocate_ports(self) -> None:
        for name in ("valkey", "ai_provider", "sms_gateway", "haproxy"):
            self._ports[name] = free_port()
        self._refresh_urls()

    def _refresh_urls(self) -> None:
        """URLs (and the settings that carry them) from the current ports."""
        self._urls.update(
            api=f"http://{HOST}:{self._ports['haproxy']}",
            ai_provider=f"http://{HOST}:{self._ports['ai_provider']}",
            sms_gateway=f"http://{HOST}:{self._ports['sms_gateway']}",
            valkey=vk.valkey_url(self._ports["valkey"]),
        )
        if self._sup is not None:  # settings exist once the supervisor does
            self.settings = self.settings.with_overrides(
                valkey_url=self._urls["valkey"], ai_url=self._urls["ai_provider"], sms_url=self._urls["sms_gateway"])

    def _make_settings(self) -> Settings:
        assert self._certs is not None
        overrides = dict(self.spec.settings_overrides)
        if "run_dir" in overrides:
            raise StackError("settings_overrides['run_dir']: use StackSpec.run_dir")
        base = load_settings()  # the caller's environment (e.g. TIME_SCALE=...) is the default
        return base.with_overrides(
            **{**run_secrets(), "trusted_proxies": (HAPROXY_SOURCE,)},
            **overrides,
            run_dir=self.run_dir,
            valkey_url=self._urls["valkey"],
            valkey_ca=str(self._certs.ca_cert),
            ai_url=self._urls["ai_provider"],
            sms_url=self._urls["sms_gateway"],
        )

    def _env(self, name: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.settings.to_env())
        env.update(self._link_env(name))
        env.update(PROCTOR_COMPONENT=name, PROCTOR_NODE_NAME=name, PYTHONUNBUFFERED="1")
        if f"{name}_admin" in self._ports:
            env["PROCTOR_ADMIN_PORT"] = str(self._ports[f"{name}_admin"])
        return env

    def _argv(self, kind: str, name: str, port: int | None = None, lane: str = "") -> list[str]:
        values = {"python": sys.executable, "port": str(port or ""), "name": name, "lane": lane,
                  "run_dir": str(self.run_dir)}
        try:
            return [part.format(**values) for part in self.spec.command(kind)]
        except (KeyError, IndexError) as exc:
            raise StackError(f"bad command template for {kind}: {self.spec.command(kind)}: {exc}") from None

    def _valkey_spec(self) -> ProcessSpec:
        assert self._certs is not None
        conf = vk.write_valkey_config(self.run_dir, self._ports["valkey"], self._certs, self.spec.maxmemory,
                                      self.spec.valkey_maxclients)
        url, ca = self._urls["valkey"], self._certs.ca_cert
        self._kinds["valkey"] = "valkey"
        self._health["valkey"] = {"valkey": url, "ca": str(ca)}
        return ProcessSpec("valkey", vk.valkey_argv(self._binaries["valkey"].path, conf),
                           ready=lambda: vk.tls_ping(url, ca), stop_stage=STAGE_VALKEY)

    def _http_spec(self, kind: str, name: str, port: int, path: str, stage: int, accept: str = "200") -> ProcessSpec:
        url = f"http://{HOST}:{port}{path}"
        self._kinds[name] = kind
        self._health[name] = {"http": url, "accept": accept}
        return ProcessSpec(name, self._argv(kind, name, port), env=self._env(name),
                           ready=lambda: http_probe(url, accept=accept), stop_stage=stage)

    def _python_spec(self, kind: str, name: str) -> ProcessSpec:
        if kind in ("ai_provider", "sms_gateway"):
            return self._http_spec(kind, name, self._ports[name], "/healthz", STAGE_PROVIDERS)
        self._kinds[name] = kind
        self._health[name] = {"alive": "process"}
        return ProcessSpec(name, self._argv(kind, name), env=self._env(name), settle=self.spec.worker_settle,
                           stop_stage=STAGE_FRONT)

    def _web_spec(self, index: int) -> ProcessSpec:
        name = f"web_{index}"
        self._ports[name] = free_port()
        self._urls[name] = f"http://{HOST}:{self._ports[name]}"
        self._ports[f"{name}_admin"] = free_port()  # loopback admin listener; HAProxy never routes it
        self._urls[f"{name}_admin"] = f"http://{HOST}:{self._ports[f'{name}_admin']}"
        first = min((n for n in self._urls if re.fullmatch(r"web_\d+_admin", n)), key=lambda n: int(n.split("_")[1]))
        self._urls["admin"] = self._urls[first]
        if self._links.wants(name):
            self._links.add(name, self._ports[name])  # HAProxy reaches the node through it
        return self._http_spec("web", name, self._ports[name], "/readyz", STAGE_FRONT)

    def _worker_spec(self, lane: str, index: int) -> ProcessSpec:
        name = f"worker_{lane}_{index}"
        self._kinds[name] = "worker"
        if "worker" in self.spec.commands:  # a stand-in command knows no ready file
            self._health[name] = {"alive": "process"}
            return ProcessSpec(name, self._argv("worker", name, lane=lane), env=self._env(name),
                               settle=self.spec.worker_settle, stop_stage=STAGE_FRONT)
        ready_file = self.run_dir / READY_DIR / name
        self._health[name] = {"ready_file": str(ready_file)}
        env = {**self._env(name), "PROCTOR_READY_FILE": str(ready_file)}
        return ProcessSpec(name, self._argv("worker", name, lane=lane), env=env,
                           ready=lambda: self._ready_file_names_pid(name, ready_file), stop_stage=STAGE_FRONT)

    def _ready_file_names_pid(self, name: str, path: Path) -> bool:
        """The worker wrote its pid there after setting its liveness key: it can take a job."""
        try:
            return path.read_text().strip() == str(self._supervisor().pid(name))
        except OSError:
            return False

    def _write_haproxy_config(self) -> Path:
        webs = {n: p for n, p in sorted(self._ports.items(), key=lambda kv: kv[0])
                if re.fullmatch(r"web_\d+", n)}
        webs = dict(sorted(webs.items(), key=lambda kv: int(kv[0].rsplit("_", 1)[1])))
        webs = {name: self._links.listen_port(name) or port for name, port in webs.items()}
        config, sock = hap.write_haproxy_config(self.run_dir, self._ports["haproxy"], webs, source=HAPROXY_SOURCE)
        self._urls["haproxy_socket"] = str(sock)
        return config

    def _haproxy_spec(self) -> ProcessSpec:
        config = self._write_haproxy_config()
        url = f"{self._urls['api']}/healthz"
        self._kinds["haproxy"] = "haproxy"
        self._health["haproxy"] = {"http": url, "accept": "any"}
        # Ready once the frontend answers at all: a 503 still proves HAProxy is up.
        return ProcessSpec("haproxy", hap.haproxy_argv(self._binaries["haproxy"].path, config),
                           ready=lambda: http_probe(url, accept="any"), stop_stage=STAGE_FRONT)

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
            except StackError:
                continue  # removed (scale down) since the snapshot
            entry.update(kind=self._kinds.get(name, "?"), port=self._ports.get(name), health=self._health.get(name))
            if self._link_env(name):
                entry["via_links"] = self._link_env(name)  # environment pointing at proxies
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
                "urls": dict(self._urls),
                "links": self.links(),
                "faultproxy": self._links.manifest() if self._links.active else None,
                "ports": dict(self._ports),
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
    def _link_env(self, name: str) -> dict[str, str]:
        if not self._links.active:
            return {}
        return self._links.env_for(name, self._urls["valkey"], self._urls["ai_provider"], self._urls["sms_gateway"])

    def _faultproxy_stage(self) -> list[ProcessSpec]:
        """Plan the fixed links' proxies; the supervised fault proxy to start, if any."""
        if not self._links.active:
            return []
        self._links.plan_services(self._ports)
        if self._links.api_port is not None:
            self._ports[FAULTPROXY] = self._links.api_port
        self._urls[FAULTPROXY] = self._links.url
        return [self._faultproxy_spec()] if self._links.supervised else []

    def _faultproxy_spec(self) -> ProcessSpec:
        self._kinds[FAULTPROXY] = self._links.backend
        self._health[FAULTPROXY] = {"http": f"{self._links.url}/proxies", "accept": "200"}
        return ProcessSpec(FAULTPROXY, self._links.argv(), env=dict(os.environ), ready=self._links.ready,
                           stop_stage=STAGE_PROVIDERS)
