"""What to start: ``StackSpec``, the component commands and small helpers shared by the runner."""

from __future__ import annotations

import http.client
import re
import sys
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stack.components import LANES, POOLS, Component, HealthProbe
from stack.config import ENV_NAMES, Settings, load_settings
from stack.embedded import StackError
from stack.embedded import valkey as vk
from stack.deploy.links import NODE_LINKS, UPSTREAM_OF
from stack.embedded.links import validate_links
from stack.deploy.ports import HOST
from stack.deploy.secrets import run_secrets
from stack.priority import IDLE, niceness

__all__ = [
    "COMPONENT_MODULES",
    "DEFAULT_COMMANDS",
    "LANES",
    "PROVIDER_KINDS",
    "READY_DIR",
    "SCALABLE",
    "StackSpec",
    "VALKEY_TOPOLOGIES",
    "component_argv",
    "http_probe",
    "missing_component_modules",
    "probe_health",
    "python_component",
    "stack_settings",
    "web_component",
    "worker_component",
]

_UVICORN = ("--factory", "--host", HOST, "--port", "{port}", "--no-access-log", "--log-level", "warning",
            "--timeout-graceful-shutdown", "2", "--no-server-header")  # no version for a scanner to read (#21, finding 9)

DEFAULT_COMMANDS: dict[str, tuple[str, ...]] = {
    # No proxy headers on the providers: the SMS allow-list must see the real source address,
    # not an X-Forwarded-For that any loopback client could send.
    "ai_provider": ("{python}", "-m", "uvicorn", "stack.providers.ai:create_app", *_UVICORN, "--no-proxy-headers"),
    "sms_gateway": ("{python}", "-m", "uvicorn", "stack.providers.sms:create_app", *_UVICORN, "--no-proxy-headers"),
    # Two listeners (public + loopback admin) and no uvicorn proxy headers: the node trusts
    # X-Forwarded-For only with HAProxy's per-run secret header (stack.web.guards.client_address).
    "web": ("{python}", "-m", "stack.web.serve", "--port", "{port}"),
    "relay": ("{python}", "-m", "stack.relay"),
    "worker": ("{python}", "-m", "stack.lanes.worker", "{lane}", "--name", "{name}"),
}
"""argv templates per component kind; placeholders {python} {port} {name} {lane} {run_dir}."""

COMPONENT_MODULES: dict[str, str] = {
    "ai_provider": "stack.providers.ai",
    "sms_gateway": "stack.providers.sms",
    "web": "stack.web.app",
    "relay": "stack.relay",
    "worker": "stack.lanes.worker",
}

PROVIDER_KINDS = ("ai_provider", "sms_gateway")
"""The fake providers: run niced (stack.priority "provider")."""

VALKEY_TOPOLOGIES = ("single", "sentinel")
"""``proctor up --valkey``: one Valkey, or primary + replica + three Sentinels."""

READY_DIR = "ready"
"""<run_dir>/ready/<worker>: the worker's pid, written once it can take a job ($PROCTOR_READY_FILE)."""
SCALABLE = {pool: pool for pool in POOLS}
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")


