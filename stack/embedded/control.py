"""The embedded runner's control endpoint: how the stack's admin API reaches the process
that owns the deployment.

``proctor scale`` talks to a web node's admin API (``POST /admin/scale``), which checks
the exam lock in the ledger and then asks the *executor* at ``PROCTOR_CONTROL_URL`` to
resize a pool. For the embedded deployment the executor is this endpoint, served by the
runner itself (the only process that can start, drain and stop components): a stdlib
HTTP server on 127.0.0.1 in a daemon thread, answering loopback peers that carry the
admin token. Another deployment (compose, Kubernetes) provides the same two routes.

    GET  /control/pools                  -> {"pools": {"web": 3, "merit": 2, ...}}
    POST /control/scale {"pool", "n"}    -> {"pool", "from", "to", "drains": [...]}
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from stack.admin_auth import ADMIN_REFUSED, ADMIN_REFUSED_DETAIL, admin_allowed
from stack.embedded import StackError
from stack.headers import ADMIN_TOKEN_HEADER

__all__ = ["ControlServer", "CONTROL_ENV"]

CONTROL_ENV = "PROCTOR_CONTROL_URL"
HOST = "127.0.0.1"
_MAX_BODY = 4096


class ControlServer:
    """``ControlServer(token, scale, pool_sizes).start(port)``; ``url`` once started."""

    def __init__(self, token: str, scale: Callable[[str, int], dict[str, Any]],
                 pool_sizes: Callable[[], dict[str, int]]) -> None:
        self.token, self.scale, self.pool_sizes = token, scale, pool_sizes
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        if self._server is None:
            raise StackError("control endpoint not started")
        return f"http://{HOST}:{self._server.server_address[1]}"

    def start(self, port: int) -> "ControlServer":
        self._server = ThreadingHTTPServer((HOST, port), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="proctor-control", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def handle(self, method: str, path: str, peer: str, token: str, body: bytes) -> tuple[int, dict[str, Any]]:
        """One request -> (status, JSON body); the HTTP plumbing is in ``_handler``."""
        if not admin_allowed(peer, token, self.token):
            return ADMIN_REFUSED, {"detail": ADMIN_REFUSED_DETAIL}
        if (method, path) == ("GET", "/control/pools"):
            return 200, {"pools": self.pool_sizes()}
        if (method, path) != ("POST", "/control/scale"):
            return 404, {"detail": f"no route {method} {path}"}
        try:
            request = json.loads(body or b"{}")
            pool, n = request["pool"], request["n"]
        except (ValueError, KeyError, TypeError):
            return 422, {"detail": "body must be JSON {\"pool\": str, \"n\": int}"}
        if not isinstance(pool, str) or not isinstance(n, int) or isinstance(n, bool):
            return 422, {"detail": "body must be JSON {\"pool\": str, \"n\": int}"}
        try:
            return 200, self.scale(pool, n)
        except StackError as exc:
            return 409, {"detail": str(exc)}


def _handler(control: ControlServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = min(int(self.headers.get("Content-Length") or 0), _MAX_BODY)
            body = self.rfile.read(length) if length else b""
            status, payload = control.handle(self.command, self.path, self.client_address[0],
                                             self.headers.get(ADMIN_TOKEN_HEADER, ""), body)
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _serve

        def log_message(self, format: str, *args: Any) -> None:  # the stdlib's name
            pass  # the web node's audit log records every scale; no stderr noise in the runner

    return Handler
