"""The unchanged toxiproxy-python 0.1.1 client against the fault proxy."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from toxiproxy import Toxiproxy
from toxiproxy.api import APIConsumer
from toxiproxy.exceptions import InvalidToxic, NotFound, ProxyExists

from chaos.faultproxy.auth import draw_credential
from chaos.faultproxy.server import ThreadedFaultProxy

from .helpers import Upstream, connect, echo, read_until_close, rtt

pytestmark = pytest.mark.timeout(30)


@pytest.fixture(params=["no credential", "per-run credential"])
def fp(request: pytest.FixtureRequest) -> Iterator[ThreadedFaultProxy]:
    """The client's workflow both ways: a Toxiproxy drop-in, and with the API credential set."""
    credential = draw_credential() if request.param == "per-run credential" else None
    server = ThreadedFaultProxy("127.0.0.1", 0, seed=7, credential=credential).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def client(fp: ThreadedFaultProxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Toxiproxy]:
    saved = (APIConsumer.host, APIConsumer.port)  # class-level globals in the client
    url = urlsplit(fp.url)
    if url.username:
        # The unchanged client's requests reads Basic credentials from a netrc file (NETRC names it). Its
        # ``running()`` opens a bare socket to ``host``, so "user:password@host" (which the harness's nemesis
        # uses, docs/faultproxy.md) would break that one call; netrc keeps the whole workflow as it is.
        netrc = tmp_path / "netrc"
        netrc.write_text(f"machine {url.hostname} login {url.username} password {url.password}\n")
        netrc.chmod(0o600)
        monkeypatch.setenv("NETRC", str(netrc))
    tp = Toxiproxy()
    tp.update_api_consumer(url.hostname, url.port)
    try:
        yield tp
    finally:
        APIConsumer.host, APIConsumer.port = saved


def test_client_workflow(client: Toxiproxy, upstream: Upstream) -> None:
    assert client.running()
    assert client.version() == b'{"version": "2.12.0"}\n'
    proxy = client.create(upstream=upstream.addr, name="web")
    host, port = proxy.listen.split(":")
    assert host == "127.0.0.1" and int(port) > 0
    assert set(client.proxies()) == {"web"}
    with pytest.raises(ProxyExists):
        client.create(upstream=upstream.addr, name="web")

    proxy.add_toxic(type="latency", attributes={"latency": 100})
    assert set(proxy.toxics()) == {"latency_downstream"}
    assert proxy.get_toxic("latency_downstream").attributes == {"latency": 100, "jitter": 0}
    with pytest.raises(ProxyExists):  # the client maps 409 to ProxyExists
        proxy.add_toxic(type="latency", attributes={"latency": 100})
    with pytest.raises(InvalidToxic):
        proxy.add_toxic(type="nonsense", name="bad")
    with connect(int(port)) as c:
        assert rtt(c) >= 0.1  # the toxic the client added acts on the data path
        assert proxy.destroy_toxic("latency_downstream") is True
        assert proxy.toxics() == {}
        echo(c)  # the open connection outlives the removal
    with pytest.raises(NotFound):
        proxy.destroy_toxic("latency_downstream")

    with connect(int(port)) as c:
        with proxy.down():
            assert read_until_close(c) == (b"", "eof")
            with pytest.raises(ConnectionRefusedError):
                connect(int(port)).close()
            assert client.get_proxy("web").enabled is False
    assert client.get_proxy("web").enabled is True
    with connect(int(port)) as c:
        echo(c)

    proxy.add_toxic(type="timeout", stream="upstream", attributes={"timeout": 0})
    assert client.reset() is True
    assert proxy.toxics() == {}
    assert client.destroy(proxy) is True
    assert client.proxies() == {}
    client.create(upstream=upstream.addr, name="a")
    client.create(upstream=upstream.addr, name="b", listen="127.0.0.1:0", enabled=False)
    assert client.get_proxy("b").enabled is False
    client.destroy_all()
    assert client.proxies() == {}


def test_client_populate(client: Toxiproxy, upstream: Upstream) -> None:
    made = client.populate([{"name": "x", "upstream": upstream.addr, "listen": "127.0.0.1:0"}])
    assert [p.name for p in made] == ["x"]
    assert client.get_proxy("x").upstream == upstream.addr
