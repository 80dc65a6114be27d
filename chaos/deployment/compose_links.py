"""The fault proxy in the compose network: a run's links (``ComposeSpec.links``) as override data.

The same links as the embedded runner (the table: ``stack.deploy.links``), done with containers:

- a ``faultproxy`` service (``python -m chaos.faultproxy``, in the stack image) on the project
  network; each requested link is a proxy listening on a fixed port inside that container,
  its upstream the real service by its compose name (``valkey:6380``, ``ai-provider:8101``);
  the proxies are created at start from a populate file (``--config``);
- its Toxiproxy-compatible API published on 127.0.0.1 only, so the nemesis adds toxics with
  the same calls as against the embedded stack;
- the consumers of each requested link pointed at the proxy, from the embedded runner's own
  table (``LINKS_OF_ROLE``: web nodes' ``PROCTOR_VALKEY_URL`` is ``valkey_web``, ...); a
  consumer of a link not requested stays direct, and waits for the proxy only if it uses it.

TLS goes end to end through the proxy (it relays bytes): the client dials ``faultproxy`` and
checks that Valkey's certificate names it. ``proctor-certs`` puts ``faultproxy`` in the
certificate's names, as the embedded certificate names 127.0.0.1 where its proxies listen.
No credential is written here: a proxied Valkey URL holds only the address, each consumer's ACL
user comes from its own env file, and the fault proxy's API credential from the run's 0600
``faultproxy.env`` (its API is a control plane: docs/faultproxy.md).

Links from HAProxy to a web node (``web_N``, ``web_*``) are not offered: HAProxy's
configuration (docker/haproxy.cfg) names the nodes directly.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from chaos.deployment.compose_files import healthcheck
from stack.deploy.links import FIXED_LINKS, LINKS_OF_ROLE, UPSTREAM_OF

__all__ = [
    "API_PORT",
    "FAULTPROXY_SERVICE",
    "LISTEN_BASE",
    "UPSTREAMS",
    "add_links",
    "consumer_env",
    "faultproxy_service",
    "link_ports",
    "links_unsupported",
    "populate_items",
    "write_populate",
]

FAULTPROXY_SERVICE = "faultproxy"
API_PORT = 8474  # the API inside the container (Toxiproxy's default)
LISTEN_BASE = 16380  # proxies listen on LISTEN_BASE + i inside the container, i in link name order
UPSTREAMS = {"valkey": "valkey:6380", "ai_provider": "ai-provider:8101", "sms_gateway": "sms-gateway:8102"}
"""The embedded runner's service names (``UPSTREAM_OF``'s values) -> the compose address."""


def links_unsupported(links: Iterable[str]) -> str | None:
    """Why these links cannot be made on compose, or None."""
    other = sorted(set(links) - set(FIXED_LINKS))
    if other:
        return (f"links {other}: HAProxy -> web node links are not built on compose (docker/haproxy.cfg names "
                f"the nodes directly); compose offers {', '.join(FIXED_LINKS)}")
    return None


def link_ports(links: Iterable[str]) -> dict[str, int]:
    """Each requested link's listen port inside the faultproxy container (fixed per name order)."""
    return {name: LISTEN_BASE + i for i, name in enumerate(sorted(set(links)))}


def populate_items(ports: Mapping[str, int]) -> list[dict[str, Any]]:
    """The ``POST /populate`` body the proxy starts with (``--config``)."""
    return [{"name": name, "listen": f"0.0.0.0:{port}", "upstream": UPSTREAMS[UPSTREAM_OF[name]], "enabled": True}
            for name, port in sorted(ports.items())]


def _proxied_url(var: str, port: int) -> str:
    if var == "PROCTOR_VALKEY_URL":
        return f"rediss://{FAULTPROXY_SERVICE}:{port}/0"
    return f"http://{FAULTPROXY_SERVICE}:{port}"


def consumer_env(role: str, ports: Mapping[str, int]) -> dict[str, str]:
    """The variables a component of ``role`` reads that must point at the proxy (only requested links)."""
    return {var: _proxied_url(var, ports[link]) for var, link in LINKS_OF_ROLE.get(role, {}).items() if link in ports}


CREDENTIAL_ENV_FILE = "${PROCTOR_COMPOSE_RUN:-.compose/run}/faultproxy.env"
"""The fault proxy's API credential (stack.deploy.provision writes it): Compose reads the file, the
override names only its path."""


def faultproxy_service(ports: Mapping[str, int], api_host_port: int, config_path: Path, seed: int) -> dict[str, Any]:
    """The ``faultproxy`` service: API on 127.0.0.1 of the host only, proxies inside the network."""
    first = sorted(ports)[0]
    return {
        "image": "${PROCTOR_IMAGE:-proctor-stack:local}",
        "init": True,
        "restart": "on-failure",  # supervised, as the embedded runner's fault proxy
        "command": ["python", "-m", "chaos.faultproxy", "--host", "0.0.0.0", "--port", str(API_PORT),
                    "--seed", str(seed), "--config", "/etc/proctor/proxies.json"],
        "volumes": [f"{config_path}:/etc/proctor/proxies.json:ro"],
        "env_file": [CREDENTIAL_ENV_FILE],  # FAULTPROXY_API_CREDENTIAL: the API is a control plane
        "networks": ["stack"],
        "ports": [f"127.0.0.1:{api_host_port}:{API_PORT}"],
        "healthcheck": healthcheck("http-env-credential", f"http://127.0.0.1:{API_PORT}/proxies/{first}"),
    }


def add_links(services: dict[str, Any], roles: Mapping[str, str], ports: Mapping[str, int], api_host_port: int,
              config_path: Path, seed: int) -> None:
    """Add the faultproxy service to ``services`` and point the consumers of the requested links at it.

    ``roles``: service -> component role (``web``, ``worker``, ``relay``, ...). A consumer that
    uses a proxied link also waits for the proxy to be healthy; the others are left alone."""
    if not ports:
        return
    services[FAULTPROXY_SERVICE] = faultproxy_service(ports, api_host_port, config_path, seed)
    for service, role in roles.items():
        env = consumer_env(role, ports)
        if env:
            entry = services.setdefault(service, {})
            entry.setdefault("environment", {}).update(env)
            entry.setdefault("depends_on", {})[FAULTPROXY_SERVICE] = {"condition": "service_healthy"}


def write_populate(path: Path, ports: Mapping[str, int]) -> Path:
    path.write_text(json.dumps(populate_items(ports), indent=2) + "\n")
    path.chmod(0o644)  # read by the container's user through the bind mount
    return path
