"""``ComposeDeployment``: the ``Deployment`` interface over ``docker-compose.yml``.

Set-up and tear-down are the scripts users run (``scripts/compose-setup.sh --up``,
``scripts/compose-down.sh``), pointed at a project and run folder of this run's own and
at an override file (``chaos.deployment.compose_files``) through ``COMPOSE_FILE``. Faults
go through the ``docker`` SDK (imported when a deployment is built, never at import):
containers are found by the labels ``com.docker.compose.project`` / ``.service``.

- ``kill``: the engine's kill. SIGKILL to a container's PID 1 (``init: true``'s
  docker-init) ends every process in it, as the embedded runner's kill of a process group.
- ``pause``/``resume``: the engine's pause (the freezer cgroup), the whole container.
- ``set_autorestart(False)``: a killed container stays down (the engine does not restart
  a container it was told to kill); ``True`` starts it again if it is down.
- ``restart`` and every start: wait for the container's own health check, then restart
  the containers sharing its network namespace (web-1's ``admin-forward``), whose old
  namespace died with it.
- ``links``: a ``faultproxy`` container on the project network, its API on 127.0.0.1, the
  consumers of each requested link pointed at it (``chaos.deployment.compose_links``).
  Valkey's TLS port is published on 127.0.0.1 for the harness's own clients, which connect as the
  ``harness`` ACL user (``settings.valkey_user``, from the run's ``valkey-harness.env``; the CA
  copied out of the certs volume as ``settings.valkey_ca``).
- SMS egress (``sms_egress``): an ``egress`` network, the reserved address a fixed IP on it,
  the standby ``worker-sms-2``; the failover controller re-attaches the address in the engine
  (``chaos.deployment.compose_egress``, docs/egress.md "Compose").
- log shipping (``log_shipping``): the services log into ``<run_dir>/logs``, followed by rsyslog in a
  ``shipper`` container and shipped to a ``log-store`` container (``chaos.deployment.compose_logship``,
  docs/log-shipping.md "Compose").
- ``scale``: starts or stops the pool's services. ``docker-compose.yml`` names every web
  node and worker (its own ``PROCTOR_NODE_NAME``, its own HAProxy backend line), so a pool
  cannot grow past the services the file defines; that is refused with the reason.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.deployment.compose_egress import (CONTAINER_UID, EGRESS_NETWORK, STANDBY_PROFILE, EgressAddresses,
                                             EngineAddressMove, add_egress)
from chaos.deployment import compose_nets
from chaos.deployment.compose_engine import Engine, EngineError
from chaos.deployment.compose_files import (PROVIDER_FORWARDS, PYTHON_SERVICES, component_for_service, settings_env,
                                            valkey_entry, write_override)
from chaos.deployment.compose_logship import add_log_shipping, prepare_logs, write_shipper_config
from chaos.deployment.compose_links import (FAULTPROXY_SERVICE, UPSTREAMS, add_links, link_ports, links_unsupported,
                                            write_populate)
from chaos.settle import SettleTerms
from chaos.deployment.final_read import FinalRead, final_read, provider_urls
from stack.components import POOLS, Component
from stack.config import ENV_NAMES, Settings, load_settings
from stack.deploy.egress import FAILOVER_POLICIES, FailoverController
from stack.deploy.links import UPSTREAM_OF
from stack.deploy.ports import free_ports
from stack.deploy.provision import FAULTPROXY_ENV
from stack.deploy.valkey_conf import NODE_SERVICES, VALKEY_PORT, address, sentinel_addresses
from stack.logship.export import export_logs
from stack.logship.rsyslog import LOG_POLICIES
from stack.paths import update_latest_link

__all__ = ["COMPOSE_SHAPE", "ComposeDeployment", "ComposeSpec", "ComposeUnsupported", "REPO"]

REPO = Path(__file__).resolve().parents[2]
COMPOSE_SHAPE = {"web": 2, "merit": 2, "ai": 1, "sms": 1}
"""What docker-compose.yml runs: web nodes and workers per lane (with SMS egress, also the SMS standby)."""
EGRESS_SHAPE = {**COMPOSE_SHAPE, "sms": 2}
VALKEY_TOPOLOGIES = ("single", "sentinel")
SENTINEL_OVERLAY = "docker-compose.sentinel.yml"
"""The Sentinel topology's services, on top of docker-compose.yml (``ComposeSpec.valkey``)."""
_NOT_SETTINGS = ("DATABASE_URL", "PROCTOR_VALKEY_URL", "PROCTOR_PG_PASSWORD")
"""Addresses inside the compose network, or holding passwords: not the harness's settings."""


