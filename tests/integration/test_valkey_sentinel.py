"""The Sentinel topology on real servers (issue #25): a primary, its replica and three
Sentinels, TLS everywhere, each with its own ACL users. What may each credential do?"""

from __future__ import annotations

import time
from typing import Iterator

import pytest
from redis import Redis
from redis.backoff import NoBackoff
from redis.exceptions import AuthenticationError, NoPermissionError, ReadOnlyError, ResponseError
from redis.retry import Retry

from stack.config import Settings
from stack.deploy.ports import free_port
from stack.embedded.binaries import find_sentinel, find_valkey
from stack.embedded.certs import make_certs
from stack.embedded.sentinel import NODES, SENTINELS, SERVICE, node_lines, sentinel_ready, write_sentinel_config
from stack.embedded.supervisor import ProcessSpec, Supervisor
from stack.embedded.valkey import replication_ready, valkey_argv, valkey_url, write_valkey_config
from stack.valkey_acl import draw_passwords
from stack.valkey_client import primary_address, valkey_client

pytestmark = pytest.mark.integration

PASSWORDS = draw_passwords()
_NO_RETRY = Retry(NoBackoff(), 0)


class Topology:
    def __init__(self, ca: str, nodes: dict[str, int], sentinels: dict[str, int]) -> None:
        self.ca, self.nodes, self.sentinels = ca, nodes, sentinels

    def client(self, port: int, user: str | None) -> Redis:
        credential = {"username": user, "password": PASSWORDS[user]} if user else {}
        return Redis(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=self.ca, socket_timeout=2,
                     socket_connect_timeout=2, retry=_NO_RETRY, **credential)

    def settings(self, user: str) -> Settings:
        return Settings(valkey_url="rediss://127.0.0.1:1/0", valkey_ca=self.ca, valkey_user=user,
                        valkey_password=PASSWORDS[user], valkey_sentinel_password=PASSWORDS["discovery"],
                        valkey_sentinels=",".join(f"127.0.0.1:{p}" for p in self.sentinels.values()))


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Topology]:
    run = tmp_path_factory.mktemp("sentinel")
    certs = make_certs(run / "tls")
    ca = str(certs.ca_cert)
    nodes = {name: free_port() for name in NODES}
    sentinels = {name: free_port() for name in SENTINELS}
    primary = nodes[NODES[0]]
    sup = Supervisor(run)
    try:
        for name, port in nodes.items():
            extra = node_lines(port, PASSWORDS, replica_of=None if port == primary else primary)
            conf = write_valkey_config(run, port, certs, passwords=PASSWORDS, name=name, extra=extra)
            url = valkey_url(port, user="harness", password=PASSWORDS["harness"])
            sup.start(ProcessSpec(name, valkey_argv(find_valkey().path, conf), ready=lambda u=url: replication_ready(u, ca)))
        for name in nodes:
            sup.wait_ready(name, 20)
        for name, port in sentinels.items():
            conf = write_sentinel_config(run, name, port, certs, primary, PASSWORDS)
            sup.start(ProcessSpec(name, [find_sentinel().path, str(conf)],
                                  ready=lambda p=port: sentinel_ready(p, ca, PASSWORDS["discovery"])))
        for name in sentinels:
            sup.wait_ready(name, 30)
        yield Topology(ca, nodes, sentinels)
    finally:
        sup.stop_all()


def test_clients_find_the_primary_through_the_sentinels_and_writes_reach_the_replica(topology: Topology) -> None:
    settings = topology.settings("harness")
    assert primary_address(settings) == ("127.0.0.1", topology.nodes[NODES[0]])
    client = valkey_client(settings, "queue")
    replica = topology.client(topology.nodes[NODES[1]], "harness")
    try:
        client.set("proctor:replicated", "yes")
        deadline = time.monotonic() + 10
        while replica.get("proctor:replicated") != b"yes" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert replica.get("proctor:replicated") == b"yes"  # over TLS, as the replica user
        with pytest.raises(ReadOnlyError):
            replica.set("proctor:replicated", "no")
    finally:
        client.close()
        replica.close()


def test_a_sentinel_answers_nothing_without_a_credential(topology: Topology) -> None:
    anonymous = topology.client(next(iter(topology.sentinels.values())), None)
    try:
        with pytest.raises((AuthenticationError, ResponseError), match="NOAUTH|authenticated"):
            anonymous.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
    finally:
        anonymous.close()


def test_the_discovery_user_may_ask_where_the_primary_is_but_never_move_it(topology: Topology) -> None:
    discovery = topology.client(next(iter(topology.sentinels.values())), "discovery")
    try:
        assert int(discovery.sentinel_get_master_addr_by_name(SERVICE)[1]) == topology.nodes[NODES[0]]
        for command in (("FAILOVER", SERVICE), ("SET", SERVICE, "quorum", "1"), ("REMOVE", SERVICE)):
            with pytest.raises(NoPermissionError):
                discovery.execute_command("SENTINEL", *command)
    finally:
        discovery.close()


@pytest.mark.parametrize("user", ["replica", "sentinel"])
def test_the_replication_and_sentinel_users_read_no_key(topology: Topology, user: str) -> None:
    client = topology.client(topology.nodes[NODES[0]], user)
    try:
        assert client.ping()
        with pytest.raises(NoPermissionError):
            client.get("rq:queue:merit")
    finally:
        client.close()


def test_the_memory_filler_writes_only_its_own_keys(topology: Topology) -> None:
    filler = topology.client(topology.nodes[NODES[0]], "filler")
    try:
        assert filler.set("proctor-filler:1", "x") and filler.delete("proctor-filler:1") == 1
        for key in ("rq:queue:merit", "proctor:capacity-lock", "proctor-limits:login"):
            with pytest.raises(NoPermissionError):
                filler.set(key, "x")
        with pytest.raises(NoPermissionError):
            filler.flushall()
    finally:
        filler.close()