@dataclass
class StackSpec:
    name: str = "stack"
    web: int = 1
    merit_workers: int = 2  # redundant: a killed merit worker must not stop the urgent lane
    ai_workers: int = 1
    sms_workers: int = 1
    settings_overrides: Mapping[str, Any] = field(default_factory=dict)
    run_dir: Path | str | None = None  # None: <stack.paths.runs_dir()>/<UTC timestamp>-<name>/
    commands: Mapping[str, Sequence[str]] = field(default_factory=dict)  # per-kind overrides of DEFAULT_COMMANDS
    ready_timeout: float = 30.0
    stop_grace: float = 5.0
    # Scale-in: the longest a drained web node may take to finish its requests before SIGTERM
    # (HAProxy's ``timeout server``: no request through it can take longer).
    drain_limit: float = 30.0
    worker_settle: float = 1.0  # workers/relay count as ready once alive this long
    maxmemory: str = vk.DEFAULT_MAXMEMORY
    links: Sequence[str] = ()  # network links put behind a named proxy of the fault proxy (stack.embedded.links)
    faultproxy_seed: int | None = None  # --seed of our fault proxy; None: a random one, kept in the manifest
    valkey_maxclients: int | None = None  # None: Valkey's default (10000); small for negative controls
    # Who started it: "cli" for `proctor up` (one such stack per results folder unless named,
    # stack/embedded/registry.py), "harness" for the stacks scenarios and tests start.
    origin: str = "harness"
    # "single": one Valkey; "sentinel": primary + replica + three Sentinels that every client
    # asks for the primary (stack/embedded/sentinel.py, docs/valkey.md).
    valkey: str = "single"
    # Sentinel only: ``min-replicas-to-write`` on every node (0 = off; docs/valkey.md): a primary
    # that has not heard from that many replicas within ``min-replicas-max-lag`` refuses writes.
    valkey_min_replicas: int = 0
    # SMS egress from a reserved address with failover (stack/embedded/egress.py): None = off (the
    # OS picks the source, every SMS worker serves); "move" or "without_address" (negative control)
    # names the failover policy, turned into its object once when the stack starts.
    sms_egress: str | None = None
    # Log shipping (stack/embedded/logship.py): None = off; "redact" (production), or the negative
    # controls "unredacted" and "uncounted" name the shipper's policy.
    log_shipping: str | None = None
    # Settings of one component on top of settings_overrides, e.g. {"web_1": {"valkey_fresh_connections":
    # True}}: one web node holds its Valkey connections by another policy than the rest, in the same run.
    component_settings: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def validate(self) -> None:
        if not _NAME_RE.match(self.name):
            raise StackError(f"StackSpec.name={self.name!r}: letters, digits, '_', '.', '-' (max 40)")
        if self.web < 1:
            raise StackError(f"StackSpec.web={self.web}: at least one web node")
        for lane in LANES:
            if getattr(self, f"{lane}_workers") < 0:
                raise StackError(f"StackSpec.{lane}_workers must be >= 0")
        unknown = set(self.settings_overrides) - set(ENV_NAMES)
        if unknown:
            raise StackError(f"unknown settings_overrides {sorted(unknown)}; known: {sorted(ENV_NAMES)}")
        for component, overrides in self.component_settings.items():
            unknown = set(overrides) - set(ENV_NAMES)
            if unknown:
                raise StackError(f"unknown component_settings[{component!r}] {sorted(unknown)}; known: {sorted(ENV_NAMES)}")
        if self.valkey_maxclients is not None and self.valkey_maxclients < 1:
            raise StackError(f"StackSpec.valkey_maxclients={self.valkey_maxclients}: at least 1")
        if self.valkey_min_replicas and (self.valkey != "sentinel" or not 0 < self.valkey_min_replicas <= 1):
            raise StackError(f"StackSpec.valkey_min_replicas={self.valkey_min_replicas}: 0, or 1 with valkey='sentinel' "
                             "(the topology has one replica)")
        if self.valkey not in VALKEY_TOPOLOGIES:
            raise StackError(f"StackSpec.valkey={self.valkey!r}: one of {', '.join(VALKEY_TOPOLOGIES)}")
        url_links = [name for name in self.links if name in UPSTREAM_OF and UPSTREAM_OF[name] == "valkey"]
        if self.valkey == "sentinel" and url_links:
            # Clients ask the Sentinels for the primary, so a proxy in PROCTOR_VALKEY_URL would be
            # bypassed: refused rather than silently not injecting. The node links inject instead.
            raise StackError(f"StackSpec.links {url_links}: with StackSpec.valkey='sentinel' use the node links "
                             f"{', '.join(NODE_LINKS)} (clients reach the nodes at the addresses they announce)")
        node_links = [name for name in self.links if name in NODE_LINKS]
        if self.valkey != "sentinel" and node_links:
            raise StackError(f"StackSpec.links {node_links}: node links need StackSpec.valkey='sentinel'")
        validate_links(self.links, self.web)
        if self.log_shipping is not None:
            from stack.embedded.logship import policy

            policy(self.log_shipping)  # names a policy, or StackError
        if self.sms_egress is not None:
            from stack.embedded.egress import failover_policy

            failover_policy(self.sms_egress)  # names a policy, or StackError
            if "sms_gateway" in self.links:  # the gateway would see the proxy's address, not the worker's
                raise StackError("StackSpec.sms_egress: the SMS path must not run through the sms_gateway link")
        bad_kinds = set(self.commands) - set(DEFAULT_COMMANDS)
        if bad_kinds:
            raise StackError(f"unknown component kinds in commands {sorted(bad_kinds)}; known: {sorted(DEFAULT_COMMANDS)}")

    def command(self, kind: str) -> Sequence[str]:
        return self.commands.get(kind, DEFAULT_COMMANDS[kind])

    def worker_count(self, lane: str) -> int:
        return int(getattr(self, f"{lane}_workers"))


def component_argv(spec: StackSpec, kind: str, name: str, run_dir: Path, port: int | None = None,
                   lane: str = "") -> tuple[str, ...]:
    """The argv of one component from its command template (StackSpec.commands or DEFAULT_COMMANDS)."""
    values = {"python": sys.executable, "port": str(port or ""), "name": name, "lane": lane, "run_dir": str(run_dir)}
    try:
        return tuple(part.format(**values) for part in spec.command(kind))
    except (KeyError, IndexError) as exc:
        raise StackError(f"bad command template for {kind}: {spec.command(kind)}: {exc}") from None


def web_component(spec: StackSpec, run_dir: Path, index: int, port: int, admin_port: int) -> Component:
    name = f"web_{index}"
    return Component(name, "web", index=index, argv=component_argv(spec, "web", name, run_dir, port),
                     health=HealthProbe("http", f"http://{HOST}:{port}/readyz"), port=port, admin_port=admin_port)


