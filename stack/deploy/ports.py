"""Free TCP ports on 127.0.0.1: the one ``free_port`` of the project (stack, harness, tests, benchmarks).

A port is drawn at random below the kernel's ephemeral range (32768-60999 on Linux), so that
one of the machine's own outgoing connections cannot take it between the draw and the bind
(a test once lost its port that way: Errno 98 on a port the kernel had just handed out).
Another process can still grab it in between (a bind race), so we skip ports this process has
already handed out and retry. A child that still loses the race fails its readiness check
with "address in use" in its log. A crowded range falls back to a port the kernel chooses.

Processes that start stacks side by side (pytest-xdist workers) draw from disjoint slices:
``PROCTOR_PORT_RANGE=LOW-HIGH`` (the root conftest sets one per worker), so two stacks never
race for the same port between its draw and its bind.
"""

from __future__ import annotations

import os
import random
import socket
import threading

__all__ = ["HOST", "PORT_RANGE_ENV", "free_port", "free_ports", "listen_ports", "port_is_free", "port_slice"]

HOST = "127.0.0.1"
_ATTEMPTS = 50

PORT_RANGE_ENV = "PROCTOR_PORT_RANGE"
_LISTEN_PORTS = range(20000, 32768)
_lock = threading.Lock()
_handed_out: set[int] = set()
_rng = random.Random()


def listen_ports() -> range:
    """The range ports are drawn from: PROCTOR_PORT_RANGE when set (inside the default), else the default."""
    value = os.environ.get(PORT_RANGE_ENV, "").strip()
    if not value:
        return _LISTEN_PORTS
    low, sep, high = value.partition("-")
    if not (sep and low.isdigit() and high.isdigit()):
        raise ValueError(f"{PORT_RANGE_ENV}={value!r}: expected LOW-HIGH, e.g. 20000-26383")
    ports = range(int(low), int(high) + 1)
    if len(ports) < 100 or ports.start < _LISTEN_PORTS.start or ports.stop > _LISTEN_PORTS.stop:
        raise ValueError(f"{PORT_RANGE_ENV}={value!r}: expected at least 100 ports within "
                         f"{_LISTEN_PORTS.start}-{_LISTEN_PORTS.stop - 1}")
    return ports


def port_slice(index: int, count: int, within: range = _LISTEN_PORTS) -> str:
    """Slice ``index`` of ``count`` disjoint slices of ``within`` (the default range unless given), as
    PROCTOR_PORT_RANGE spells it."""
    size = len(within) // count
    low = within.start + index * size
    return f"{low}-{low + size - 1}"


def port_is_free(port: int, host: str = HOST) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _kernel_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def free_port(host: str = HOST) -> int:
    """A port that is free now and that this process has not handed out before."""
    ports = listen_ports()
    with _lock:
        for _ in range(_ATTEMPTS):
            port = _rng.choice(ports)
            if port not in _handed_out and port_is_free(port, host):
                _handed_out.add(port)
                return port
        for _ in range(_ATTEMPTS):  # a crowded range: let the kernel choose
            try:
                port = _kernel_port(host)
            except OSError:
                continue  # transient (e.g. ephemeral range exhausted); try again
            if port not in _handed_out and port_is_free(port, host):
                _handed_out.add(port)
                return port
    raise OSError(f"no free TCP port on {host} after {_ATTEMPTS} attempts")


def free_ports(count: int, host: str = HOST) -> list[int]:
    return [free_port(host) for _ in range(count)]