class ComposeUnsupported(RuntimeError):
    """The scenario needs something the compose stack does not offer; the message says what."""


@dataclass(frozen=True)
class ComposeSpec:
    name: str
    run_dir: Path
    shape: dict[str, int] = field(default_factory=lambda: dict(COMPOSE_SHAPE))
    settings_overrides: dict[str, Any] = field(default_factory=dict)
    links: tuple[str, ...] = ()
    valkey_maxclients: int | None = None
    valkey: str = "single"  # "sentinel": docker-compose.sentinel.yml on top (primary, replica, 3 Sentinels)
    project: str = ""  # default: proctor-<pid>-<time>; one project (fresh volumes, fresh ledger) per run
    net_prefix: str = ""  # default: $PROCTOR_COMPOSE_NET or 172.29.213 (compose_nets.py)
    sms_egress: str | None = None  # a failover policy (stack.deploy.egress.FAILOVER_POLICIES): the egress network
    egress_prefix: str = ""  # default: $PROCTOR_COMPOSE_EGRESS_NET or 172.29.214
    log_shipping: str | None = None  # a shipper policy (stack.logship.rsyslog.LOG_POLICIES): shipper and log store

    def expected_shape(self) -> dict[str, int]:
        return EGRESS_SHAPE if self.sms_egress is not None else COMPOSE_SHAPE

    def unsupported(self) -> str | None:
        """Why this run cannot be a compose run, or None."""
        if self.valkey not in VALKEY_TOPOLOGIES:
            return f"valkey must be one of {list(VALKEY_TOPOLOGIES)}, not {self.valkey!r}"
        if self.valkey == "sentinel" and self.links:
            return ("the Sentinel topology's nodes announce their own addresses on compose: no node links (a "
                    f"partition, tls_churn_sentinel) yet; the scenario wants links {sorted(self.links)}")
        if self.shape != self.expected_shape():
            return (f"compose runs {self.expected_shape()} (docker-compose.yml names every node and worker); "
                    f"the scenario wants {self.shape}")
        if self.log_shipping is not None and self.log_shipping not in LOG_POLICIES:
            return f"log_shipping={self.log_shipping!r}: one of {sorted(LOG_POLICIES)}"
        return self._egress_unsupported() or links_unsupported(self.links)

    def _egress_unsupported(self) -> str | None:
        if self.sms_egress is None:
            return None
        if self.sms_egress not in FAILOVER_POLICIES:
            return f"sms_egress={self.sms_egress!r}: one of {sorted(FAILOVER_POLICIES)}"
        if "sms_gateway" in self.links:  # the gateway must see the worker's own address (as embedded)
            return "sms_egress: the SMS path must not run through the sms_gateway link"
        return None


