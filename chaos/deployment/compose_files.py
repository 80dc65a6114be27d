"""What the compose adapter adds to ``docker-compose.yml`` for one run, as data.

``docker-compose.yml`` stays the user's file. A run adds an override file (JSON, which
YAML reads) in its own folder, never committed:

- the scenario's settings as environment variables (``stack.config.ENV_NAMES``) on every
  Python service, so a negative control's safeguard is off in the containers too;
- each provider's loopback-only admin API on a port published on 127.0.0.1, through a
  TCP forward in the provider's network namespace (as ``admin-forward`` does for web-1):
  the provider sees a loopback peer, and only the network's gateway (the host) may connect;
- ``restart: on-failure`` on every Python service, as the embedded supervisor restarts a crashed
  component (set-up still fails on one that crashes before it was ever healthy);
- ``<run_dir>/connections/`` mounted where the components write their per-process
  Valkey connection counters (``stack.connection_stats``), so the harness reads them;
- Valkey's TLS port published on 127.0.0.1 (the harness's own clients: the connection
  sampler, the churn generator), and ``PROCTOR_VALKEY_MAXCLIENTS`` when the scenario asks;
- the fault proxy and its links when the scenario has links (``chaos.deployment.compose_links``).

Services map to components by name: ``web-1`` is ``web_1``, ``worker-merit-2`` is
``worker_merit_2``. Services with no component role (postgres, the one-shots, the
forwards) are not offered to the nemesis.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from stack.components import LANES, Component
from stack.config import ENV_NAMES
from stack.settings_schema import env_value

__all__ = [
    "PROVIDER_FORWARDS",
    "CRASH_RESTART",
    "PYTHON_SERVICES",
    "VALKEY_TLS_PORT",
    "component_for_service",
    "forward_config",
    "healthcheck",
    "override_document",
    "settings_env",
    "valkey_entry",
    "write_override",
]

PYTHON_SERVICES = ("ai-provider", "sms-gateway", "web-1", "web-2", "relay", "worker-merit-1", "worker-merit-2",
                   "worker-ai-1", "worker-sms-1", "worker-sms-2")
"""The services that read ``stack.config`` settings: a scenario's overrides go to each (``worker-sms-2``,
the SMS standby, runs only with its profile: chaos/deployment/compose_egress.py)."""

PROVIDER_FORWARDS = {"ai-provider": 8101, "sms-gateway": 8102}
"""Provider service -> the port its admin API listens on inside its container."""

VALKEY_TLS_PORT = 6380  # docker/bin/proctor-valkey
HEALTHCHECK_TIMING = {"interval": "2s", "timeout": "20s", "retries": 30, "start_period": "60s"}
"""docker-compose.yml's ``x-healthcheck``: a 2 s interval until the first pass, then the check paces
itself (docker/bin/proctor-health sleeps 15 s first), so the timeout covers the sleep and a check."""
CRASH_RESTART = "on-failure"
"""The embedded supervisor's crash restart (an RQ worker exits on a Valkey error and comes back).
The engine never restarts a container it was told to kill or stop, so a nemesis kill still
keeps the component down until ``set_autorestart(True)`` or a restart."""
_FORWARD_PORT = 9101  # the forward's listener inside the provider's network namespace
_SINGLETON_ROLES = {"valkey": "valkey", "valkey-2": "valkey", "sentinel-1": "sentinel", "sentinel-2": "sentinel",
                    "sentinel-3": "sentinel", "haproxy": "haproxy", "relay": "relay", "faultproxy": "faultproxy",
                    "ai-provider": "ai_provider", "sms-gateway": "sms_gateway", "log-store": "log_store",
                    "shipper": "shipper"}



def healthcheck(*check: str) -> dict[str, Any]:
    """A service's ``healthcheck:`` entry: ``proctor-health`` with ``check``, at the stack's timing."""
    return {"test": ["CMD", "proctor-health", *check], **HEALTHCHECK_TIMING}

def component_for_service(service: str) -> Component | None:
    """The component a compose service runs, or None for services the nemesis leaves alone."""
    if service in _SINGLETON_ROLES:
        return Component(name=service.replace("-", "_"), role=_SINGLETON_ROLES[service], kind="container")
    parts = service.split("-")
    if len(parts) == 2 and parts[0] == "web" and parts[1].isdigit():
        return Component(name=f"web_{parts[1]}", role="web", index=int(parts[1]), kind="container")
    if len(parts) == 3 and parts[0] == "worker" and parts[1] in LANES and parts[2].isdigit():
        return Component(name=f"worker_{parts[1]}_{parts[2]}", role="worker", lane=parts[1], index=int(parts[2]),
                         kind="container")
    return None


def settings_env(overrides: Mapping[str, Any]) -> dict[str, str]:
    """Setting and control overrides as the environment the containers read (spelt as ``Settings.to_env``)."""
    env = {}
    for field_name, value in overrides.items():
        if field_name not in ENV_NAMES:
            raise ValueError(f"settings override {field_name!r} is not a setting or control (stack.config.ENV_NAMES); "
                             f"known: {', '.join(sorted(ENV_NAMES))}")
        env[ENV_NAMES[field_name]] = env_value(value)
    return env


def forward_config(peers: Sequence[str], port: int) -> str:
    """HAProxy in TCP mode: the published port -> the provider's loopback admin API, host only.
    ``peers``: the host's address on each network the provider is on (a port published on the
    host's 127.0.0.1 arrives from the gateway of whichever network the engine picked)."""
    return "\n".join([
        "global", "    maxconn 64", "defaults", "    mode tcp", "    timeout connect 1s",
        "    timeout client 60s", "    timeout server 60s", "frontend admin", f"    bind :{_FORWARD_PORT}",
        f"    tcp-request connection reject unless {{ src {' '.join(peers)} }}", "    default_backend provider",
        "backend provider", f"    server provider 127.0.0.1:{port}", "",
    ])


