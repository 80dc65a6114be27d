"""Valkey for the stack: TLS only (no plaintext port), AOF, noeviction, in the run folder.

``noeviction`` because an evicted RQ job hash is a silently lost job; AOF so that an
acknowledged enqueue survives a Valkey restart. Clients must verify the server with
the run's CA (``tls-auth-clients no``: server authentication only). Every client then
authenticates as its component's ACL user with a per-run password; the ``default`` user is
off (stack/valkey_acl.py; docs/security.md says why passwords and not client certificates).
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

from redis import Redis
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from redis.retry import Retry

from stack.embedded.certs import CertPaths
from stack.valkey_acl import acl_lines

__all__ = ["DEFAULT_MAXMEMORY", "replication_ready", "valkey_url", "write_valkey_config", "valkey_argv", "tls_ping"]

DEFAULT_MAXMEMORY = "256mb"


def valkey_url(tls_port: int, db: int = 0, user: str = "", password: str = "") -> str:
    """The TLS URL; with ``user``, one that authenticates (passwords are URL-safe by construction)."""
    credential = f"{user}:{password}@" if user else ""
    return f"rediss://{credential}127.0.0.1:{tls_port}/{db}"


def _config_text(tls_port: int, certs: CertPaths, data_dir: Path, maxmemory: str, maxclients: int | None,
                 passwords: Mapping[str, str], extra: Sequence[str] = ()) -> str:
    lines = [
        "bind 127.0.0.1",
        "port 0",  # no plaintext listener at all
        f"tls-port {tls_port}",
        f'tls-cert-file "{certs.server_cert.resolve()}"',
        f'tls-key-file "{certs.server_key.resolve()}"',
        f'tls-ca-cert-file "{certs.ca_cert.resolve()}"',
        "tls-auth-clients no",
        "daemonize no",
        'logfile ""',  # stdout, which the supervisor sends to logs/valkey.log
        f'dir "{data_dir.resolve()}"',
        "appendonly yes",
        "appendfsync everysec",
        'save ""',  # AOF is the durability story; no RDB fork pauses mid-test
        f"maxmemory {maxmemory}",
        "maxmemory-policy noeviction",
        "protected-mode yes",
        *acl_lines(passwords),  # only SHA-256 digests of the passwords reach this file
    ]
    if maxclients is not None:
        lines.append(f"maxclients {maxclients}")  # small only for the fresh-connection negative control
    lines.extend(extra)  # replication and its announce address (stack/embedded/sentinel.py)
    return "\n".join(lines) + "\n"


def write_valkey_config(
    run_dir: Path, tls_port: int, certs: CertPaths, maxmemory: str = DEFAULT_MAXMEMORY,
    maxclients: int | None = None, *, passwords: Mapping[str, str], name: str = "valkey", extra: Sequence[str] = (),
) -> Path:
    """Write ``<run_dir>/<name>/valkey.conf`` (data in the same folder, 0600: a node with a
    replication credential holds it in clear); return its path."""
    folder = (run_dir / name).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "valkey.conf"
    path.touch(mode=0o600)
    path.write_text(_config_text(tls_port, certs, folder, maxmemory, maxclients, passwords, extra))
    return path


def valkey_argv(binary: str, config: Path) -> list[str]:
    return [binary, str(config)]


def tls_ping(url: str, ca_cert: Path | str, timeout: float = 1.0) -> bool:
    """One PING over TLS, verifying the server with ``ca_cert``; False on any failure. ``url``
    carries the prober's ACL credential (``valkey_url(..., user=, password=)``): without one
    Valkey answers nothing but an authentication error, and a loading Valkey must read as not ready."""
    client = Redis.from_url(
        url,
        ssl_ca_certs=str(ca_cert),
        ssl_cert_reqs="required",
        socket_connect_timeout=timeout,
        socket_timeout=timeout,
        retry=Retry(NoBackoff(), 0),  # a probe answers now or not at all
    )
    try:
        return bool(client.ping())
    except (RedisError, OSError):
        return False
    finally:
        client.close()


def replication_ready(url: str, ca_cert: Path | str, timeout: float = 1.0) -> bool:
    """A node of a replicated Valkey is ready as a primary, or as a replica whose link to its
    primary is up (before that a Sentinel could find no replica to promote)."""
    client = Redis.from_url(url, ssl_ca_certs=str(ca_cert), ssl_cert_reqs="required", socket_connect_timeout=timeout,
                            socket_timeout=timeout, retry=Retry(NoBackoff(), 0))
    try:
        info = client.info("replication")
    except (RedisError, OSError):
        return False
    finally:
        client.close()
    return info.get("role") == "master" or info.get("master_link_status") == "up"
