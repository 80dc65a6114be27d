"""Every toxic over real loopback sockets, including changes on open connections.

Assertions are causal: bytes and EOFs, event order, lower bounds ("took at least the
latency").  Where the absence of a delay must be shown, the delay is made so large
(10 minutes) that its presence would hang the test into its timeout.  The computed
schedules themselves (pipelining, jitter, seeds) are tested in test_toxic_schedules.py.
"""

from __future__ import annotations

import random
import socket
import time

import httpx
import pytest

from chaos.faultproxy.server import ThreadedFaultProxy
from chaos.faultproxy.toxics import SlicerToxic

from .helpers import (WAIT, Upstream, add_toxic, connect, echo, held_links, make_proxy,
                      read_until_close, recv_exact, rtt)

pytestmark = pytest.mark.timeout(60)

FOREVER_MS = 600_000  # longer than the test timeout: if it applied, the test would fail


def _wait_until(predicate: object) -> None:
    deadline = time.monotonic() + WAIT  # a hang guard, not the verdict
    while not predicate() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.005)
    assert predicate()  # type: ignore[operator]


def test_passthrough_and_no_half_close(api: httpx.Client, upstream: Upstream) -> None:
    port = make_proxy(api, upstream.addr)
    with connect(port) as c:
        echo(c, b"x" * 100_000)
        c.sendall(b"12345678")
        c.shutdown(socket.SHUT_WR)  # the FIN closes both sides; the echo may be lost
        data, how = read_until_close(c)
        assert how == "eof" and len(data) <= 8
    upstream.wait_conns(1)
    assert upstream.eof[0].wait(WAIT)


def test_noop(api: httpx.Client, upstream: Upstream) -> None:
    port = make_proxy(api, upstream.addr)
    add_toxic(api, "noop")
    add_toxic(api, "noop", stream="upstream")
    with connect(port) as c:
        echo(c, b"hello" * 1000)


def test_latency_down_up_and_stacked(api: httpx.Client, upstream: Upstream) -> None:
    port = make_proxy(api, upstream.addr)
    add_toxic(api, "latency", attributes={"latency": 100})
    with connect(port) as c:
        assert rtt(c) >= 0.1
    add_toxic(api, "latency", stream="upstream", attributes={"latency": 50})
    add_toxic(api, "latency", name="second", attributes={"latency": 30})
    with connect(port) as c:
        assert rtt(c) >= 0.18  # 100 + 50 + 30: stacked and both directions add up


def test_latency_with_jitter_never_undercuts_its_floor(api: httpx.Client,
                                                        upstream: Upstream) -> None:
    port = make_proxy(api, upstream.addr)
    add_toxic(api, "latency", attributes={"latency": 60, "jitter": 40})
    with connect(port) as c:
        assert all(rtt(c) >= 0.02 for _ in range(12))  # the spread: test_toxic_schedules


def test_latency_keeps_order_and_bytes(api: httpx.Client, upstream: Upstream) -> None:
    port = make_proxy(api, upstream.addr)
    add_toxic(api, "latency", attributes={"latency": 100})
    with connect(port) as c:
        t0 = time.perf_counter()
        for i in range(20):
            c.sendall(b"%02d" % i)
            time.sleep(0.01)
        assert recv_exact(c, 40) == b"".join(b"%02d" % i for i in range(20))
        assert time.perf_counter() - t0 >= 0.1  # pipelining itself: test_toxic_schedules


def test_toxics_act_on_open_connections(api: httpx.Client, upstream: Upstream) -> None:
    port = make_proxy(api, upstream.addr)
    with connect(port) as c:
        echo(c)
        add_toxic(api, "latency", attributes={"latency": 100})
        assert rtt(c) >= 0.1
        r = api.patch("/proxies/p/toxics/latency_downstream",
                      json={"attributes": {"latency": FOREVER_MS}})
        assert r.status_code == 200
        assert api.delete("/proxies/p/toxics/latency_downstream").status_code == 204
        echo(c)  # would wait 10 minutes if the removal missed this open connection


def test_removing_latency_flushes(fp: ThreadedFaultProxy, api: httpx.Client,
                                  upstream: Upstream) -> None:
    port = make_proxy(api, upstream.addr)
    add_toxic(api, "latency", attributes={"latency": FOREVER_MS})
    with connect(port) as c:
        c.sendall(b"ping")
        _wait_until(lambda: held_links(fp) == 1)  # the echo is inside the latency toxic
        assert api.delete("/proxies/p/toxics/latency_downstream").status_code == 204
        assert recv_exact(c, 4) == b"ping"


