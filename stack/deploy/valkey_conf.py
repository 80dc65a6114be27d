"""Valkey with Sentinel in containers (``docker-compose.sentinel.yml``; docs/valkey.md, docs/compose.md).

The compose stack's Sentinel topology is the embedded runner's (stack/embedded/sentinel.py):
the same node and Sentinel lines, written by the same functions, on fixed container addresses
instead of loopback ports. Sentinel hands clients the addresses the nodes announce, so each
node and Sentinel has a fixed address in the project network (``ADDRESS_SUFFIX``): the
clients in the network and the harness on the host (through the bridge) reach the same
address, and the run's certificate names it (docker/bin/proctor-certs).

``python -m stack.deploy.valkey_conf node`` prints the lines a data node adds to its
valkey.conf (docker/bin/proctor-valkey); ``python -m stack.deploy.valkey_conf sentinel PATH``
writes a Sentinel's configuration (docker/bin/proctor-sentinel). Both read the container's
environment: ``PROCTOR_COMPOSE_NET`` (the network's first three octets), ``PROCTOR_VALKEY_NODE``
or ``PROCTOR_SENTINEL_NAME`` (which one this is), and the passwords of the run's
``valkey-replica.env`` or ``valkey-sentinel.env`` (stack/deploy/provision.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from stack.embedded import sentinel as st
from stack.embedded.certs import CertPaths

__all__ = ["ADDRESS_SUFFIX", "NODE_SERVICES", "PASSWORD_ENV", "SENTINEL_PORT", "SENTINEL_SERVICES", "VALKEY_PORT",
           "address", "main", "node_text", "sentinel_addresses", "sentinel_config"]

VALKEY_PORT = 6380  # docker/bin/proctor-valkey's tls-port
SENTINEL_PORT = 26379
NODE_SERVICES = ("valkey", "valkey-2")
"""The data nodes: ``valkey`` starts as the primary, as under the embedded runner."""
SENTINEL_SERVICES = ("sentinel-1", "sentinel-2", "sentinel-3")
ADDRESS_SUFFIX = {"valkey": 11, "valkey-2": 12, "sentinel-1": 21, "sentinel-2": 22, "sentinel-3": 23}
"""Last octet of each one's fixed address: beside HAProxy's ``.10``, outside ``.128/25`` (the dynamic range)."""
PASSWORD_ENV = {"replica": "PROCTOR_VALKEY_REPLICA_PASSWORD", "sentinel": "PROCTOR_SENTINEL_PASSWORD",
                "peer": "PROCTOR_SENTINEL_PEER_PASSWORD", "discovery": "PROCTOR_SENTINEL_DISCOVERY_PASSWORD"}
"""The plaintext passwords a node (``replica``) or a Sentinel (the other three) holds, by env name."""
CERTS = CertPaths(Path("/certs/ca.crt"), Path("/certs/server.crt"), Path("/certs/server.key"))
DEFAULT_NET = "172.29.13"


def address(net: str, service: str) -> str:
    return f"{net}.{ADDRESS_SUFFIX[service]}"


def sentinel_addresses(net: str) -> str:
    """``PROCTOR_VALKEY_SENTINELS`` of every client: the three Sentinels' fixed addresses."""
    return ",".join(f"{address(net, name)}:{SENTINEL_PORT}" for name in SENTINEL_SERVICES)


def _passwords(environ: Mapping[str, str], users: tuple[str, ...]) -> dict[str, str]:
    missing = [PASSWORD_ENV[user] for user in users if not environ.get(PASSWORD_ENV[user])]
    if missing:
        raise SystemExit(f"valkey_conf: {', '.join(missing)} not set (scripts/compose-setup.sh writes the env files)")
    return {user: environ[PASSWORD_ENV[user]] for user in users}


def node_text(environ: Mapping[str, str]) -> str:
    """The replication lines of the node ``PROCTOR_VALKEY_NODE``: announced at its fixed address."""
    net, node = environ.get("PROCTOR_COMPOSE_NET", DEFAULT_NET), environ.get("PROCTOR_VALKEY_NODE", "")
    if node not in NODE_SERVICES:
        raise SystemExit(f"valkey_conf: PROCTOR_VALKEY_NODE must be one of {list(NODE_SERVICES)}, not {node!r}")
    primary = None if node == NODE_SERVICES[0] else VALKEY_PORT
    lines = st.node_lines(VALKEY_PORT, _passwords(environ, ("replica",)), replica_of=primary,
                          announce_ip=address(net, node), primary_host=address(net, NODE_SERVICES[0]))
    return "\n".join(lines) + "\n"


def sentinel_config(path: Path, environ: Mapping[str, str]) -> Path:
    """Write the configuration of the Sentinel ``PROCTOR_SENTINEL_NAME`` (0600: it holds passwords;
    a Sentinel rewrites its file with what it learns, so it lives in the container's own layer)."""
    net, name = environ.get("PROCTOR_COMPOSE_NET", DEFAULT_NET), environ.get("PROCTOR_SENTINEL_NAME", "")
    if name not in SENTINEL_SERVICES:
        raise SystemExit(f"valkey_conf: PROCTOR_SENTINEL_NAME must be one of {list(SENTINEL_SERVICES)}, not {name!r}")
    passwords = _passwords(environ, ("sentinel", "peer", "discovery"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.write_text(st.sentinel_text(SENTINEL_PORT, CERTS, path.parent, VALKEY_PORT, passwords, bind="0.0.0.0",
                                     announce_ip=address(net, name), primary_host=address(net, NODE_SERVICES[0])))
    return path


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["node"]:
        sys.stdout.write(node_text(os.environ))
        return 0
    if len(args) == 2 and args[0] == "sentinel":
        sentinel_config(Path(args[1]), os.environ)
        return 0
    print("usage: python -m stack.deploy.valkey_conf node | sentinel PATH", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