def python_component(spec: StackSpec, run_dir: Path, role: str, port: int | None = None) -> Component:
    """A provider (HTTP health on ``port``) or the relay (alive)."""
    health = HealthProbe("http", f"http://{HOST}:{port}/healthz") if port else HealthProbe("alive")
    argv = component_argv(spec, role, role, run_dir, port)
    return Component(role, role, argv=_provider_niced(spec, role, argv), health=health, port=port)


def _provider_niced(spec: StackSpec, role: str, argv: tuple[str, ...]) -> tuple[str, ...]:
    """The fake providers under ``nice``: in production they run on other machines, here they
    would take the exam's CPU at nice 0 (stack.priority; measured in docs/lane-isolation.md).
    A caller's own command (StackSpec.commands) runs as given. ``nice`` execs: the pid stays."""
    level = niceness("provider")
    if role not in PROVIDER_KINDS or role in spec.commands or level == 0:
        return argv
    if level == IDLE:  # util-linux's chrt, which execs like nice
        return ("chrt", "--idle", "0", *argv)
    return ("nice", "-n", str(level), *argv)


def worker_component(spec: StackSpec, run_dir: Path, lane: str, index: int) -> Component:
    """Ready once its ready file names its pid; a stand-in command (tests) knows no ready file."""
    name = f"worker_{lane}_{index}"
    argv = component_argv(spec, "worker", name, run_dir, lane=lane)
    if "worker" in spec.commands:
        return Component(name, "worker", lane=lane, index=index, argv=argv)
    ready_file = run_dir / READY_DIR / name
    env = {"PROCTOR_READY_FILE": str(ready_file)}
    if lane == "sms" and spec.sms_egress is not None:
        from stack.embedded.egress import worker_egress_env

        env.update(worker_egress_env(run_dir, index))  # its host address and the attachment it reads
    return Component(name, "worker", lane=lane, index=index, argv=argv, env=env,
                     health=HealthProbe("ready_file", str(ready_file)))


def probe_health(health: HealthProbe, pid: int | None) -> bool | None:
    """One check of ``health`` for the process ``pid``; None when there is nothing to ask but "alive"."""
    if health.kind == "http":
        return http_probe(health.target, accept=health.accept)
    if health.kind == "valkey":
        return vk.tls_ping(health.target, Path(health.ca))
    if health.kind == "ready_file":
        try:  # the worker wrote its pid there after setting its liveness key: it can take a job
            return pid is not None and Path(health.target).read_text().strip() == str(pid)
        except OSError:
            return False
    return None


def stack_settings(spec: StackSpec, run_dir: Path, urls: Mapping[str, str], ca_cert: Path) -> Settings:
    """The settings every component runs with: the caller's environment (e.g. TIME_SCALE=...),
    fresh run secrets, ``spec.settings_overrides``, then the run's own folder and addresses."""
    overrides = dict(spec.settings_overrides)
    if "run_dir" in overrides:
        raise StackError("settings_overrides['run_dir']: use StackSpec.run_dir")
    if spec.sms_egress is not None:
        from stack.embedded.egress import allowlist

        overrides["sms_allowlist"] = allowlist()  # exactly the reserved address
    return load_settings().with_overrides(
        **run_secrets(),
        **overrides,
        run_dir=run_dir,
        valkey_url=urls["valkey"],
        valkey_ca=str(ca_cert),
        ai_url=urls["ai_provider"],
        sms_url=urls["sms_gateway"],
    )


def missing_component_modules(commands: Mapping[str, Sequence[str]] | None = None) -> list[str]:
    """Modules of the default component commands that cannot be found (not written yet)."""
    missing = []
    for kind, module in COMPONENT_MODULES.items():
        if commands and kind in commands:
            continue
        if not _module_source(module).exists():
            missing.append(module)
    return missing


def _module_source(module: str) -> Path:
    """Where ``stack.x.y``'s source would be, looked up without importing its packages:
    ``importlib.util.find_spec`` imports every parent, and ``stack.providers`` brings FastAPI
    into the supervisor on every stack start (0.4 CPU s, py-spy; docs/harness.md)."""
    head, *rest = module.split(".")
    if head != "stack" or not rest:
        raise ValueError(f"a component module is under stack/, not {module!r}")
    path = Path(__file__).resolve().parents[1].joinpath(*rest)
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def http_probe(url: str, timeout: float = 1.0, accept: str = "200") -> bool:
    """GET ``url`` (plain HTTP: every probe of the stack is on 127.0.0.1); ``accept`` is "200", "not5xx"
    (the app answers) or "any" (the port speaks HTTP).

    The standard library's client, one connection per probe: an ``httpx.Client`` built an SSL context
    (the system's CA bundle) for each probe, and a stack start probes dozens of times a second, which
    was a fifth of the supervisor's CPU (py-spy, docs/harness.md)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"a health probe needs an http:// URL, not {url!r}")
    connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
    try:
        connection.request("GET", parts.path + (f"?{parts.query}" if parts.query else "") or "/")
        status = connection.getresponse().status
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()
    return {"200": status == 200, "not5xx": status < 500, "any": True}[accept]
