"""One listen -> upstream proxy: its listener, accept loop, connections and toxic chains."""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
import struct
from typing import Any

from .link import DOWNSTREAM, UPSTREAM, Endpoint, Link
from .toxics import ResetPeerToxic, Toxic

__all__ = ["ProxyError", "Proxy", "Connection", "split_host_port", "resolve_listen"]

_DIAL_TIMEOUT = 15.0


class ProxyError(Exception):
    """A start/bind/resolve failure; the API answers it with 500 and this message."""


def split_host_port(addr: str) -> tuple[str, str]:
    """Go's ``net.SplitHostPort`` with its error messages."""
    def err(why: str) -> ProxyError:
        return ProxyError(f"address {addr}: {why}")

    i = addr.rfind(":")
    if i < 0:
        raise err("missing port in address")
    if addr.startswith("["):
        end = addr.find("]")
        if end < 0:
            raise err("missing ']' in address")
        if end + 1 == len(addr):
            raise err("missing port in address")
        if end + 1 != i:
            raise err("too many colons in address" if addr[end + 1] == ":" else
                      "missing port in address")
        host, rest = addr[1:end], addr[end + 1:]
    else:
        host, rest = addr[:i], addr[i:]
        if ":" in host:
            raise err("too many colons in address")
    if "[" in rest or "]" in rest:
        raise err("unexpected '[' in address" if "[" in rest else "unexpected ']' in address")
    return host, addr[i + 1:]