def valkey_entry(host_port: int, maxclients: int | None = None) -> dict[str, Any]:
    """Valkey's part of the override: its TLS port on the host's 127.0.0.1, maxclients if asked."""
    entry: dict[str, Any] = {"ports": [f"127.0.0.1:{host_port}:{VALKEY_TLS_PORT}"]}
    if maxclients is not None:
        if isinstance(maxclients, bool) or not isinstance(maxclients, int) or maxclients < 1:
            raise ValueError(f"valkey_maxclients must be a whole number >= 1, not {maxclients!r}")
        entry["environment"] = {"PROCTOR_VALKEY_MAXCLIENTS": str(maxclients)}
    return entry


def override_document(env: Mapping[str, str], provider_ports: Mapping[str, int], config_dir: Path,
                      connections_dir: Path, valkey: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The override file's content: settings, provider admin forwards, the counters' mount, Valkey's part."""
    services: dict[str, Any] = {"valkey": dict(valkey)} if valkey else {}
    for service in PYTHON_SERVICES:
        services[service] = {"environment": dict(env), "restart": CRASH_RESTART,
                             "volumes": [f"{connections_dir}:/srv/run/connections"]}
    for service, host_port in provider_ports.items():
        services[service]["ports"] = [f"127.0.0.1:{host_port}:{_FORWARD_PORT}"]
        services[f"{service}-admin"] = {
            "image": "${PROCTOR_IMAGE:-proctor-stack:local}",
            "command": ["haproxy", "-db", "-f", "/etc/proctor/forward.cfg"],
            "network_mode": f"service:{service}",
            "volumes": [f"{config_dir / (service + '-forward.cfg')}:/etc/proctor/forward.cfg:ro"],
            "depends_on": {service: {"condition": "service_healthy"}},
            "healthcheck": healthcheck("process", "forward.cfg"),
        }
    return {"services": services}


def write_override(compose_dir: Path, run_dir: Path, env: Mapping[str, str], provider_ports: Mapping[str, int],
                   gateways: Sequence[str], valkey: Mapping[str, Any] | None = None,
                   extend: Callable[[dict[str, Any]], None] | None = None) -> Path:
    """Write the forwards' configs and the override file into ``compose_dir``; return its path.
    ``extend`` may add to the document before it is written (the fault proxy's links, SMS egress)."""
    connections = run_dir / "connections"
    connections.mkdir(parents=True, exist_ok=True)
    connections.chmod(0o777)  # the components run as uid 10001 and write their counters here
    for service, port in PROVIDER_FORWARDS.items():
        config = compose_dir / f"{service}-forward.cfg"
        config.write_text(forward_config(gateways, port))
        config.chmod(0o644)
    document = override_document(env, provider_ports, compose_dir, connections.resolve(), valkey)
    if extend is not None:
        extend(document)
    path = compose_dir / "override.json"
    path.write_text(json.dumps(document, indent=2))
    return path