def test_toxicity_zero_and_one(api: httpx.Client, upstream: Upstream) -> None:
    port = make_proxy(api, upstream.addr)
    add_toxic(api, "latency", toxicity=0, attributes={"latency": FOREVER_MS})
    add_toxic(api, "latency", name="always", toxicity=1, stream="upstream",
              attributes={"latency": 60})
    with connect(port) as c:
        assert rtt(c) >= 0.06  # toxicity 1 applied; toxicity 0 skipped, or this would hang


def _cut_pattern(seed: int, upstream: Upstream) -> list[bool]:
    """Per connection: did a toxicity-0.5 ``limit_data 0`` cut it (EOF instead of echo)?"""
    with ThreadedFaultProxy("127.0.0.1", 0, seed=seed) as fp, \
            httpx.Client(base_url=fp.url, timeout=10) as api:
        port = make_proxy(api, upstream.addr)
        add_toxic(api, "limit_data", toxicity=0.5, attributes={"bytes": 0})
        pattern = []
        for _ in range(16):
            with connect(port, timeout=WAIT) as c:
                c.sendall(b"ping")
                got = recv_exact(c, 4)  # the echo, or b"" when cut (EOF, nothing passed)
                assert got in (b"", b"ping")
                pattern.append(got == b"")
        return pattern


def test_seed_makes_toxicity_reproducible(upstream: Upstream) -> None:
    first = _cut_pattern(1234, upstream)
    assert first == _cut_pattern(1234, upstream)
    assert any(first) and not all(first)  # rolled per connection, not fixed
    assert first != _cut_pattern(4321, upstream)  # negative control: the seed matters


def test_bandwidth(api: httpx.Client, sink: Upstream) -> None:
    port = make_proxy(api, sink.addr)
    add_toxic(api, "bandwidth", stream="upstream", attributes={"rate": 100})  # 100 000 B/s
    with connect(port) as c:
        t0 = time.perf_counter()
        c.sendall(b"z" * 30_000)
        sink.wait_conns(1)
        _wait_until(lambda: len(sink.received[0]) >= 30_000)
        elapsed = time.perf_counter() - t0
    assert bytes(sink.received[0]) == b"z" * 30_000
    assert elapsed >= 0.29  # 30 000 B at 100 000 B/s; the exact sleeps: test_toxic_schedules


def test_slow_close(api: httpx.Client, sink: Upstream) -> None:
    port = make_proxy(api, sink.addr)
    add_toxic(api, "slow_close", attributes={"delay": 300})
    with connect(port) as c:
        sink.wait_conns(1)
        t0 = time.perf_counter()
        sink.conns[0].shutdown(socket.SHUT_RDWR)
        assert read_until_close(c) == (b"", "eof")
        assert time.perf_counter() - t0 >= 0.3


def test_slow_close_delays_eof_when_the_client_closes_first(api: httpx.Client,
                                                            sink: Upstream) -> None:
    # The client's FIN closes the upstream socket at once, and the downstream link then
    # carries that EOF through its slow_close before closing the client.
    port = make_proxy(api, sink.addr)
    add_toxic(api, "slow_close", attributes={"delay": 300})
    with connect(port, timeout=WAIT) as c:
        sink.wait_conns(1)
        t0 = time.perf_counter()
        c.shutdown(socket.SHUT_WR)
        assert read_until_close(c) == (b"", "eof")
        assert time.perf_counter() - t0 >= 0.3
    assert sink.eof[0].wait(WAIT)


def test_slow_close_holds_the_client_until_the_toxic_goes(api: httpx.Client,
                                                          sink: Upstream) -> None:
    port = make_proxy(api, sink.addr)
    add_toxic(api, "slow_close", attributes={"delay": FOREVER_MS})
    with connect(port, timeout=WAIT) as c:
        sink.wait_conns(1)
        c.shutdown(socket.SHUT_WR)
        assert sink.eof[0].wait(WAIT)  # upstream closed first...
        c.setblocking(False)
        with pytest.raises(BlockingIOError):
            c.recv(1)  # ...while the client is still held open by the toxic
        c.setblocking(True)
        c.settimeout(WAIT)
        assert api.delete("/proxies/p/toxics/slow_close_downstream").status_code == 204
        assert read_until_close(c) == (b"", "eof")  # removal ends the wait


