"""Who may do what in Valkey: one ACL user per component, a password each, drawn per run.

Both deployments build Valkey's users from this one table (the embedded runner's
``valkey.conf``, the compose stack's ``users.acl``), so they cannot drift apart. The
``default`` user is off: a process that reaches the port without a credential gets
``NOAUTH`` for every command (``HELLO``/``AUTH`` aside, which Valkey always answers).

Each user gets the command categories its component uses and only its own key patterns:
- ``web``: RQ enqueue (the unique-enqueue Lua script), the lanes' depths for /metrics, the
  capacity lock, the AI lane's shared state, the refused-job counter and worker liveness keys
  (read: ``GET /admin/queues``, stack/lanes/evidence.py);
- ``relay``: RQ enqueue and job inspection, worker liveness keys (read), its own liveness key;
- ``worker``: everything an RQ worker touches (queues, registries, results, its command
  channel), its own liveness key and busy/idle state key, the AI limiter, the refused-job counter;
- ``limiter``: the request limiter's counters (``proctor-limits:*``) and nothing else. It is
  the only user that may touch them, so no other credential can reset a brute-force limit;
- ``harness``: the test operator (it holds the run folder anyway) reads every key and writes
  the job and stack keys, but not the limiter's counters; it may read INFO and CLIENT LIST.

RQ keys stay writable by web and relay: they must enqueue. That is why a worker runs only
the project's own job functions (``stack.lanes.allowlist``): a stolen web credential can
enqueue, never execute.

With Sentinel (issue #25, ``proctor up --valkey sentinel``; docs/valkey.md) the data nodes
also know:
- ``replica``: the ``masteruser`` a replica authenticates to its primary with (``PSYNC``,
  ``REPLCONF``, ``PING``: no key, no channel). Every node carries it, since any node may be
  demoted to a replica after a failover;
- ``sentinel``: what a Sentinel sends to a monitored node (the set Valkey's Sentinel
  documentation lists: ``INFO``, ``ROLE``, ``REPLICAOF``, ``CONFIG REWRITE``, ``MULTI``/``EXEC``,
  ``CLIENT SETNAME``/``KILL``, ``SCRIPT KILL``, publish/subscribe on its hello channel).
The Sentinels have their own users (``SENTINEL_USERS``): ``discovery`` for clients (which
primary, which replicas, which Sentinels: read-only ``SENTINEL`` subcommands) and ``peer``,
the ``sentinel-user`` one Sentinel authenticates to another with (votes and hellos). Their
``default`` user is off as well: a loopback client without a password may not move the primary.
The memory-pressure scenario's filler (chaos/load/filler.py) is the ``filler`` user: writes and
deletes strings under ``proctor-filler:*``, nothing else.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Mapping

from stack.components import LIVENESS_PREFIX, RELAY_LIVENESS, WORKER_STATE_PREFIX

__all__ = ["LIMITER_USER", "REFUSED_JOBS_KEY", "SENTINEL_USERS", "USERS", "AclUser", "acl_lines", "draw_passwords",
           "sentinel_acl_lines", "user_of_role"]

REFUSED_JOBS_KEY = "proctor:refused-jobs"
"""Jobs a worker refused (a function outside the allow-list, undecodable data): a counter
every worker INCRs and the web nodes export in /metrics."""

LIMITER_USER = "limiter"


# Categories every component's client needs: CLIENT SETNAME, PING, HELLO, pipelines; then what RQ
# (enqueue, dequeue, registries, results as streams) and our Lua scripts use.
_BASE = ("+@connection", "+@transaction")
_DATA = ("+@read", "+@write", "+@keyspace", "+@list", "+@hash", "+@set", "+@sortedset", "+@string", "+@stream",
         "+@scripting")
_NEEDED = ("+info", "+time")
"""Added after ``-@dangerous`` (which holds them), or they are gone again: RQ reads ``INFO server`` to
choose its atomic BLMOVE dequeue (without it RQ silently falls back to BLPOP, and a worker killed after
the pop loses the job), and the AI limiter's Lua script reads ``TIME``."""


