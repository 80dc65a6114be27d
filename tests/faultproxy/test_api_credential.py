"""The fault proxy's API takes a per-run credential (issue #21 finding 8): a control plane
that anyone local could drive (a 1.5 s latency toxic on the stack's Valkey link)."""

from __future__ import annotations

import base64
import subprocess
import sys
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from chaos.faultproxy.auth import CREDENTIAL_ENV, ApiCredential, CredentialError, draw_credential
from chaos.faultproxy.server import ThreadedFaultProxy

from .helpers import Upstream

pytestmark = pytest.mark.timeout(30)

CREDENTIAL = draw_credential()


@pytest.fixture
def guarded() -> Iterator[ThreadedFaultProxy]:
    server = ThreadedFaultProxy("127.0.0.1", 0, seed=7, credential=CREDENTIAL).start()
    try:
        yield server
    finally:
        server.stop()


def _bare(url: str) -> str:
    parts = urlsplit(url)
    return f"http://{parts.hostname}:{parts.port}"


def test_every_route_wants_the_credential(guarded: ThreadedFaultProxy, upstream: Upstream) -> None:
    bare = _bare(guarded.url)
    wrong = "Basic " + base64.b64encode(b"proctor:guess").decode()
    toxic = {"type": "latency", "attributes": {"latency": 1500}}
    with httpx.Client(base_url=guarded.url, timeout=10, trust_env=False) as owner:
        assert owner.post("/proxies", json={"name": "valkey", "upstream": upstream.addr}).status_code == 201
    with httpx.Client(base_url=bare, timeout=10, trust_env=False) as stranger:
        for headers in ({}, {"Authorization": wrong}):
            attempts = [stranger.get("/version", headers=headers), stranger.get("/proxies", headers=headers),
                        stranger.post("/proxies/valkey/toxics", json=toxic, headers=headers),
                        stranger.post("/reset", headers=headers)]
            assert [r.status_code for r in attempts] == [401] * 4
            assert attempts[0].headers["WWW-Authenticate"] == 'Basic realm="faultproxy"'
    with httpx.Client(base_url=guarded.url, timeout=10, trust_env=False) as owner:
        assert owner.get("/proxies/valkey/toxics").json() == []  # the stranger's toxic never landed
        assert owner.post("/proxies/valkey/toxics", json=toxic).status_code == 200  # control: the owner may


def test_without_a_credential_it_stays_a_drop_in(fp: ThreadedFaultProxy) -> None:
    assert "@" not in fp.url
    assert httpx.get(f"{fp.url}/version", timeout=10).status_code == 200


@pytest.mark.parametrize("bad", ["nopassword", ":pw", "user:", "us@er:pw", "user:pw with space"])
def test_a_malformed_credential_is_refused(bad: str) -> None:
    with pytest.raises(CredentialError):
        ApiCredential(bad)


def test_the_process_refuses_a_malformed_credential_with_one_line() -> None:
    done = subprocess.run([sys.executable, "-m", "chaos.faultproxy", "--port", "0"], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", CREDENTIAL_ENV: "no-colon"}, timeout=20)
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0 and CREDENTIAL_ENV in done.stderr


def test_the_unchanged_client_carries_it_in_its_host(guarded: ThreadedFaultProxy, upstream: Upstream) -> None:
    """How the harness's NetworkNemesis calls it: ``user:password@host`` as the client's host."""
    from toxiproxy import Toxiproxy
    from toxiproxy.api import APIConsumer

    saved = (APIConsumer.host, APIConsumer.port)
    url = urlsplit(guarded.url)
    client = Toxiproxy()
    try:
        client.update_api_consumer(f"{url.username}:{url.password}@{url.hostname}", url.port)
        proxy = client.create(upstream=upstream.addr, name="valkey_web")
        proxy.add_toxic(type="latency", attributes={"latency": 1500})
        assert set(client.get_proxy("valkey_web").toxics()) == {"latency_downstream"}
        client.update_api_consumer(url.hostname, url.port)  # the same client, no credential
        with pytest.raises(Exception):
            client.get_proxy("valkey_web").toxics()  # a 401 body is no proxy: the client cannot go on
    finally:
        APIConsumer.host, APIConsumer.port = saved


def test_the_embedded_runner_names_the_same_variable() -> None:
    from stack.embedded.links import FAULTPROXY_CREDENTIAL_ENV

    assert FAULTPROXY_CREDENTIAL_ENV == CREDENTIAL_ENV
