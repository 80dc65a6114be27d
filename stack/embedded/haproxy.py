"""HAProxy in front of the web nodes, and its runtime API (a unix socket, level admin).

Scaling changes the running backend through the runtime API (``add server``,
drain, ``del server``: stack/embedded/drain.py) and rewrites the config so that a
later restart of HAProxy (a single foreground ``-db`` process) starts with the same
servers. A restart resets runtime admin states (disable/drain) and drops open
connections, so scaling never restarts it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
from pathlib import Path
from typing import Mapping

from stack.embedded import StackError

__all__ = [
    "BACKEND",
    "PROXY_HEADER",
    "write_haproxy_config",
    "haproxy_argv",
    "runtime_command",
    "disable_server",
    "enable_server",
    "drain_server",
    "server_states",
    "server_sessions",
    "add_server",
    "delete_server",
    "admin_socket_path",
    "remove_admin_socket",
]

BACKEND = "web"
CHECK_INTERVAL = "500ms"
CHECK_TIMINGS = f"inter {CHECK_INTERVAL} fastinter {CHECK_INTERVAL} downinter {CHECK_INTERVAL} fall 2 rise 1"
_SUN_PATH_MAX = 97  # HAProxy's own limit: sun_path (108) less the ".<pid>.tmp" it binds first
_SHORT_SOCKET_ROOT = Path("/tmp")


def _server_options(source: str | None) -> str:
    # ``source``: the address HAProxy connects from, the one the nodes trust for X-Forwarded-For.
    return "check" + (f" source {source}" if source else "")


PROXY_HEADER = "X-Proctor-Proxy"
"""The header HAProxy adds with the run's proxy secret (stack.web.guards.PROXY_HEADER)."""


def _config_text(frontend_port: int, servers: Mapping[str, int], socket_path: Path, source: str | None = None,
                 proxy_secret: str = "") -> str:
    server_lines = [f"    server {name} 127.0.0.1:{port} {_server_options(source)}" for name, port in servers.items()]
    return "\n".join(
        [
            "global",
            f"    stats socket {socket_path} mode 600 level admin",
            "    stats timeout 10s",
            "    maxconn 4096",
            "",
            "defaults",
            "    mode http",
            "    timeout connect 1s",
            "    timeout client 30s",
            "    timeout server 30s",
            "    timeout queue 5s",
            "    timeout http-request 10s",
            # Retry a failed *connection* on another node; requests are never resent
            # after they reached a server (the default retry-on is conn-failure).
            "    retries 2",
            "    option redispatch",
            "",
            "frontend api",
            f"    bind 127.0.0.1:{frontend_port}",
            # The client's own X-Forwarded-For is a claim, not a fact: drop it, then
            # ``option forwardfor`` adds the one address HAProxy saw.
            "    http-request del-header X-Forwarded-For",
            "    option forwardfor",
            # The node believes that header only with the run's secret, which HAProxy sets here
            # (replacing whatever a client sent): a loopback source address proves nothing.
            *([f"    http-request set-header {PROXY_HEADER} {proxy_secret}"] if proxy_secret else []),
            # Admin lives on each node's loopback listener, not behind the load balancer;
            # refusing the path here too means a misrouted node still exposes nothing.
            "    http-request deny deny_status 404 if { path_beg /admin }",
            f"    default_backend {BACKEND}",
            "",
            f"backend {BACKEND}",
            "    balance roundrobin",
            "    option httpchk GET /readyz",
            "    http-check expect status 200",
            f"    default-server {CHECK_TIMINGS}",
            *server_lines,
            "",
        ]
    )


def write_haproxy_config(
    run_dir: Path, frontend_port: int, servers: Mapping[str, int], source: str | None = None, proxy_secret: str = ""
) -> tuple[Path, Path]:
    """Write ``<run_dir>/haproxy/haproxy.cfg`` (0600: it holds the proxy secret); return (config
    path, admin socket path)."""
    folder = (run_dir / "haproxy").resolve()
    folder.mkdir(parents=True, exist_ok=True)
    socket_path = admin_socket_path(folder)
    config = folder / "haproxy.cfg"
    fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(_config_text(frontend_port, servers, socket_path, source, proxy_secret))
    config.chmod(0o600)  # an older, wider file keeps its mode through O_TRUNC
    return config, socket_path