def test_timeout_closes_after_silence(api: httpx.Client, sink: Upstream) -> None:
    port = make_proxy(api, sink.addr)
    add_toxic(api, "timeout", attributes={"timeout": 300})
    t0 = time.perf_counter()  # before connect: the timer starts at the proxy's accept
    with connect(port, timeout=WAIT) as c:
        assert read_until_close(c) == (b"", "eof")
        assert time.perf_counter() - t0 >= 0.3


def test_timeout_drops_data_and_closes_after_the_silence(api: httpx.Client,
                                                         sink: Upstream) -> None:
    port = make_proxy(api, sink.addr)
    add_toxic(api, "timeout", stream="upstream", attributes={"timeout": 300})
    with connect(port, timeout=WAIT) as c:
        t0 = time.perf_counter()  # before the data reaches the proxy
        c.sendall(b"data")
        assert read_until_close(c) == (b"", "eof")
        assert time.perf_counter() - t0 >= 0.3  # the timer restarted on the data
    sink.wait_conns(1)
    assert sink.eof[0].wait(WAIT)
    assert sink.received[0] == b""  # dropped


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
        echo(c)  # skipped by toxicity: data passes (an active timeout drops it)...
        time.sleep(0.2)
        echo(c)  # ...and nothing closes after its 100 ms
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
        c.settimeout(WAIT)
        t0 = time.perf_counter()
        c.sendall(b"first chunk")
        assert read_until_close(c) == (b"", "rst")
        assert time.perf_counter() - t0 >= 0.2
    sink.wait_conns(1)
    assert sink.received[0] == b""  # the first chunk is dropped


def test_reset_peer_added_to_open_connection_gives_eof(api: httpx.Client,
                                                      upstream: Upstream) -> None:
    port = make_proxy(api, upstream.addr)
    with connect(port) as c:
        echo(c)
        add_toxic(api, "reset_peer", attributes={"timeout": 0})
        c.sendall(b"x")
        assert read_until_close(c)[1] == "eof"


def test_slicer_over_socket(api: httpx.Client, upstream: Upstream) -> None:
    port = make_proxy(api, upstream.addr)
    # delay is in microseconds: 20 000 us = 20 ms between the 16 pieces (~62 B) of 1000 B.
    add_toxic(api, "slicer", attributes={"average_size": 100, "size_variation": 0,
                                         "delay": 20_000})
    payload = bytes(range(256)) * 4
    with connect(port) as c:
        t0 = time.perf_counter()
        c.sendall(payload[:1000])
        assert recv_exact(c, 1000) == payload[:1000]
        assert time.perf_counter() - t0 >= 15 * 0.02  # 15 gaps: the chunk was sliced


def test_slicer_piece_sizes() -> None:
    toxic = SlicerToxic("s", "downstream", 1.0, 1)
    toxic.attributes = {"average_size": 100, "size_variation": 20, "delay": 0}
    ends = toxic.bounds(random.Random(1), 1000)
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
    assert sink.eof[0].wait(WAIT)
    assert bytes(sink.received[0]) == b"c" * 10


def test_delete_proxy_closes_connections(api: httpx.Client, upstream: Upstream) -> None:
    port = make_proxy(api, upstream.addr)
    with connect(port) as c:
        echo(c)
        assert api.delete("/proxies/p").status_code == 204
        assert read_until_close(c) == (b"", "eof")
    with pytest.raises(ConnectionRefusedError):
        connect(port).close()


def test_slow_open_delays_a_new_connections_first_bytes(api: httpx.Client, upstream: Upstream) -> None:
    port = make_proxy(api, upstream.addr)
    toxic = add_toxic(api, "slow_open", stream="upstream", attributes={"delay": 200})
    assert toxic["attributes"] == {"delay": 200, "jitter": 0} and toxic["type"] == "slow_open"
    # Timed from before the connect: the proxy counts the connection's age from its accept, which
    # can come before our send (a timer started at the send read 0.196 s on a loaded CI rehearsal).
    opened = time.perf_counter()
    with connect(port) as new:
        rtt(new)
        assert time.perf_counter() - opened >= 0.2  # its first bytes waited until the connection was 200 ms old
        echo(new)  # later bytes still flow (that they are not held: test_toxic_schedules, on a fake clock)
