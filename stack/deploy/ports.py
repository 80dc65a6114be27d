"""Free TCP ports on 127.0.0.1.

The kernel hands out a free port when we bind port 0; we close the socket and give
the number to a child. Another process can grab it in between (a bind race), so we
skip ports this process has already handed out and retry on bind errors. A child
that still loses the race fails its readiness check with "address in use" in its log.
"""

from __future__ import annotations

import socket
import threading

__all__ = ["HOST", "free_port", "free_ports", "port_is_free"]

HOST = "127.0.0.1"
_ATTEMPTS = 50

_lock = threading.Lock()
_handed_out: set[int] = set()


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