@dataclass(frozen=True)
class AclUser:
    name: str
    categories: tuple[str, ...]  # granted first, then every @dangerous command is taken away again
    keys: tuple[str, ...]  # ACL key selectors: ~pattern (read+write), %R~pattern (read only)
    channels: tuple[str, ...] = ()  # &pattern (pub/sub); none = no channel at all
    commands: tuple[str, ...] = _NEEDED  # single commands granted last (some of them are @dangerous)

    def rule(self, password: str) -> str:
        """The ``user`` line: on, only the SHA-256 of the password (the config never holds it), its rights."""
        digest = hashlib.sha256(password.encode()).hexdigest()
        parts = ["user", self.name, "reset", "on", f"#{digest}", *self.keys, "resetchannels", *self.channels,
                 "-@all", *self.categories, "-@dangerous", *self.commands]
        return " ".join(parts)


USERS: tuple[AclUser, ...] = (
    AclUser("web", (*_BASE, *_DATA), ("~rq:*", "~proctor:capacity-lock", "~proctor:ai:*", f"%R~{REFUSED_JOBS_KEY}",
                                       f"%R~{LIVENESS_PREFIX}*")),  # read: the final read's queue evidence (admin /queues)
    AclUser("relay", (*_BASE, *_DATA), ("~rq:*", f"%R~{LIVENESS_PREFIX}*", f"~{LIVENESS_PREFIX}{RELAY_LIVENESS}")),
    AclUser("worker", (*_BASE, *_DATA, "+@pubsub"),
            ("~rq:*", f"~{LIVENESS_PREFIX}*", f"~{WORKER_STATE_PREFIX}*", "~proctor:ai:*", f"~{REFUSED_JOBS_KEY}"),
            ("&rq:*",)),
    AclUser(LIMITER_USER, (*_BASE, "+@read", "+@write", "+@string", "+@keyspace", "+@scripting"),
            ("~proctor-limits:*",)),
    AclUser("harness", (*_BASE, *_DATA, "+@pubsub"), ("~rq:*", "~proctor:*", "%R~*"), ("&*",),
            (*_NEEDED, "+client|list", "+client|info", "+config|get", "+keys")),
    AclUser("replica", (), (), (), ("+psync", "+replconf", "+ping")),
    AclUser("filler", (*_BASE, "+@write", "+@string", "+@keyspace"), ("~proctor-filler:*",), (), ()),
    AclUser("sentinel", (), (), ("&__sentinel__:hello",),
            ("+multi", "+exec", "+slaveof", "+replicaof", "+ping", "+info", "+role", "+subscribe", "+publish",
             "+config|rewrite", "+client|setname", "+client|kill", "+script|kill")),
)

_SENTINEL_HELLO = ("+auth", "+hello", "+ping", "+client|setname", "+client|setinfo")
SENTINEL_USERS: tuple[AclUser, ...] = (
    AclUser("discovery", (), (), (),
            (*_SENTINEL_HELLO, "+sentinel|masters", "+sentinel|master", "+sentinel|slaves", "+sentinel|replicas",
             "+sentinel|sentinels", "+sentinel|get-master-addr-by-name")),
    AclUser("peer", (), (), ("&__sentinel__:*",),
            (*_SENTINEL_HELLO, "+publish", "+subscribe", "+info", "+sentinel|is-master-down-by-addr")),
)
"""Users of the Sentinels themselves (their own ACL, in each sentinel.conf)."""

_ROLE_USER = {"web": "web", "relay": "relay", "worker": "worker"}


def user_of_role(role: str) -> str | None:
    """The Valkey user a component of ``role`` connects as; None for components that never touch Valkey."""
    return _ROLE_USER.get(role)


def draw_passwords() -> dict[str, str]:
    """A fresh 256-bit password per user, for one run (URL-safe, one line)."""
    return {user.name: secrets.token_urlsafe(32) for user in (*USERS, *SENTINEL_USERS)}


def acl_lines(passwords: Mapping[str, str], users: tuple[AclUser, ...] = USERS) -> list[str]:
    """Valkey ACL rules: ``default`` off with no rights, then every user of ``users``."""
    missing = [user.name for user in users if not passwords.get(user.name)]
    if missing:
        raise ValueError(f"no Valkey password for user(s) {', '.join(missing)}")
    return ["user default reset off resetpass resetkeys resetchannels -@all",
            *(user.rule(passwords[user.name]) for user in users)]


def sentinel_acl_lines(passwords: Mapping[str, str]) -> list[str]:
    """A Sentinel's own ACL: ``default`` off, ``discovery`` for clients, ``peer`` for the other Sentinels."""
    return acl_lines(passwords, SENTINEL_USERS)
