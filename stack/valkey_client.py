"""Valkey clients: TLS, pooled, explicit timeouts and an explicit retry policy.

redis-py 8 retries every command 10 times by default, re-sending non-idempotent
writes after a timeout (an INCR can run twice). We choose per purpose instead:
- ``queue``: RQ enqueue/dequeue. Job ids are unique per outbox attempt, so a
  re-sent enqueue cannot create a second job for the same attempt: a few retries.
- ``probe``: metrics and health reads; no retries, short timeouts, never blocks a request.
- ``lock``: the capacity lock (stack/web/capacity_lock.py); no retries: a ``SET NX`` re-sent
  after a timeout would find its own key and read as "held by someone else".
- ``limiter``: the request limiter's counters, as the ``limiter`` ACL user (no retries, as ``probe``).

Every client authenticates as its component's ACL user (``settings.valkey_user``; see
stack/valkey_acl.py): Valkey's default user is off in both deployments.

Every connection names itself (``CLIENT SETNAME <component>/<purpose>``) so a
``CLIENT LIST`` shows which component holds which connection, and a reconnect shows
up as a new client id under the same name. The component is ``settings.component``
(``PROCTOR_COMPONENT``, set by the embedded runner), else ``settings.node_name``.

TLS set-up is paid once per process tree, not per connection: redis-py builds a new
``ssl.create_default_context()`` (every system CA parsed, ~0.1 s) for each connection,
and an RQ horse is a fresh fork whose first command needs a new connection. Our
``CountingSSLConnection`` uses one client context per CA, built in the worker's parent
(``warm_tls``) and inherited by every horse, trusting only the run's CA.

With ``settings.valkey_sentinels`` (PROCTOR_VALKEY_SENTINELS; docs/valkey.md) a client finds the
primary through the Sentinels (``Sentinel.master_for``) as the sentinels' ``discovery`` user: a
connection asks them where the primary is each time it connects, so a client follows a
failover on its next reconnect; a connection still open to a demoted primary is dropped on
its first ``READONLY`` answer. ``PROCTOR_VALKEY_URL`` then only carries the TLS scheme.

How a component holds its connections is a policy chosen once (``connection_policy``): ``POOLED``,
or with ``settings.controls.valkey_fresh_connections`` (PROCTOR_VALKEY_FRESH_CONNECTIONS, a negative
control reproducing the seed's "fresh TLS connections") ``FRESH``, where every call opens and
closes its own connection (``FreshConnectionPool``). A new connection waits at most
``settings.valkey_connect_timeout`` for TCP and TLS together; each attempt past it counts as a
connection timeout (``timeouts`` by phase, docs/valkey.md "Connection timeouts").

Every connection counts its connects and connection-level errors, classified by
``classify_error``, and the commands Valkey refused with ``OOM`` (``oom_refusals``), into the process's ``stack.connection_stats.process_stats()``
(one file per process under the embedded runner; web nodes also export them in /metrics).
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from redis import Redis
from redis.backoff import ExponentialBackoff
from redis.connection import Connection, ConnectionPool, SSLConnection
from redis.sentinel import Sentinel, SentinelConnectionPool, SentinelManagedConnection, SentinelManagedSSLConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import OutOfMemoryError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from stack.config import Settings
from stack.connection_stats import component_name, process_stats
from stack.valkey_acl import LIMITER_USER

__all__ = [
    "BLOCKING_COMMANDS",
    "FRESH",
    "POOLED",
    "SOCKET_TIMEOUT",
    "ConnectionPolicy",
    "CountingConnection",
    "CountingSSLConnection",
    "CountingSentinelSSLConnection",
    "DiscoverySSLConnection",
    "FollowingSentinelConnection",
    "FreshSentinelConnectionPool",
    "FreshConnectionPool",
    "classify_error",
    "client_name",
    "connection_policy",
    "credentials",
    "majority",
    "primary_address",
    "primary_line",
    "sentinel_addresses",
    "sentinel_clients",
    "sentinel_votes",
    "tls_context",
    "valkey_client",
    "warm_tls",
]

SOCKET_TIMEOUT = 5.0

BLOCKING_COMMANDS = frozenset({"BLMOVE", "BLPOP", "BRPOP", "BRPOPLPUSH", "BLMPOP", "BZPOPMIN", "BZPOPMAX", "BZMPOP",
                               "XREAD", "XREADGROUP", "WAIT", "WAITAOF"})
"""Commands the server may hold for their own timeout: their answer gets the connection's socket timeout."""
_SUBSCRIBING = frozenset({"SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE", "MONITOR"})
"""After one of these the connection waits for pushes: its reads keep the socket timeout too."""

