"""Valkey as primary + replica + three Sentinels (``StackSpec.valkey = "sentinel"``).

Every hop is TLS with the run's CA: clients to nodes and Sentinels, the replica to its
primary (``tls-replication yes``), a Sentinel to the nodes and to the other Sentinels. Each
node carries the replication credential (the ``replica`` user) because any node may be
demoted after a failover, and announces the address clients must use for it
(``replica-announce-ip/port``): Sentinel hands clients what the nodes announce.

A Sentinel is ready when it sees the replica and both other Sentinels: before that a
failover could find "no good replica" or no quorum, so the stack does not report ready.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

from redis import Redis
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from redis.retry import Retry

from stack.embedded.certs import CertPaths
from stack.valkey_acl import sentinel_acl_lines

__all__ = ["DOWN_AFTER_MS", "FAILOVER_TIMEOUT_MS", "HOST", "MIN_REPLICAS_MAX_LAG", "NODES", "QUORUM", "SENTINELS", "SERVICE",
           "node_lines", "sentinel_ready", "sentinel_status", "sentinel_text", "write_sentinel_config"]

SERVICE = "proctor"
HOST = "127.0.0.1"
"""Where the embedded runner's nodes and Sentinels listen and announce themselves."""
QUORUM = 2
NODES = ("valkey", "valkey_2")
"""The data nodes: ``valkey`` starts as the primary (its name kept from the single topology)."""
SENTINELS = ("sentinel_1", "sentinel_2", "sentinel_3")
DOWN_AFTER_MS = 2000
"""A node silent this long is subjectively down; measured here: ~3.3 s from a kill to +switch-master."""
FAILOVER_TIMEOUT_MS = 10000


MIN_REPLICAS_MAX_LAG = max(1, math.ceil(DOWN_AFTER_MS / 1000))
"""``min-replicas-max-lag`` (whole seconds): a primary whose replica has not acknowledged for
this long refuses writes. The Sentinels' down-after: a primary cut off from its replica stops
taking writes about when the Sentinels start to replace it (a replica acknowledges every 1 s)."""


def node_lines(announce_port: int, passwords: Mapping[str, str], replica_of: int | None,
               min_replicas: int = 0, announce_ip: str = HOST, primary_host: str = HOST) -> list[str]:
    """valkey.conf lines of a node: replication over TLS as the ``replica`` user, its announced
    address, ``replicaof`` (``primary_host:replica_of``) for the node that starts as a replica, and
    with ``min_replicas`` the write guard (every node: any of them may be promoted). Both deployments
    write them: the embedded runner on loopback ports, compose (stack/deploy/valkey_conf.py) on the
    containers' fixed addresses."""
    lines = ["tls-replication yes", f"replica-announce-ip {announce_ip}", f"replica-announce-port {announce_port}",
             "masteruser replica", f'masterauth "{passwords["replica"]}"', "replica-read-only yes",
             "repl-diskless-sync-delay 0"]  # the default 5 s wait for more replicas delays every start-up
    if replica_of is not None:
        lines.append(f"replicaof {primary_host} {replica_of}")
    if min_replicas:
        lines += [f"min-replicas-to-write {min_replicas}", f"min-replicas-max-lag {MIN_REPLICAS_MAX_LAG}"]
    return lines


def sentinel_text(port: int, certs: CertPaths, folder: Path, primary_port: int, passwords: Mapping[str, str],
                  bind: str = HOST, announce_ip: str = HOST, primary_host: str = HOST) -> str:
    """A Sentinel's configuration: TLS everywhere, its announced address, the service it monitors
    (the node that starts as primary), the credentials it uses and its own ACL."""
    lines = [
        f"bind {bind}",
        "port 0",
        f"tls-port {port}",
        f'tls-cert-file "{certs.server_cert.resolve()}"',
        f'tls-key-file "{certs.server_key.resolve()}"',
        f'tls-ca-cert-file "{certs.ca_cert.resolve()}"',
        "tls-auth-clients no",
        "tls-replication yes",  # a Sentinel speaks TLS to the nodes and to the other Sentinels
        "daemonize no",
        'logfile ""',
        f'dir "{folder}"',
        "sentinel resolve-hostnames no",
        f"sentinel announce-ip {announce_ip}",
        f"sentinel announce-port {port}",
        f"sentinel monitor {SERVICE} {primary_host} {primary_port} {QUORUM}",
        f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}",
        f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}",
        f"sentinel parallel-syncs {SERVICE} 1",
        f"sentinel auth-user {SERVICE} sentinel",
        f'sentinel auth-pass {SERVICE} "{passwords["sentinel"]}"',
        "sentinel sentinel-user peer",
        f'sentinel sentinel-pass "{passwords["peer"]}"',
        *sentinel_acl_lines(passwords),
    ]
    return "\n".join(lines) + "\n"


def write_sentinel_config(run_dir: Path, name: str, port: int, certs: CertPaths, primary_port: int,
                          passwords: Mapping[str, str]) -> Path:
    """``<run_dir>/<name>/sentinel.conf`` (0600: it holds the node and peer passwords; a
    Sentinel rewrites it with what it learns, so each has its own)."""
    folder = (run_dir / name).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "sentinel.conf"
    path.touch(mode=0o600)
    path.write_text(sentinel_text(port, certs, folder, primary_port, passwords))
    return path


def _sentinel(port: int, ca_cert: str, password: str, timeout: float = 1.0) -> Redis:
    return Redis(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=ca_cert, ssl_cert_reqs="required",
                 username="discovery", password=password, socket_connect_timeout=timeout, socket_timeout=timeout,
                 retry=Retry(NoBackoff(), 0))


def sentinel_status(port: int, ca_cert: str, password: str) -> dict | None:
    """``SENTINEL MASTER`` of our service as one Sentinel sees it; None if it does not answer."""
    client = _sentinel(port, ca_cert, password)
    try:
        return dict(client.sentinel_master(SERVICE))
    except (RedisError, OSError):
        return None
    finally:
        client.close()


def sentinel_ready(port: int, ca_cert: str, password: str) -> bool:
    """It monitors a primary it sees up, knows a replica and both other Sentinels."""
    state = sentinel_status(port, ca_cert, password)
    if not state:
        return False
    return (not state.get("is_sdown") and not state.get("is_odown") and int(state.get("num-slaves", 0)) >= 1
            and int(state.get("num-other-sentinels", 0)) >= len(SENTINELS) - 1)
