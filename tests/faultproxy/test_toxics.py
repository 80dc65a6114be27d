"""Every toxic over real loopback sockets, including changes on open connections."""

from __future__ import annotations

import random
import socket
import time

import httpx
import pytest

from chaos.faultproxy.server import ThreadedFaultProxy
from chaos.faultproxy.toxics import SlicerToxic

from .helpers import (Upstream, add_toxic, connect, make_proxy, read_until_close, recv_exact,
                      rtt)

pytestmark = pytest.mark.timeout(30)


def test_passthrough_and_no_half_close(api: httpx.Client, upstream: Upstream) -> None:
    port = make_proxy(api, upstream.addr)
    with connect(port) as c:
        assert rtt(c, b"x" * 100_000) < 1.0
        c.sendall(b"12345678")
        c.shutdown(socket.SHUT_WR)  # the FIN closes both sides; the echo may be lost
        data, how = read_until_close(c)
        assert how == "eof" and len(data) <= 8
    upstream.wait_conns(1)
    upstream.eof[0].wait(2)
    assert upstream.eof[0].is_set()


def test_noop(api: httpx.Client, upstream: Upstream) -> None:
    port = make_proxy(api, upstream.addr)
    add_toxic(api, "noop")
    add_toxic(api, "noop", stream="upstream")
    with connect(port) as c:
        assert rtt(c, b"hello" * 1000) < 0.5


def test_latency_down_up_and_stacked(api: httpx.Client, upstream: Upstream) -> None:
    port = make_proxy(api, upstream.addr)
    add_toxic(api, "latency", attributes={"latency": 100})
    with connect(port) as c:
        assert 0.095 <= rtt(c) < 0.3
    add_toxic(api, "latency", stream="upstream", attributes={"latency": 50})
    add_toxic(api, "latency", name="second", attributes={"latency": 30})
    with connect(port) as c:
        assert 0.175 <= rtt(c) < 0.4


def test_latency_jitter_range(api: httpx.Client, upstream: Upstream) -> None:
    port = make_proxy(api, upstream.addr)
    add_toxic(api, "latency", attributes={"latency": 60, "jitter": 40})
    with connect(port) as c:
        samples = [rtt(c) for _ in range(12)]
    assert all(0.018 <= s < 0.25 for s in samples)
    assert max(samples) - min(samples) > 0.01  # jitter actually varies


def test_latency_pipelines(api: httpx.Client, upstream: Upstream) -> None:
    port = make_proxy(api, upstream.addr)
    add_toxic(api, "latency", attributes={"latency": 100})
    with connect(port) as c:
        t0 = time.perf_counter()
        for _ in range(20):
            c.sendall(b"abcd")
            time.sleep(0.01)
        assert recv_exact(c, 80) == b"abcd" * 20
        assert time.perf_counter() - t0 < 0.9  # ~0.3 s pipelined, not 2 s


def test_toxics_act_on_open_connections(api: httpx.Client, upstream: Upstream) -> None:
    port = make_proxy(api, upstream.addr)
    with connect(port) as c:
        assert rtt(c) < 0.05
        add_toxic(api, "latency", attributes={"latency": 100})
        assert rtt(c) >= 0.095
        assert api.delete("/proxies/p/toxics/latency_downstream").status_code == 204
        assert rtt(c) < 0.05


def test_removing_latency_flushes(api: httpx.Client, upstream: Upstream) -> None:
    port = make_proxy(api, upstream.addr)
    add_toxic(api, "latency", attributes={"latency": 5000})
    with connect(port) as c:
        t0 = time.perf_counter()
        c.sendall(b"ping")
        time.sleep(0.1)
        api.delete("/proxies/p/toxics/latency_downstream")
        assert recv_exact(c, 4) == b"ping"
        assert time.perf_counter() - t0 < 1.0


def test_toxicity_zero_and_one(api: httpx.Client, upstream: Upstream) -> None:
    port = make_proxy(api, upstream.addr)
    add_toxic(api, "latency", toxicity=0, attributes={"latency": 300})
    add_toxic(api, "latency", name="always", toxicity=1, stream="upstream",
              attributes={"latency": 60})
    with connect(port) as c:
        assert 0.055 <= rtt(c) < 0.25