_RETRIES = {"queue": 3, "probe": 0, "lock": 0, "limiter": 0}


def credentials(settings: Settings, purpose: str = "queue") -> dict[str, str]:
    """``username``/``password`` of this component's Valkey ACL user (stack/valkey_acl.py); the
    ``limiter`` purpose connects as the limiter user, the only one allowed its counters. Empty when
    the settings name no user (a bare test server without ACLs)."""
    if purpose == "limiter":
        return {"username": LIMITER_USER, "password": settings.valkey_limiter_password} \
            if settings.valkey_limiter_password else {}
    if not settings.valkey_user:
        return {}
    return {"username": settings.valkey_user, "password": settings.valkey_password}


def client_name(settings: Settings | None, purpose: str) -> str:
    """The CLIENT SETNAME of a connection: ``<component>/<purpose>`` (no spaces allowed)."""
    return f"{component_name(settings)}/{purpose}"


def classify_error(exc: BaseException, connecting: bool = False) -> str:
    """One of ``stack.connection_stats.ERROR_KINDS`` for an exception raised while connecting or talking to Valkey."""
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and len(chain) < 5:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    text = " ".join(str(e) for e in chain).lower()
    if "max number of clients" in text:
        return "max_clients"
    if any(isinstance(e, (socket.timeout, RedisTimeoutError, TimeoutError)) for e in chain) \
            or "timeout" in text or "timed out" in text:
        return "connect_timeout" if connecting else "timeout"
    if any(isinstance(e, ConnectionRefusedError) for e in chain) or "refused" in text:
        return "refused"
    if any(isinstance(e, (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)) for e in chain) \
            or "reset by peer" in text or "closed by server" in text or "broken pipe" in text:
        return "reset"
    if any(isinstance(e, ssl.SSLError) for e in chain) or "ssl" in text or "certificate" in text \
            or "eof occurred in violation" in text:
        return "tls"
    return "other"


def _command_name(args: tuple[Any, ...]) -> str:
    first = args[0] if args else b""
    return (first.decode(errors="replace") if isinstance(first, (bytes, bytearray)) else str(first)).upper()


