"""``python -m stack.web.serve --port P``: one web node, with its two listeners.

The public API listens on ``--host:--port`` (HAProxy's backend). When
``PROCTOR_ADMIN_PORT`` is set, the admin API listens on 127.0.0.1 at that port, in the
same process and over the same state (``stack.web.app.create_node``). Forwarded headers
are not handled by uvicorn (``proxy_headers`` off): the app trusts ``X-Forwarded-For``
only with HAProxy's per-run secret header (stack.web.guards.client_address).
"""

from __future__ import annotations

import argparse
import socket
import sys

import uvicorn

from stack.config import SettingsError, load_settings
from stack.connection_stats import record_process_connections
from stack.web.app import create_node
from stack.web.bounded_http import uvicorn_limits

__all__ = ["main"]

ADMIN_HOST = "127.0.0.1"


def _bind(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))  # "Address already in use" reaches the log: the runner retries on a new port
    sock.set_inheritable(True)
    return sock


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stack.web.serve", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1", help="address of the public listener")
    parser.add_argument("--port", type=int, required=True, help="port of the public listener")
    args = parser.parse_args(argv)
    try:
        settings = load_settings()
        stats = record_process_connections(settings)
        app = create_node(settings)
    except SettingsError as exc:
        print(f"stack.web.serve: {exc}", file=sys.stderr)
        return 2
    sockets = [_bind(args.host, args.port)]
    if settings.admin_port:
        sockets.append(_bind(ADMIN_HOST, settings.admin_port))
    # No Server header (it named uvicorn and, with a version, told an attacker what to try);
    # every request head bounded by the node itself (stack.web.bounded_http).
    config = uvicorn.Config(app, proxy_headers=False, access_log=False, log_level="warning",
                            timeout_graceful_shutdown=2, lifespan="on", server_header=False,
                            **uvicorn_limits(settings.max_header_bytes, settings.max_headers))
    try:
        uvicorn.Server(config).run(sockets=sockets)
    finally:
        stats.dump()  # the counts' last word, after the node's last request
    return 0


if __name__ == "__main__":
    sys.exit(main())