def _delayed_pattern(seed: int, upstream: Upstream) -> list[bool]:
    with ThreadedFaultProxy("127.0.0.1", 0, seed=seed) as fp, \
            httpx.Client(base_url=fp.url, timeout=10) as api:
        port = make_proxy(api, upstream.addr)
        add_toxic(api, "latency", toxicity=0.5, attributes={"latency": 60})
        pattern = []
        for _ in range(10):
            with connect(port) as c:
                pattern.append(rtt(c) > 0.05)
        return pattern


def test_seed_makes_toxicity_reproducible(upstream: Upstream) -> None:
    first = _delayed_pattern(1234, upstream)
    assert first == _delayed_pattern(1234, upstream)
    assert any(first) and not all(first)  # rolled per connection, not fixed


def test_bandwidth(api: httpx.Client, sink: Upstream) -> None:
    port = make_proxy(api, sink.addr)
    add_toxic(api, "bandwidth", stream="upstream", attributes={"rate": 100})  # 100 000 B/s
    with connect(port) as c:
        t0 = time.perf_counter()
        c.sendall(b"z" * 30_000)
        sink.wait_conns(1)
        while len(sink.received[0]) < 30_000 and time.perf_counter() - t0 < 5:
            time.sleep(0.005)
        elapsed = time.perf_counter() - t0
    assert len(sink.received[0]) == 30_000
    assert 0.25 <= elapsed < 0.8


def test_slow_close(api: httpx.Client, sink: Upstream) -> None:
    port = make_proxy(api, sink.addr)
    add_toxic(api, "slow_close", attributes={"delay": 300})
    with connect(port) as c:
        sink.wait_conns(1)
        t0 = time.perf_counter()
        sink.conns[0].shutdown(socket.SHUT_RDWR)
        assert read_until_close(c) == (b"", "eof")
        assert 0.28 <= time.perf_counter() - t0 < 1.0


def test_timeout_closes_after_silence(api: httpx.Client, sink: Upstream) -> None:
    port = make_proxy(api, sink.addr)
    add_toxic(api, "timeout", attributes={"timeout": 300})
    with connect(port) as c:
        t0 = time.perf_counter()
        assert read_until_close(c) == (b"", "eof")
        assert 0.28 <= time.perf_counter() - t0 < 1.0


def test_timeout_drops_data_and_resets_on_data(api: httpx.Client, sink: Upstream) -> None:
    port = make_proxy(api, sink.addr)
    add_toxic(api, "timeout", stream="upstream", attributes={"timeout": 300})
    with connect(port) as c:
        for _ in range(8):  # 0.8 s of data every 0.1 s keeps a 0.3 s timeout alive
            c.sendall(b"data")
            time.sleep(0.1)
        sink.wait_conns(1)
        assert sink.received[0] == b""  # dropped
        t0 = time.perf_counter()
        assert read_until_close(c) == (b"", "eof")
        assert 0.15 <= time.perf_counter() - t0 < 1.0


def test_timeout_zero_never_closes_and_removal_closes(api: httpx.Client, sink: Upstream) -> None:
    port = make_proxy(api, sink.addr)
    add_toxic(api, "timeout", stream="upstream", attributes={"timeout": 0})
    with connect(port, timeout=0.4) as c:
        c.sendall(b"lost")
        assert read_until_close(c) == (b"", "timeout")  # still open after 0.4 s
        c.settimeout(3)
        api.delete("/proxies/p/toxics/timeout_upstream")
        assert read_until_close(c) == (b"", "eof")
    sink.wait_conns(1)
    assert sink.received[0] == b""


def test_timeout_removal_closes_even_when_skipped(api: httpx.Client, upstream: Upstream) -> None:
    port = make_proxy(api, upstream.addr)
    with connect(port) as c:
        add_toxic(api, "timeout", toxicity=0, attributes={"timeout": 100})
        assert rtt(c) < 0.2  # skipped by toxicity: data passes, no close
        time.sleep(0.2)
        assert rtt(c) < 0.2
        api.delete("/proxies/p/toxics/timeout_downstream")
        assert read_until_close(c) == (b"", "eof")