class _Counting:
    """Mixin: counts successful connects, connection errors and timed-out connection attempts
    (by phase, ``stack.connection_stats.TIMEOUT_PHASES``) into the process's stats.

    It also caps the wait for the answer to a command that does not block server-side at
    ``SOCKET_TIMEOUT``, whatever the connection's socket timeout. RQ raises the socket timeout
    of a worker's whole pool to its dequeue block + 10 s (35 s with WORKER_TTL 40), for its
    ``BLMOVE``; with it every other command of the worker and of its horses (a job's result,
    a heartbeat, the shutdown's writes) waited 35 s on a primary gone silent, where the
    Sentinels had named another after 4 s (measured: the partition scenario's workers sat
    on the old primary until the link healed). Capped, such a command times out in 5 s and its
    retry reconnects to the primary the Sentinels name then (``_FollowsPrimary``)."""

    _proctor_connecting = False
    _proctor_phase = "connect"
    _proctor_sending = False
    _proctor_waits = False  # the command being answered may block server-side
    _proctor_subscribed = False

    def send_command(self, *args: Any, **kwargs: Any) -> None:
        name = _command_name(args)
        self._proctor_waits = name in BLOCKING_COMMANDS
        self._proctor_subscribed = self._proctor_subscribed or name in _SUBSCRIBING
        self._proctor_sending = True
        try:
            super().send_command(*args, **kwargs)  # type: ignore[misc]
        finally:
            self._proctor_sending = False

    def _answer_timeout(self) -> float | None:
        """The cap for the next answer, or None to keep the socket timeout."""
        if self._proctor_waits or self._proctor_subscribed:
            return None
        current = getattr(self, "socket_timeout", None)
        return SOCKET_TIMEOUT if current is None or current > SOCKET_TIMEOUT else None

    def disconnect(self, *args: Any, **kwargs: Any) -> None:
        self._proctor_subscribed = False  # a new socket starts unsubscribed
        super().disconnect(*args, **kwargs)  # type: ignore[misc]

    def _connect(self) -> Any:
        # One attempt (redis-py's retry calls this again): TCP connect, then for TLS the handshake,
        # which _SharedContext marks. Each attempt that times out is one of the seed's timeouts.
        self._proctor_phase = "connect"
        try:
            return super()._connect()  # type: ignore[misc]
        except (socket.timeout, TimeoutError):
            process_stats().record_timeout(self._proctor_phase)
            raise

    def connect_check_health(self, *args: Any, **kwargs: Any) -> None:
        if getattr(self, "_sock", None):
            return
        self._proctor_connecting = True  # errors inside (e.g. max clients at CLIENT SETNAME) count once, here
        try:
            super().connect_check_health(*args, **kwargs)  # type: ignore[misc]
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            process_stats().record_error(classify_error(exc, connecting=True), connecting=True)
            raise
        finally:
            self._proctor_connecting = False
        process_stats().record_connect()

    def send_packed_command(self, *args: Any, **kwargs: Any) -> None:
        if not self._proctor_sending:
            self._proctor_waits = False  # a pipeline or a transaction: never held server-side
        connected = bool(getattr(self, "_sock", None))
        try:
            super().send_packed_command(*args, **kwargs)  # type: ignore[misc]
        except (RedisConnectionError, RedisTimeoutError) as exc:
            if connected and not self._proctor_connecting:  # a failed (re)connect inside was counted there
                process_stats().record_error(classify_error(exc), connecting=False)
            raise

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        cap = None if "timeout" in kwargs else self._answer_timeout()
        if cap is not None:
            kwargs["timeout"] = cap
        try:
            return super().read_response(*args, **kwargs)  # type: ignore[misc]
        except OutOfMemoryError:
            # Valkey full under noeviction refused a write: every answer passes here, a
            # pipeline's and a script's too, so each component's refusals are counted once.
            process_stats().record_event("oom_refusals")
            raise
        except (RedisConnectionError, RedisTimeoutError) as exc:
            if not self._proctor_connecting:
                process_stats().record_error(classify_error(exc), connecting=False)
            raise


class FreshConnectionPool(ConnectionPool):
    """``valkey_fresh_connections`` (the seed's anti-pattern, for negative controls):
    every connection is closed when a command gives it back, so each Valkey call
    (a command, a pipeline, a blocking pop) pays a new TCP + TLS handshake."""

    def release(self, connection: Any) -> None:
        connection.disconnect()
        super().release(connection)


class CountingConnection(_Counting, Connection):
    pass


_TLS_CONTEXTS: dict[tuple[Any, ...], ssl.SSLContext] = {}


def tls_context(ca_certs: str | None, cert_reqs: Any = ssl.CERT_REQUIRED, check_hostname: bool = False) -> ssl.SSLContext:
    """One client context per (CA file, verification): built once, shared by every connection
    of this process and of its forked children (RQ horses)."""
    key = (ca_certs, cert_reqs, check_hostname)
    context = _TLS_CONTEXTS.get(key)
    if context is None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = check_hostname  # before verify_mode: CERT_NONE needs it off first
        context.verify_mode = cert_reqs
        if ca_certs:
            context.load_verify_locations(cafile=ca_certs)  # only the run's CA, not every system CA
        else:
            context.load_default_certs()
        _TLS_CONTEXTS[key] = context
    return context


def warm_tls(settings: Settings) -> None:
    """Build the TLS context now (in a worker's parent), so no forked horse builds its own."""
    if settings.valkey_url.startswith("rediss://"):
        tls_context(settings.valkey_ca or None, ssl.CERT_REQUIRED, True)  # as valkey_client asks