def admin_socket_path(folder: Path) -> Path:
    """``<folder>/admin.sock``, or, when a deep run folder makes that too long for a unix
    socket, a short folder under /tmp named after the run folder (so it is stable and
    unique per run), linked from ``<folder>/admin.sock.dir`` for people looking."""
    socket_path = folder / "admin.sock"
    if len(str(socket_path)) <= _SUN_PATH_MAX:
        return socket_path
    digest = hashlib.sha256(str(folder).encode()).hexdigest()[:16]
    short = _SHORT_SOCKET_ROOT / f"proctor-{digest}"
    short.mkdir(mode=0o700, exist_ok=True)
    link = folder / "admin.sock.dir"
    if not link.is_symlink():
        link.symlink_to(short)
    return short / "admin.sock"


def remove_admin_socket(socket_path: Path) -> None:
    """Remove the socket, and its short folder when it lives outside the run folder."""
    socket_path.unlink(missing_ok=True)
    if socket_path.parent.parent == _SHORT_SOCKET_ROOT and socket_path.parent.name.startswith("proctor-"):
        shutil.rmtree(socket_path.parent, ignore_errors=True)


def haproxy_argv(binary: str, config: Path) -> list[str]:
    return [binary, "-db", "-f", str(config)]


def runtime_command(socket_path: Path | str, command: str, timeout: float = 2.0) -> str:
    """Send one runtime API command and return HAProxy's reply."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(str(socket_path))
            sock.sendall(command.encode() + b"\n")
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except OSError as exc:
            raise StackError(f"haproxy runtime API {socket_path}: {command!r} failed: {exc}") from exc
    return b"".join(chunks).decode(errors="replace")


def _set_state(socket_path: Path | str, server: str, state: str) -> None:
    reply = runtime_command(socket_path, f"set server {BACKEND}/{server} state {state}").strip()
    if reply:  # success is an empty reply
        raise StackError(f"haproxy: set server {BACKEND}/{server} state {state}: {reply}")


def disable_server(socket_path: Path | str, server: str) -> None:
    """Maintenance mode: no new traffic, established connections may finish."""
    _set_state(socket_path, server, "maint")


def enable_server(socket_path: Path | str, server: str) -> None:
    _set_state(socket_path, server, "ready")


def drain_server(socket_path: Path | str, server: str) -> None:
    """No new connections but persistent sessions continue; health checks go on."""
    _set_state(socket_path, server, "drain")


def server_states(socket_path: Path | str) -> dict[str, str]:
    """{server name: status} from ``show stat`` (``UP``, ``DOWN``, ``MAINT``, ``DRAIN``...)."""
    return {name: row.get("status", "") for name, row in _server_rows(socket_path).items()}


def server_sessions(socket_path: Path | str) -> dict[str, int]:
    """{server name: requests it holds}: open sessions (``scur``) plus those queued for it (``qcur``)."""
    return {name: int(row.get("scur") or 0) + int(row.get("qcur") or 0)
            for name, row in _server_rows(socket_path).items()}


def add_server(socket_path: Path | str, server: str, port: int, source: str | None = None) -> None:
    """Add a server to the running backend, in maintenance: ``enable_server`` lets traffic in.

    Dynamic servers do not inherit ``default-server``, so the check timings are spelled out."""
    options = f"{_server_options(source)} {CHECK_TIMINGS}"
    reply = runtime_command(socket_path, f"add server {BACKEND}/{server} 127.0.0.1:{port} {options}").strip()
    if "New server registered" not in reply:
        raise StackError(f"haproxy: add server {BACKEND}/{server}: {reply}")
    reply = runtime_command(socket_path, f"enable health {BACKEND}/{server}").strip()
    if reply:
        raise StackError(f"haproxy: enable health {BACKEND}/{server}: {reply}")


def delete_server(socket_path: Path | str, server: str) -> None:
    """Remove a server in maintenance with no session left from the running backend."""
    reply = runtime_command(socket_path, f"del server {BACKEND}/{server}").strip()
    if "Server deleted" not in reply:
        raise StackError(f"haproxy: del server {BACKEND}/{server}: {reply}")


def _server_rows(socket_path: Path | str) -> dict[str, dict[str, str]]:
    lines = runtime_command(socket_path, "show stat").splitlines()
    if not lines or not lines[0].startswith("# "):
        raise StackError(f"haproxy: unexpected 'show stat' reply: {lines[:1]}")
    header = lines[0][2:].split(",")
    rows: dict[str, dict[str, str]] = {}
    for line in lines[1:]:
        row = dict(zip(header, line.split(",")))
        if row.get("pxname") == BACKEND and row.get("svname") not in (None, "BACKEND", "FRONTEND"):
            rows[row["svname"]] = row
    return rows
