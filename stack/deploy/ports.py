"""Free TCP ports on 127.0.0.1: the one ``free_port`` of the project (stack, harness, tests, benchmarks).

A port is drawn at random below the kernel's ephemeral range (32768-60999 on Linux), so that
one of the machine's own outgoing connections cannot take it between the draw and the bind
(a test once lost its port that way: Errno 98 on a port the kernel had just handed out).
Another process can still grab it in between (a bind race), so we skip ports this process has
already handed out and retry. A child that still loses the race fails its readiness check
with "address in use" in its log. A crowded range falls back to a port the kernel chooses.
"""

from __future__ import annotations

import random
import socket
import threading

__all__ = ["HOST", "free_port", "free_ports", "port_is_free"]

HOST = "127.0.0.1"
_ATTEMPTS = 50

_LISTEN_PORTS = range(20000, 32768)
_lock = threading.Lock()
_handed_out: set[int] = set()
_rng = random.Random()


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
    with _lock:
        for _ in range(_ATTEMPTS):
            port = _rng.choice(_LISTEN_PORTS)
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