class _SharedContext:
    """Mixin for SSL connections: wrap with the process's one context for the run's CA."""

    def _wrap_socket_with_ssl(self, sock: Any) -> Any:
        # redis-py runs the handshake under the socket (command) timeout; a client's connect timeout
        # covers TCP and TLS together, so a slow handshake is a connection timeout, as the seed counted.
        self._proctor_phase = "handshake"
        sock.settimeout(self.socket_connect_timeout if self.socket_connect_timeout is not None else self.socket_timeout)
        wrapped = self._handshake(sock)
        wrapped.settimeout(self.socket_timeout)
        return wrapped

    def _handshake(self, sock: Any) -> Any:
        if self.certfile or self.keyfile or self.ca_path or self.ca_data or self.ssl_ciphers \
                or self.ssl_min_version is not None or self.ssl_validate_ocsp or self.ssl_validate_ocsp_stapled \
                or self.ssl_include_verify_flags or self.ssl_exclude_verify_flags:
            return super()._wrap_socket_with_ssl(sock)  # options we do not use: redis-py's own path
        context = tls_context(self.ca_certs, self.cert_reqs, self.check_hostname)
        return context.wrap_socket(sock, server_hostname=self.host)


class CountingSSLConnection(_Counting, _SharedContext, SSLConnection):
    pass


class _FollowsPrimary:
    """Mixin for Sentinel-managed connections: ask the Sentinels where the primary is on every
    (re)connect. redis-py asks only when the pool hands out a connection; a connection that
    reconnects inside a command (its retry after a timeout) reuses the old address, so under a
    silent partition every retry of every command waited out the old primary again (measured:
    one SET took 66 s, 16 handshakes of up to 5 s, though the Sentinels had switched after 4 s)."""

    def connect_check_health(self, *args: Any, **kwargs: Any) -> None:
        pool = getattr(self, "connection_pool", None)
        if not getattr(self, "_sock", None) and pool is not None and pool.is_master:
            self.host, self.port = pool.get_master_address()  # type: ignore[attr-defined]
        super().connect_check_health(*args, **kwargs)  # type: ignore[misc]


class CountingSentinelSSLConnection(_FollowsPrimary, _Counting, _SharedContext, SentinelManagedSSLConnection):
    """A connection to whichever node the Sentinels name primary when it connects."""


class FollowingSentinelConnection(_FollowsPrimary, SentinelManagedConnection):
    """The same without TLS (a bare test server)."""


class DiscoverySSLConnection(_SharedContext, SSLConnection):
    """A connection to a Sentinel: not counted, since a component's counters are about the data path."""


class FreshSentinelConnectionPool(SentinelConnectionPool):
    """``FreshConnectionPool`` behind Sentinel: a discovery and a handshake per call."""

    def release(self, connection: Any) -> None:
        connection.disconnect()
        super().release(connection)


@dataclass(frozen=True)
class ConnectionPolicy:
    """How a component's clients hold Valkey connections, chosen once at start-up (connection_policy)."""

    name: str
    pool_class: type[ConnectionPool]
    sentinel_pool_class: type[SentinelConnectionPool]


POOLED = ConnectionPolicy("pooled", ConnectionPool, SentinelConnectionPool)
FRESH = ConnectionPolicy("fresh", FreshConnectionPool, FreshSentinelConnectionPool)
"""The seed's anti-pattern: a new TCP + TLS handshake per call (``valkey_fresh_connections``)."""


def connection_policy(settings: Settings) -> ConnectionPolicy:
    """``FRESH`` when this component's settings ask for a connection per call, else ``POOLED``; the
    embedded runner can give one component its own (StackSpec.component_settings)."""
    return FRESH if settings.controls.valkey_fresh_connections else POOLED


def sentinel_addresses(value: str) -> list[tuple[str, int]]:
    """``"127.0.0.1:26379,127.0.0.1:26380"`` -> [(host, port), ...]; ValueError naming a bad entry."""
    addresses = []
    for item in filter(None, (part.strip() for part in value.split(","))):
        host, _, port = item.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"PROCTOR_VALKEY_SENTINELS: {item!r} is not host:port")
        addresses.append((host, int(port)))
    return addresses


