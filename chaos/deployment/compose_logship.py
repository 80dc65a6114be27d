"""Log shipping on compose (issue #26, docs/log-shipping.md "Compose"): the same shipper
(Debian's rsyslog with RELP, in the stack image), the same configuration and the same store
as the embedded stack, as two services of the run's override.

- Every Python service writes its log into ``<run_dir>/logs/<component>.log`` through a bind
  mount **at the same absolute path** (``proctor-log-to``, docker/bin): so the shipper's
  configuration is rendered by ``stack.logship.rsyslog`` exactly as on the embedded stack (only
  the store's host differs), and the harness's final read (``stack.logship.export``) counts
  the same files the shipper follows, with the same file names in the store's ledger.
- ``shipper``: ``rsyslogd -n`` with that configuration, the logs mounted read-only, its work
  folder (offsets, the queue's disk part) and impstats under ``<run_dir>/shipper``.
- ``log-store``: ``python -m stack.logship.store`` with its own ledger inside its container
  (a kill and a start keep the container's files, as a killed process keeps its file), RELP on
  the project network, its token-protected read API published on 127.0.0.1 for the final read.

The outage is the nemesis's ``kill`` of ``log_store`` (the engine's SIGKILL, then a start at the
fault's end). Logs of Valkey, HAProxy and PostgreSQL stay in the engine's own log (not shipped).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from chaos.deployment.compose_files import healthcheck
from stack.logship import rsyslog

__all__ = ["LOG_STORE_HTTP_PORT", "LOG_STORE_RELP_PORT", "LOG_STORE_SERVICE", "SHIPPER_SERVICE", "add_log_shipping",
           "prepare_logs", "write_shipper_config"]

LOG_STORE_SERVICE = "log-store"
SHIPPER_SERVICE = "shipper"
LOG_STORE_RELP_PORT = 2514
LOG_STORE_HTTP_PORT = 8103
_IMAGE = "${PROCTOR_IMAGE:-proctor-stack:local}"
_ENV_FILE = "${PROCTOR_COMPOSE_RUN:-.compose/run}/proctor.env"  # PROCTOR_LOG_STORE_TOKEN: drawn per run


def _component(service: str) -> str:
    return service.replace("-", "_")


def prepare_logs(run_dir: Path, services: list[str], uid: int) -> Path:
    """``<run_dir>/logs`` and each service's log file, owned by the containers' user, 0600 (logs at
    rest stay the owner's): created here so that a line the harness appends (a scenario's canary)
    never creates a file the component could not open."""
    logs = (run_dir / "logs").resolve()
    logs.mkdir(parents=True, exist_ok=True)
    os.chown(logs, uid, -1)
    logs.chmod(0o700)
    for service in services:
        path = logs / f"{_component(service)}.log"
        path.touch(mode=0o600)
        os.chown(path, uid, -1)
    return logs


def write_shipper_config(run_dir: Path, policy: str) -> rsyslog.ShipperPaths:
    """The embedded stack's own rendering, pointed at the store's service name."""
    paths = rsyslog.ShipperPaths.under(run_dir.resolve())
    redaction, buffer = rsyslog.LOG_POLICIES[policy]
    rsyslog.write_config(paths, LOG_STORE_RELP_PORT, redaction, buffer, target=LOG_STORE_SERVICE)
    return paths


def add_log_shipping(services: dict[str, Any], logging_services: list[str], paths: rsyslog.ShipperPaths,
                     store_port: int) -> None:
    """The override's part: each service logging into the mounted folder, the store, the shipper."""
    logs = str(paths.logs)
    for service in logging_services:
        entry = services.setdefault(service, {})
        entry["entrypoint"] = ["proctor-log-to", f"{logs}/{_component(service)}.log"]
        entry.setdefault("volumes", []).append(f"{logs}:{logs}")
    services[LOG_STORE_SERVICE] = {
        "image": _IMAGE, "init": True, "env_file": [_ENV_FILE], "networks": ["stack"],
        "command": ["python", "-m", "stack.logship.store", "--host", "0.0.0.0", "--relp-port", str(LOG_STORE_RELP_PORT),
                    "--http-port", str(LOG_STORE_HTTP_PORT), "--ledger", "/srv/run/log_store/logs.db"],
        "ports": [f"127.0.0.1:{store_port}:{LOG_STORE_HTTP_PORT}"],
        "healthcheck": healthcheck("http", f"http://127.0.0.1:{LOG_STORE_HTTP_PORT}/stats", "any"),
    }
    base = str(paths.config.parent)
    services[SHIPPER_SERVICE] = {
        "image": _IMAGE, "init": True, "user": "root", "networks": ["stack"],  # root: it reads every component's 0600 log
        "command": rsyslog.rsyslogd_argv(paths),
        "volumes": [f"{logs}:{logs}:ro", f"{base}:{base}"],
        "depends_on": {LOG_STORE_SERVICE: {"condition": "service_healthy"}},
        "healthcheck": healthcheck("process", "rsyslogd"),
    }