def test_reset_peer_rst_for_new_connections(api: httpx.Client, upstream: Upstream) -> None:
    port = make_proxy(api, upstream.addr)
    add_toxic(api, "reset_peer", attributes={"timeout": 0})
    with connect(port) as c:
        c.sendall(b"hello")
        assert read_until_close(c) == (b"", "rst")


def test_reset_peer_timeout_upstream(api: httpx.Client, sink: Upstream) -> None:
    port = make_proxy(api, sink.addr)
    add_toxic(api, "reset_peer", stream="upstream", attributes={"timeout": 200})
    with connect(port, timeout=0.3) as c:
        assert read_until_close(c) == (b"", "timeout")  # silent links never reset
        c.settimeout(3)
        t0 = time.perf_counter()
        c.sendall(b"first chunk")
        assert read_until_close(c) == (b"", "rst")
        assert 0.18 <= time.perf_counter() - t0 < 1.0
    sink.wait_conns(1)
    assert sink.received[0] == b""  # the first chunk is dropped


def test_reset_peer_added_to_open_connection_gives_eof(api: httpx.Client,
                                                      upstream: Upstream) -> None:
    port = make_proxy(api, upstream.addr)
    with connect(port) as c:
        assert rtt(c) < 0.2
        add_toxic(api, "reset_peer", attributes={"timeout": 0})
        c.sendall(b"x")
        assert read_until_close(c)[1] == "eof"


def test_slicer_over_socket(api: httpx.Client, upstream: Upstream) -> None:
    port = make_proxy(api, upstream.addr)
    # delay is in microseconds: 20 000 us = 20 ms between ~62 B pieces of 1000 B.
    add_toxic(api, "slicer", attributes={"average_size": 100, "size_variation": 0,
                                         "delay": 20_000})
    payload = bytes(range(256)) * 4
    with connect(port) as c:
        t0 = time.perf_counter()
        c.sendall(payload[:1000])
        reads = []
        while sum(map(len, reads)) < 1000:
            reads.append(c.recv(4096))
        elapsed = time.perf_counter() - t0
    assert b"".join(reads) == payload[:1000]
    assert len(reads) > 2 and 0.2 <= elapsed < 3.0


class _FakeLink:
    def __init__(self) -> None:
        self.rng = random.Random(1)


def test_slicer_piece_sizes() -> None:
    toxic = SlicerToxic("s", "downstream", 1.0, 1)
    toxic.attributes = {"average_size": 100, "size_variation": 20, "delay": 0}
    ends = toxic._bounds(_FakeLink(), 1000)  # type: ignore[arg-type]
    sizes = [b - a for a, b in zip([0] + ends, ends)]
    assert sum(sizes) == 1000 and ends[-1] == 1000
    assert all(0 < s <= 120 for s in sizes) and min(sizes) >= 30


def test_limit_data_downstream(api: httpx.Client, upstream: Upstream) -> None:
    port = make_proxy(api, upstream.addr)
    add_toxic(api, "limit_data", attributes={"bytes": 10})
    with connect(port) as c:
        c.sendall(b"a" * 6)
        assert recv_exact(c, 6) == b"a" * 6
        c.sendall(b"b" * 100)
        assert read_until_close(c) == (b"b" * 4, "eof")  # exactly 10 B in total, then EOF


def test_limit_data_upstream(api: httpx.Client, sink: Upstream) -> None:
    port = make_proxy(api, sink.addr)
    add_toxic(api, "limit_data", stream="upstream", attributes={"bytes": 10})
    with connect(port) as c:
        c.sendall(b"c" * 50)
        assert read_until_close(c)[1] == "eof"
    sink.wait_conns(1)
    sink.eof[0].wait(2)
    assert bytes(sink.received[0]) == b"c" * 10


def test_delete_proxy_closes_connections(api: httpx.Client, upstream: Upstream) -> None:
    port = make_proxy(api, upstream.addr)
    with connect(port) as c:
        assert rtt(c) < 0.2
        assert api.delete("/proxies/p").status_code == 204
        assert read_until_close(c) == (b"", "eof")
    with pytest.raises(ConnectionRefusedError):
        connect(port).close()
