"""`proctor status --target compose`: a compose project's services, their state and health,
and, with the Sentinel topology, which node the Sentinels name primary (the line `proctor
status` prints for the embedded stack, from the same ``stack.valkey_client.primary_line``).

The host reaches the Sentinels at their fixed addresses through the project's bridge, as the
failover nemesis does. What it needs to ask them is read from the project's own containers,
so any project answers, `make compose-up`'s and the harness's alike: the Sentinel addresses
and the ``discovery`` password from a client's environment, the CA out of the certs volume.
Reading a container's environment takes the engine's socket, which is root already; no
password is printed.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from chaos.deployment.compose_engine import Engine
from stack.config import ENV_NAMES, Settings, load_settings
from stack.deploy.valkey_conf import CERTS, NODE_SERVICES, VALKEY_PORT
from stack.valkey_client import primary_line, sentinel_votes

__all__ = ["compose_status", "primary_of", "service_row", "sentinel_settings"]

SENTINEL_CLIENT = "relay"
"""Every client service holds the Sentinel settings (docker-compose.sentinel.yml); the relay is always there."""


def service_row(service: str, info: dict[str, Any]) -> tuple[str, bool]:
    """One line of the table, and whether the service is as it should be: running and healthy
    (or without a health check), or a one-shot (``certs``, ``ledger-init``) that exited 0."""
    state = info["State"]
    status, health = state.get("Status", "?"), (state.get("Health") or {}).get("Status", "-")
    done = status == "exited" and state.get("ExitCode") == 0
    good = done or (status == "running" and health in ("healthy", "-"))
    label = "done" if done else health
    return f"{service:<18} {status:<9} {label:<10} {info.get('RestartCount', 0)}", good


def sentinel_settings(env: list[str], ca_path: Path) -> Settings | None:
    """What a client of the project uses to ask the Sentinels (None: the project runs one Valkey)."""
    values = dict(item.split("=", 1) for item in env if "=" in item)
    sentinels = values.get(ENV_NAMES["valkey_sentinels"], "")
    if not sentinels:
        return None
    return load_settings({ENV_NAMES["valkey_sentinels"]: sentinels,
                          ENV_NAMES["valkey_sentinel_password"]: values.get(ENV_NAMES["valkey_sentinel_password"], ""),
                          ENV_NAMES["valkey_url"]: f"rediss://{NODE_SERVICES[0]}:{VALKEY_PORT}/0",
                          ENV_NAMES["valkey_ca"]: str(ca_path)})


def _address(info: dict[str, Any]) -> str:
    """The container's address; a stopped one has none, so its fixed one from the compose
    file (the Sentinels name the dead primary by it until they switch)."""
    networks = (info["NetworkSettings"].get("Networks") or {}).values()
    live = [n["IPAddress"] for n in networks if n.get("IPAddress")]
    fixed = [(n.get("IPAMConfig") or {}).get("IPv4Address") for n in networks]
    return next(iter(live + [a for a in fixed if a]), "")


def primary_of(engine: Engine) -> str | None:
    """The primary line, or None with one Valkey."""
    services = engine.services()
    if SENTINEL_CLIENT not in services:
        return None
    with tempfile.TemporaryDirectory(prefix="proctor-status-") as folder:
        ca = Path(folder) / "ca.crt"
        env = engine.inspect(SENTINEL_CLIENT)["Config"].get("Env") or []
        settings = sentinel_settings(env, ca)
        if settings is None:
            return None
        ca.write_bytes(engine.read_file(NODE_SERVICES[0], str(CERTS.ca_cert)))
        names = {(_address(engine.inspect(s)), VALKEY_PORT): s for s in NODE_SERVICES if s in services}
        return primary_line(sentinel_votes(settings), names)


def compose_status(engine: Engine) -> int:
    """Print the project's table; 0 when every service is as it should be, else 1."""
    print(f"compose project {engine.project}")
    print(f"{'service':<18} {'state':<9} {'health':<10} restarts")
    healthy = True
    for service in engine.services():
        row, good = service_row(service, engine.inspect(service))
        healthy = healthy and good
        print(row)
    primary = primary_of(engine)
    if primary:
        print(primary)
    return 0 if healthy else 1