class ComposeDeployment:
    """One compose project per run: fresh volumes, so a fresh ledger and fresh secrets."""

    def __init__(self, spec: ComposeSpec, repo: Path = REPO) -> None:
        reason = spec.unsupported()
        if reason:
            raise ComposeUnsupported(reason)
        self.spec = spec
        self.repo = repo
        self.project = spec.project or f"proctor{os.getpid()}t{int(time.time() * 1000) % 10**9}"
        self.compose_dir = (spec.run_dir / "compose").resolve()  # absolute: compose reads "a/b:/x" as a named volume
        self._ports = self._draw_ports()  # drawn again in start(), right before `up` binds them
        self._link_ports = link_ports(spec.links)
        self.faultproxy_seed = random.SystemRandom().randrange(2**31)
        self._settings: Settings | None = None
        self._engine: Engine | None = None
        self._kills_landed: dict[str, float] = {}  # component -> the engine's exit time of its latest SIGKILL
        self._started = False
        self._egress: FailoverController | None = None
        self._egress_engine: Engine | None = None  # the controller's own client: it polls from its thread

    # ------------------------------------------------------------ lifecycle
    @property
    def net(self) -> str:
        return self.spec.net_prefix or compose_nets.project_net()

    @property
    def egress_addresses(self) -> EgressAddresses:
        return EgressAddresses(self.spec.egress_prefix or compose_nets.egress_net())

    def _env(self) -> dict[str, str]:
        net = self.net
        overlays = [str(self.repo / SENTINEL_OVERLAY)] if self.spec.valkey == "sentinel" else []
        files = [str(self.repo / "docker-compose.yml"), *overlays, str(self.compose_dir / "override.json")]
        profiles = {"COMPOSE_PROFILES": STANDBY_PROFILE} if self.spec.sms_egress is not None else {}
        return {**os.environ,
                "PROCTOR_COMPOSE_PROJECT": self.project, "PROCTOR_COMPOSE_RUN": str(self.compose_dir),
                "PROCTOR_HTTP_PORT": str(self._ports["api"]), "PROCTOR_ADMIN_HTTP_PORT": str(self._ports["admin"]),
                "PROCTOR_COMPOSE_NET": net, "COMPOSE_FILE": os.pathsep.join(files), **profiles}

    def start(self) -> None:
        self.spec.run_dir.mkdir(parents=True, exist_ok=True)
        update_latest_link(self.spec.run_dir)  # as the embedded stack does: `proctor status` finds it
        (self.compose_dir / "roster").mkdir(parents=True, exist_ok=True)
        self.compose_dir.chmod(0o700)
        self._write_secrets()
        self._script(["scripts/compose-setup.sh"], "compose-setup.log")  # engine, base, image: up to minutes
        self._ports = self._draw_ports()  # a port drawn before a long build was once taken by then
        providers = {service: self._ports[service.replace("-", "_")] for service in PROVIDER_FORWARDS}
        valkey = valkey_entry(self._ports["valkey"], self.spec.valkey_maxclients)
        write_override(self.compose_dir, self.spec.run_dir, settings_env(self.spec.settings_overrides), providers,
                       self._host_gateways(), valkey, self._extend_override)
        self._attach_egress_first()
        self._started = True  # from here on stop() has something to take down
        self._script(["scripts/compose-setup.sh", "--up"], "compose-up.log")  # the set-up steps are cached now
        shutil.copy(self.compose_dir / "roster" / "roster.json", self.spec.run_dir / "roster.json")
        self._engine = Engine(self.project)
        self._copy_ca()
        for component in self.components():
            self._engine.note_ready(component.name.replace("_", "-"))
        self._start_egress_controller()

    def _draw_ports(self) -> dict[str, int]:
        """Free ports on 127.0.0.1 for what the run publishes."""
        published = ["api", "admin", "ai_provider", "sms_gateway", "valkey"] + (["faultproxy"] if self.spec.links else [])
        published += ["log_store"] if self.spec.log_shipping is not None else []
        return dict(zip(published, free_ports(len(published))))

    def _write_secrets(self) -> None:
        """The run's env files before set-up (which keeps existing ones): the harness's Valkey user and
        the fault proxy's API credential must be known before `up`."""
        from stack.deploy.provision import write_compose_secrets

        if not (self.compose_dir / "proctor.env").exists():
            write_compose_secrets(self.compose_dir / "proctor.env")

    def _secrets(self, name: str = "proctor.env") -> dict[str, str]:
        env_file = self.compose_dir / name
        lines = env_file.read_text().splitlines() if env_file.exists() else []
        return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))

    def _host_gateways(self) -> list[str]:
        """The host's address on each project network: where a published port's connections come from."""
        egress = [self.egress_addresses.host_gateway] if self.spec.sms_egress is not None else []
        return [f"{self.net}.1", *egress]

    def _extend_override(self, document: dict[str, Any]) -> None:
        self._add_links(document["services"])
        if self.spec.sms_egress is not None:
            add_egress(document["services"], document.setdefault("networks", {}), self.egress_addresses, self.spec.run_dir)
        if self.spec.log_shipping is not None:
            logging = [service for service in PYTHON_SERVICES if self.spec.sms_egress is not None or service != "worker-sms-2"]
            prepare_logs(self.spec.run_dir, logging, CONTAINER_UID)
            paths = write_shipper_config(self.spec.run_dir, self.spec.log_shipping)
            add_log_shipping(document["services"], logging, paths, self._ports["log_store"])

    def _add_links(self, services: dict[str, Any]) -> None:
        roles = {service: component.role for service in PYTHON_SERVICES
                 if (component := component_for_service(service)) is not None}
        if self._link_ports:
            config = write_populate(self.compose_dir / "proxies.json", self._link_ports)
            add_links(services, roles, self._link_ports, self._ports["faultproxy"], config, self.faultproxy_seed)

    # ------------------------------------------------------------ SMS egress
    def _attach_egress_first(self) -> None:
        """Before `up`: worker 1 holds the lane and the reserved address (its container starts with it)."""
        if self.spec.sms_egress is None:
            return
        self._egress = FailoverController(self.spec.run_dir, FAILOVER_POLICIES[self.spec.sms_egress](),
                                          self._egress_alive, lambda: sorted(self.egress_addresses.hosts()),
                                          owner=CONTAINER_UID, reserved=self.egress_addresses.reserved)
        self._egress.attach_first("worker_sms_1")

    def _start_egress_controller(self) -> None:
        """After `up`: the controller watches the holder's container, with an engine client of its own."""
        if self._egress is None:
            return
        self._egress_engine = engine = Engine(self.project)
        network = f"{self.project}_{EGRESS_NETWORK}"  # Compose v1 names a project's networks so
        self._egress.move = EngineAddressMove(engine.client.api, network, self.egress_addresses,
                                              lambda component: engine.container_id(component.replace("_", "-")))
        self._egress.start()

    def _egress_alive(self, component: str) -> bool:
        engine = self._egress_engine
        return engine is not None and engine.running(component.replace("_", "-"))

    def egress(self) -> dict[str, Any]:
        """As embedded: reserved address, each SMS worker's host, the attachment and its history
        (``{}`` without ``sms_egress``); the host-loss fault asks for it (chaos/nemesis/host.py)."""
        if self._egress is None:
            return {}
        current = self._egress.current()
        return {"policy": self._egress.policy.name, "reserved": self.egress_addresses.reserved,
                "hosts": self.egress_addresses.hosts(), "attachment": None if current is None else current.__dict__,
                "events": self._egress.history()}

    def _copy_ca(self) -> None:
        """Valkey's CA out of the certs volume, for the harness's own TLS clients on the host."""
        ca = self.compose_dir / "ca.crt"
        ca.write_bytes(self.engine.read_file("valkey", "/certs/ca.crt"))
        ca.chmod(0o644)

    def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        if self._egress is not None:
            self._egress.stop()
        if self._egress_engine is not None:
            self._egress_engine.close()
        logs = self.spec.run_dir / "logs"
        logs.mkdir(exist_ok=True)
        with open(logs / "compose.log", "w") as out:  # the containers' output is evidence too
            subprocess.run(["docker-compose", "-p", self.project, "logs", "--no-color", "--timestamps"], cwd=self.repo,
                           env=self._env(), stdout=out, stderr=subprocess.STDOUT, check=False)
        self._script(["scripts/compose-down.sh"], "compose-down.log")
        if self._engine is not None:
            self._engine.close()

    def detach(self) -> None:
        """Leave the project running (``--keep-stack``); ``down_command`` stops it."""
        self._started = False

    def down_command(self) -> str:
        return (f"PROCTOR_COMPOSE_PROJECT={self.project} PROCTOR_COMPOSE_RUN={self.compose_dir} "
                f"COMPOSE_FILE={self._env()['COMPOSE_FILE']} scripts/compose-down.sh")

    def _script(self, argv: list[str], log_name: str) -> None:
        log = self.spec.run_dir / log_name
        with open(log, "w") as out:
            done = subprocess.run(argv, cwd=self.repo, env=self._env(), stdout=out, stderr=subprocess.STDOUT, check=False)
        if done.returncode != 0:
            tail = "\n".join(log.read_text().splitlines()[-8:])
            raise EngineError(f"{argv[0]} failed (exit {done.returncode}; log {log}):\n{tail}")

    def __enter__(self) -> ComposeDeployment:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------ what runs
    @property
    def engine(self) -> Engine:
        if self._engine is None:
            raise EngineError("the compose deployment is not started")
        return self._engine

    @property
    def run_dir(self) -> Path:
        return self.spec.run_dir

    @property
    def settings(self) -> Settings:
        if self._settings is not None:
            return self._settings
        secrets = self._secrets()  # written before set-up
        env = {k: v for k, v in secrets.items() if k not in _NOT_SETTINGS}
        env.update(self._secrets("valkey-harness.env"))  # the harness's own Valkey ACL user
        ca = self.compose_dir / "ca.crt"  # copied out of the certs volume after `up`
        host = {"PROCTOR_RUN_DIR": str(self.spec.run_dir), **({"PROCTOR_VALKEY_CA": str(ca)} if ca.exists() else {})}
        settings = load_settings({**env, **host, **self._sentinel_settings(), **settings_env(self.spec.settings_overrides)})
        if secrets and ca.exists():
            self._settings = settings
        return settings

    def _sentinel_settings(self) -> dict[str, str]:
        """With Sentinel, the harness asks the Sentinels at their fixed addresses, as the containers do."""
        if self.spec.valkey != "sentinel":
            return {}
        return {ENV_NAMES["valkey_sentinels"]: sentinel_addresses(self.net)}

    def valkey_nodes(self) -> dict[tuple[str, int], str]:
        """Each data node at its fixed address (reached from the host through the project's bridge)."""
        services = NODE_SERVICES if self.spec.valkey == "sentinel" else NODE_SERVICES[:1]
        return {(address(self.net, service), VALKEY_PORT): service.replace("-", "_") for service in services}

    @property
    def urls(self) -> dict[str, str]:
        """``URL_KEYS``, ``valkey`` (direct, TLS; the credential is ``settings.valkey_user``'s) and ``faultproxy``
        when links (with its API credential: the nemesis sends it as Basic)."""
        urls = {key: f"http://127.0.0.1:{port}" for key, port in self._ports.items() if key not in ("valkey", "faultproxy")}
        urls["valkey"] = f"rediss://127.0.0.1:{self._ports['valkey']}/0"
        if "faultproxy" in self._ports:
            credential = self._secrets(FAULTPROXY_ENV).get("FAULTPROXY_API_CREDENTIAL", "")
            urls["faultproxy"] = f"http://{credential + '@' if credential else ''}127.0.0.1:{self._ports['faultproxy']}"
        return urls

    def components(self) -> list[Component]:
        found = [component_for_service(service) for service in self.engine.services()]
        return sorted((c for c in found if c is not None), key=lambda c: (c.stop_stage * -1, c.name))

    def _service(self, component: str) -> str:
        names = {c.name for c in self.components()}
        if component not in names:
            raise KeyError(f"no component named {component!r}; known: {', '.join(sorted(names))}")
        return component.replace("_", "-")

    def links(self) -> dict[str, dict[str, str]]:
        """As embedded: {link: {"listen", "upstream"}}, addresses inside the compose network."""
        return {name: {"listen": f"{FAULTPROXY_SERVICE}:{port}", "upstream": UPSTREAMS[UPSTREAM_OF[name]]}
                for name, port in sorted(self._link_ports.items())}

    def pids(self, component: str) -> list[int]:
        return self.engine.pids(self._service(component))

    # ------------------------------------------------------------ faults
    def kill(self, component: str, sig: int = signal.SIGKILL) -> list[int]:
        service = self._service(component)
        pids = self.engine.pids(service)
        landed = self.engine.kill(service, sig)
        if landed is not None:
            self._kills_landed[component] = landed
        return pids

    def kill_landed_at(self, component: str) -> float | None:
        return self._kills_landed.get(component)

    def pause(self, component: str) -> list[int]:
        service = self._service(component)
        self.engine.pause(service)
        return self.engine.pids(service)

    def resume(self, component: str) -> list[int]:
        service = self._service(component)
        self.engine.unpause(service)
        return self.engine.pids(service)

    def restart(self, component: str) -> None:
        self.engine.restart(self._service(component))

    def set_autorestart(self, component: str, enabled: bool) -> None:
        service = self._service(component)
        if enabled:
            self.engine.ensure_running(service)

    def wait_healthy(self, component: str, timeout: float = 30.0) -> None:
        self.engine.wait_healthy(self._service(component), timeout)

    def ready_seconds(self, component: str) -> float | None:
        return self.engine.ready_seconds(self._service(component))

    def scale(self, pool: str, n: int) -> None:
        if pool not in POOLS:
            raise ValueError(f"scale: pool must be one of {list(POOLS)}, not {pool!r}")
        members = sorted((c for c in self.components() if c.pool == pool), key=lambda c: c.index or 0)
        low = 1 if pool == "web" else 0
        if not low <= n <= len(members):
            raise ComposeUnsupported(
                f"scale {pool} to {n}: the compose stack runs {len(members)} {pool} service(s), each named in "
                f"docker-compose.yml (node name, HAProxy backend), so it scales within {low}..{len(members)} only")
        for component in members[:n]:
            self.engine.ensure_running(component.name.replace("_", "-"))
        for component in members[n:]:
            self.engine.stop(component.name.replace("_", "-"))

    # ------------------------------------------------------------ the final read
    def export(self, dest: Path, allow_pending: frozenset[str] = frozenset(),
               quiet_timeout: float | None = None) -> FinalRead:
        urls = self.urls
        final = final_read(urls["admin"], provider_urls(urls), self.settings.admin_token, dest,
                           SettleTerms.from_settings(self.settings), allow_pending, quiet_timeout)
        if "log_store" in urls:  # log shipping, as embedded: after the outbox settled
            # Resolved, as the shipper's configuration and mounts are: the store records each line's
            # absolute file name, and a relative run folder (`proctor sweep`'s) matched none of them.
            export_logs(self.spec.run_dir.resolve(), urls["log_store"], self.settings.log_store_token, dest)
        return final