def _join(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _resolve(addr: str) -> tuple[str, int]:
    """Resolve ``host:port`` to (ip or '' for all interfaces, port)."""
    if addr == "":
        return "", 0
    host, port_s = split_host_port(addr)
    if port_s == "":
        port = 0
    elif port_s.isdigit():
        port = int(port_s)
        if port > 65535:
            raise ProxyError(f"address {port_s}: invalid port")
    else:
        raise ProxyError(f"lookup tcp/{port_s}: unknown port")
    if host == "":
        return "", port
    if host == "localhost":
        return "127.0.0.1", port  # Go prefers IPv4 for localhost
    try:
        return str(ipaddress.ip_address(host)), port
    except ValueError:
        pass
    try:  # names only from /etc/hosts or the local resolver
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        raise ProxyError(f"lookup {host}: no such host") from None
    infos.sort(key=lambda info: info[0] != socket.AF_INET)
    return str(infos[0][4][0]), port


def resolve_listen(addr: str) -> str:
    """The resolved form used to compare listen addresses (port 0 stays 0)."""
    host, port = _resolve(addr)
    return _join(host, port)


def _bind(addr: str) -> socket.socket:
    try:
        host, port = _resolve(addr)
    except ProxyError as exc:
        raise ProxyError(f"listen tcp: {exc}") from None  # Go's net.Listen wording
    family = socket.AF_INET6 if host == "" or ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        # Go sets SO_REUSEADDR, so re-enabling can rebind a port in TIME_WAIT.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if host == "":
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind((host or "::", port))
        sock.listen(512)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        reason = os.strerror(exc.errno or 0)
        reason = reason[:1].lower() + reason[1:]
        raise ProxyError(f"listen tcp {_join(host, port)}: bind: {reason}") from None
    return sock


class Connection:
    """A client socket, its upstream socket and the two links between them."""

    def __init__(self, proxy: Proxy, index: int, client: Endpoint) -> None:
        self.proxy = proxy
        self.closed = False
        self.client = client
        self.server = Endpoint()
        client.peer, self.server.peer = self.server, client
        seed = f"{proxy.seed}:{proxy.name}:{index}"
        self.up = Link(self, UPSTREAM, client, self.server, proxy.chains[UPSTREAM], seed + ":up")
        self.down = Link(self, DOWNSTREAM, self.server, client,
                         proxy.chains[DOWNSTREAM], seed + ":down")
        if proxy.has_reset_peer() and client.transport is not None:
            # RST on close, but only for connections accepted while reset_peer exists.
            sock = client.transport.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.pause("connect")  # hold client bytes until the upstream socket exists
        self._dial_task: asyncio.Task[None] | None = asyncio.get_running_loop().create_task(
            self._dial())

    def link(self, direction: str) -> Link:
        return self.up if direction == UPSTREAM else self.down

    async def _dial(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            # off the event loop: a name (compose's "valkey:6380") asks a DNS server, and a slow
            # answer must not stall every other connection of every proxy
            host, port = await asyncio.to_thread(_resolve, self.proxy.upstream)
            await asyncio.wait_for(
                loop.create_connection(lambda: self.server, host or "127.0.0.1", port),
                _DIAL_TIMEOUT)
        except (OSError, ProxyError, asyncio.TimeoutError):
            self._dial_task = None
            self.close()  # unreachable upstream: accepted, then closed (EOF)
            return
        self._dial_task = None
        if self.closed:
            self.server.close()
        else:
            self.client.resume("connect")

    def finished(self, link: Link) -> None:
        """``link`` passed its source's EOF down its chain: close the socket it writes to.

        Closing stops reading it, which is EOF for the other link: it runs the EOF
        through its own toxics before closing the last socket (Toxiproxy closes each
        direction's output when its chain ends).  The connection is gone when both
        directions are done.
        """
        if self.closed:
            return
        other = self.down if link is self.up else self.up
        if other.done or link.dest.transport is None:
            self.close()  # both done, or the upstream socket was never connected
            return
        link.dest.close()
        other.feed_eof()  # now, not at connection_lost, which waits for the write flush

    def close(self) -> None:
        """Hard close: both sockets and both links at once (disable, delete, toxics)."""
        if self.closed:
            return
        self.closed = True
        self.up.shutdown()
        self.down.shutdown()
        self.client.close()
        self.server.close()
        if self._dial_task is not None:
            self._dial_task.cancel()
            self._dial_task = None
        self.proxy.forget(self)


class Proxy:
    """A named proxy.  ``listen`` shows the bound address while enabled."""

    def __init__(self, name: str, listen: str, upstream: str, seed: str) -> None:
        self.name = name
        self.listen = listen
        self.upstream = upstream
        self.seed = seed
        self.enabled = False
        self.chains: dict[str, list[Toxic]] = {UPSTREAM: [], DOWNSTREAM: []}
        self.toxics: dict[str, Toxic] = {}
        self._seq = 0
        self._accepted = 0
        self._server: asyncio.Server | None = None
        self._conns: set[Connection] = set()

    # --- lifecycle ------------------------------------------------------------------
    async def start(self) -> None:
        if self.enabled:
            return
        sock = _bind(self.listen)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self._new_endpoint, sock=sock)
        host, port = sock.getsockname()[:2]
        self.listen = _join(host, port)
        self.enabled = True

    def stop(self) -> None:
        """Close the listener (ECONNREFUSED from now on) and every open connection."""
        if self._server is not None:
            self._server.close()
            self._server = None
        self.enabled = False
        for conn in list(self._conns):
            conn.close()

    @property
    def connections(self) -> int:
        return len(self._conns)

    def _new_endpoint(self) -> Endpoint:
        ep = Endpoint()
        ep.on_connect = self._on_accept
        return ep

    def _on_accept(self, ep: Endpoint) -> None:
        if not self.enabled:
            ep.close()
            return
        self._accepted += 1
        self._conns.add(Connection(self, self._accepted, ep))

    def forget(self, conn: Connection) -> None:
        self._conns.discard(conn)

    def has_reset_peer(self) -> bool:
        return any(isinstance(t, ResetPeerToxic) for t in self.toxics.values())

    # --- toxics: every change reaches every live link before the call returns ---------
    def add_toxic(self, toxic: Toxic) -> None:
        chain = self.chains[toxic.direction]
        previous_tail = chain[-1] if chain else None
        self._seq += 1
        toxic.seq = self._seq
        chain.append(toxic)
        self.toxics[toxic.name] = toxic
        for conn in list(self._conns):
            conn.link(toxic.direction).added(toxic, previous_tail)

    def update_toxic(self, toxic: Toxic) -> None:
        for conn in list(self._conns):
            conn.link(toxic.direction).restart(toxic)

    def remove_toxic(self, name: str) -> None:
        toxic = self.toxics.pop(name)
        chain = self.chains[toxic.direction]
        idx = chain.index(toxic)
        predecessor = chain[idx - 1] if idx > 0 else None
        del chain[idx]
        for conn in list(self._conns):
            conn.link(toxic.direction).removed(toxic, predecessor)

    def remove_all_toxics(self) -> None:
        for name in list(self.toxics):
            self.remove_toxic(name)

    # --- JSON -----------------------------------------------------------------------
    def toxics_json(self) -> list[dict[str, Any]]:
        return [t.to_json() for t in self.chains[UPSTREAM] + self.chains[DOWNSTREAM]]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "listen": self.listen,
            "upstream": self.upstream,
            "enabled": self.enabled,
            "Logger": {},  # stray key real 2.12.0 emits since 2.5.0
            "toxics": self.toxics_json(),
        }
