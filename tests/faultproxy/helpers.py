"""Helpers for the fault proxy tests: a loopback upstream server and socket utilities."""

from __future__ import annotations

import socket
import threading
import time

import httpx

from chaos.faultproxy.server import ThreadedFaultProxy

__all__ = ["Upstream", "make_proxy", "add_toxic", "connect", "recv_exact", "read_until_close",
           "rtt", "echo", "held_links", "WAIT"]

WAIT = 25.0  # hang guard for waits on events; the verdicts never depend on it


class Upstream:
    """Threaded loopback TCP server.  ``echo`` mode echoes; otherwise it only records."""

    def __init__(self, echo: bool = True) -> None:
        self.echo = echo
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.1)
        self.port = int(self.sock.getsockname()[1])
        self.conns: list[socket.socket] = []
        self.received: list[bytearray] = []
        self.eof: list[threading.Event] = []
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._accept = threading.Thread(target=self._accept_loop, daemon=True)
        self._accept.start()

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            conn.settimeout(0.1)
            self.received.append(bytearray())  # before conns: wait_conns() watches conns
            self.eof.append(threading.Event())
            self.conns.append(conn)
            t = threading.Thread(target=self._serve, args=(len(self.conns) - 1,), daemon=True)
            self._threads.append(t)
            t.start()

    def _serve(self, i: int) -> None:
        conn = self.conns[i]
        while not self._stop.is_set():
            try:
                data = conn.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
            if not data:
                break
            self.received[i] += data
            if self.echo:
                try:
                    conn.sendall(data)
                except OSError:
                    break
        self.eof[i].set()

    def wait_conns(self, n: int, timeout: float = WAIT) -> None:
        deadline = time.monotonic() + timeout
        while len(self.conns) < n and time.monotonic() < deadline:
            time.sleep(0.005)
        assert len(self.conns) >= n

    def close(self) -> None:
        self._stop.set()
        self._accept.join(2)
        for t in self._threads:
            t.join(2)
        for c in self.conns:
            c.close()
        self.sock.close()


def make_proxy(api: httpx.Client, upstream: str, name: str = "p") -> int:
    r = api.post("/proxies", json={"name": name, "listen": "127.0.0.1:0", "upstream": upstream})
    assert r.status_code == 201, r.text
    return int(r.json()["listen"].rsplit(":", 1)[1])


def add_toxic(api: httpx.Client, type_: str, proxy: str = "p", **body: object) -> dict:
    r = api.post(f"/proxies/{proxy}/toxics", json={"type": type_, **body})
    assert r.status_code == 200, r.text
    return r.json()


def connect(port: int, timeout: float = 5.0) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def recv_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            break
        out += chunk
    return bytes(out)


def read_until_close(sock: socket.socket) -> tuple[bytes, str]:
    """All bytes until the peer closes; ends with 'eof', 'rst' or 'timeout'."""
    out = bytearray()
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return bytes(out), "rst"
        except TimeoutError:
            return bytes(out), "timeout"
        if not chunk:
            return bytes(out), "eof"
        out += chunk


def echo(sock: socket.socket, payload: bytes = b"ping") -> None:
    """The payload comes back whole through an echo upstream."""
    sock.sendall(payload)
    assert recv_exact(sock, len(payload)) == payload


def held_links(fp: ThreadedFaultProxy, proxy: str = "p") -> int:
    """Links of ``proxy`` with a chunk or EOF inside their toxic chain right now.

    Read from the server's thread without a lock: attribute reads are atomic under the
    GIL, and callers poll until the count they wait for.
    """
    conns = list(fp.server.api.proxies[proxy]._conns)
    return sum(link._worker is not None for c in conns for link in (c.up, c.down))


def rtt(sock: socket.socket, payload: bytes = b"ping") -> float:
    t0 = time.perf_counter()
    sock.sendall(payload)
    assert recv_exact(sock, len(payload)) == payload
    return time.perf_counter() - t0
