"""The embedded Valkey: TLS only, verified with the run's CA, AOF on, noeviction, ACL users only."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
from redis import Redis
from redis.backoff import NoBackoff
from redis.exceptions import AuthenticationError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.retry import Retry

from stack.embedded.binaries import find_valkey
from stack.embedded.certs import CertPaths, make_certs
from stack.deploy.ports import free_port
from stack.embedded.supervisor import ProcessSpec, Supervisor
from stack.embedded.valkey import tls_ping, valkey_argv, valkey_url, write_valkey_config
from stack.valkey_acl import draw_passwords

pytestmark = pytest.mark.integration

_NO_RETRY = Retry(NoBackoff(), 0)
PASSWORDS = draw_passwords()
HARNESS = {"username": "harness", "password": PASSWORDS["harness"]}


@pytest.fixture
def valkey(tmp_path: Path) -> Iterator[tuple[int, CertPaths]]:
    certs = make_certs(tmp_path / "tls")
    port = free_port()
    conf = write_valkey_config(tmp_path, port, certs, passwords=PASSWORDS)
    sup = Supervisor(tmp_path)
    try:
        url = valkey_url(port, user="harness", password=PASSWORDS["harness"])
        sup.start(ProcessSpec("valkey", valkey_argv(find_valkey().path, conf), ready=lambda: tls_ping(url, certs.ca_cert)))
        sup.wait_ready("valkey", 10)
        yield port, certs
    finally:
        sup.stop_all()


def _client(port: int, **kwargs: object) -> Redis:
    return Redis(host="127.0.0.1", port=port, socket_timeout=2, socket_connect_timeout=2, retry=_NO_RETRY, **kwargs)


def test_tls_with_the_run_ca_works(valkey: tuple[int, CertPaths]) -> None:
    port, certs = valkey
    client = Redis.from_url(valkey_url(port), ssl_ca_certs=str(certs.ca_cert), retry=_NO_RETRY, **HARNESS)
    try:
        assert client.set("proctor:k", "v") and client.get("proctor:k") == b"v"
    finally:
        client.close()


def test_a_client_without_a_credential_gets_nothing(valkey: tuple[int, CertPaths]) -> None:
    port, certs = valkey
    client = Redis.from_url(valkey_url(port), ssl_ca_certs=str(certs.ca_cert), retry=_NO_RETRY)
    try:
        with pytest.raises(AuthenticationError):
            client.ping()
        assert not tls_ping(valkey_url(port), certs.ca_cert)
    finally:
        client.close()


def test_plaintext_is_refused(valkey: tuple[int, CertPaths]) -> None:
    port, _ = valkey
    client = _client(port)
    try:
        with pytest.raises(RedisConnectionError):
            client.ping()
    finally:
        client.close()


def test_a_client_without_the_ca_cannot_verify_the_server(valkey: tuple[int, CertPaths]) -> None:
    port, _ = valkey
    client = _client(port, ssl=True, ssl_cert_reqs="required")
    try:
        with pytest.raises(RedisConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
            client.ping()
    finally:
        client.close()


def test_aof_noeviction_and_no_plain_port(valkey: tuple[int, CertPaths]) -> None:
    port, certs = valkey
    client = _client(port, ssl=True, ssl_ca_certs=str(certs.ca_cert), **HARNESS)
    try:
        config = {key: client.config_get(key)[key] for key in
                  ("appendonly", "maxmemory-policy", "maxmemory", "port", "tls-auth-clients", "bind")}
    finally:
        client.close()
    assert config == {"appendonly": "yes", "maxmemory-policy": "noeviction", "maxmemory": str(256 * 1024 * 1024),
                      "port": "0", "tls-auth-clients": "no", "bind": "127.0.0.1"}


def _as(port: int, certs: CertPaths, user: str) -> Redis:
    return Redis.from_url(valkey_url(port), ssl_ca_certs=str(certs.ca_cert), retry=_NO_RETRY,
                          username=user, password=PASSWORDS[user])


def test_each_user_can_do_what_rq_and_the_limiter_need(valkey: tuple[int, CertPaths]) -> None:
    """The ACL table must not silently change behaviour: with INFO refused, RQ falls back from its
    atomic BLMOVE reservation to BLPOP (a killed worker then loses the popped job), and the AI
    limiter's Lua script needs TIME. So: as web, enqueue; as worker, RQ sees a BLMOVE-capable server
    and its dequeue leaves the job reserved in the intermediate queue; TIME works in a script."""
    from rq import Queue
    from rq.utils import get_version

    from stack.lanes.allowlist import JOB_SERIALIZER, NOOP_JOB

    port, certs = valkey
    web, worker = _as(port, certs, "web"), _as(port, certs, "worker")
    try:
        job = Queue("merit", connection=web, serializer=JOB_SERIALIZER).enqueue(NOOP_JOB, "x")
        assert get_version(worker) >= (6, 2, 0)
        queue = Queue("merit", connection=worker, serializer=JOB_SERIALIZER)
        taken, _ = Queue.dequeue_any([queue], timeout=1, connection=worker, serializer=JOB_SERIALIZER)
        assert taken.id == job.id and worker.lrange(queue.intermediate_queue_key, 0, -1) == [job.id.encode()]
        assert worker.eval("return redis.call('TIME')[1]", 0)
        assert _as(port, certs, "relay").info("server")["redis_version"]
    finally:
        web.close()
        worker.close()
