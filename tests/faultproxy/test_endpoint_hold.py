"""Bytes a socket delivers while its endpoint is paused wait for the resume, in order.

Python 3.11.2 (Debian 12's, the compose image's) ignores a ``pause_reading()`` made inside
``connection_made``: a client's first bytes arrived before the upstream socket existed and
were written nowhere, so no connection through the proxy ever completed a TLS handshake in
the container (measured: 0 of 10 echoes relayed; 10 of 10 after this fix, and on 3.11.7).
These tests call the protocol methods directly, so they hold on every Python."""

from __future__ import annotations

from chaos.faultproxy.link import Endpoint


class _Link:
    def __init__(self, endpoint: Endpoint | None = None) -> None:
        self.fed: list[bytes | None] = []
        self.pause_on_first = endpoint

    def feed(self, data: bytes) -> None:
        self.fed.append(data)
        if self.pause_on_first is not None:
            self.pause_on_first.pause("queue")  # a full queue pauses its source again
            self.pause_on_first = None

    def feed_eof(self) -> None:
        self.fed.append(None)


def test_bytes_and_eof_read_while_paused_are_fed_in_order_at_the_resume() -> None:
    endpoint, link = Endpoint(), _Link()
    endpoint.link_in = link
    endpoint.data_received(b"direct")  # the control: not paused, straight through
    endpoint.pause("connect")
    endpoint.data_received(b"hello")
    endpoint.data_received(b"world")
    endpoint.eof_received()
    assert link.fed == [b"direct"]
    endpoint.resume("connect")
    assert link.fed == [b"direct", b"hello", b"world", None]


def test_a_pause_during_the_release_holds_the_rest_until_the_next_resume() -> None:
    endpoint = Endpoint()
    link = _Link(endpoint)
    endpoint.link_in = link
    endpoint.pause("connect")
    endpoint.data_received(b"one")
    endpoint.data_received(b"two")
    endpoint.resume("connect")
    assert link.fed == [b"one"]
    endpoint.data_received(b"three")  # still behind what it holds
    endpoint.resume("queue")
    assert link.fed == [b"one", b"two", b"three"]