def valkey_client(settings: Settings, purpose: str = "queue", policy: ConnectionPolicy | None = None) -> Redis:
    """A client for ``purpose``, its connections held as ``policy`` says (default: this component's
    ``connection_policy``)."""
    if purpose not in _RETRIES:
        raise ValueError(f"purpose must be one of {sorted(_RETRIES)}, not {purpose!r}")
    policy = policy or connection_policy(settings)
    tls = settings.valkey_url.startswith("rediss://")
    kwargs: dict[str, object] = {
        "socket_connect_timeout": settings.valkey_connect_timeout,  # TCP + TLS handshake (_SharedContext)
        "socket_timeout": SOCKET_TIMEOUT if purpose == "queue" else 1.0,
        "socket_keepalive": True,
        "health_check_interval": 10,
        "retry": Retry(ExponentialBackoff(cap=0.5, base=0.02), _RETRIES[purpose]),
        "max_connections": 50,
        "client_name": client_name(settings, purpose),
        "connection_class": CountingSSLConnection if tls else CountingConnection,
        **credentials(settings, purpose),
    }
    if tls:
        if settings.valkey_ca:
            kwargs["ssl_ca_certs"] = settings.valkey_ca
        kwargs["ssl_cert_reqs"] = "required"
        kwargs["ssl_check_hostname"] = True  # the run's certificate names 127.0.0.1
    if settings.valkey_sentinels:
        return _primary_via_sentinels(settings, kwargs, policy.sentinel_pool_class)
    client = Redis(connection_pool=policy.pool_class.from_url(settings.valkey_url, **kwargs))
    client.auto_close_connection_pool = True  # close() also drops this private pool, as Redis.from_url's
    return client


def sentinel_clients(settings: Settings, timeout: float = 1.0) -> list[Redis]:
    """One client per Sentinel, as their ``discovery`` user, over TLS when the stack's URL is ``rediss://``."""
    discovery: dict[str, object] = {
        "socket_connect_timeout": min(settings.valkey_connect_timeout, timeout), "socket_timeout": timeout,
        "retry": Retry(ExponentialBackoff(cap=0.5, base=0.02), 0),  # the next Sentinel is the retry
        "username": "discovery", "password": settings.valkey_sentinel_password,
    }
    if settings.valkey_url.startswith("rediss://"):
        discovery.update(connection_class=DiscoverySSLConnection, ssl_cert_reqs="required", ssl_check_hostname=True,
                         **({"ssl_ca_certs": settings.valkey_ca} if settings.valkey_ca else {}))
    return [Redis(connection_pool=ConnectionPool(host=host, port=port, **discovery))
            for host, port in sentinel_addresses(settings.valkey_sentinels)]


def sentinel_votes(settings: Settings) -> list[tuple[str, int] | None]:
    """Each Sentinel's primary ``(host, port)``, in the settings' order; None where one does not answer."""
    votes: list[tuple[str, int] | None] = []
    for client in sentinel_clients(settings, timeout=0.5):
        try:
            host, port = client.sentinel_get_master_addr_by_name(settings.valkey_service)
            votes.append((host.decode() if isinstance(host, bytes) else str(host), int(port)))
        except (RedisConnectionError, RedisTimeoutError, OSError, TypeError, ValueError):
            votes.append(None)
        finally:
            client.close()
    return votes


def majority(votes: Sequence[tuple[str, int] | None]) -> tuple[str, int] | None:
    """The address most answering Sentinels name (None: none answers)."""
    named = [vote for vote in votes if vote is not None]
    return max(set(named), key=named.count) if named else None


def primary_address(settings: Settings) -> tuple[str, int] | None:
    """The primary's ``(host, port)`` as most answering Sentinels name it (None: none answers)."""
    return majority(sentinel_votes(settings))


def primary_line(votes: Sequence[tuple[str, int] | None], names: Mapping[tuple[str, int], str]) -> str:
    """`proctor status`'s line: the node most Sentinels name primary, and how many agree."""
    address = majority(votes)
    if address is None:
        return "primary  unknown: no Sentinel answers"
    return (f"primary  {names.get(address, '?')} ({address[0]}:{address[1]}; "
            f"{votes.count(address)} of {len(votes)} Sentinels agree)")


def _primary_via_sentinels(settings: Settings, kwargs: dict[str, object],
                           pool_class: type[SentinelConnectionPool]) -> Redis:
    """A client of the current primary, as ``Sentinel.master_for`` gives it, with our connection
    class (counted, the shared TLS context) and the Sentinels asked as the ``discovery`` user."""
    tls = kwargs.get("connection_class") is CountingSSLConnection
    kwargs = {**kwargs, "connection_class": CountingSentinelSSLConnection if tls else FollowingSentinelConnection}
    manager = Sentinel([])
    manager.sentinels = sentinel_clients(settings)
    client = manager.master_for(settings.valkey_service, connection_pool_class=pool_class, **kwargs)
    client.auto_close_connection_pool = True
    return client
