"""Log shipping on the embedded stack (docs/log-shipping.md): the log store and the shipper
as two supervised components, and the final read of what they did.

With ``StackSpec.log_shipping`` set, the stack starts ``log_store`` (``stack.logship.store``:
RELP on one port, the token-protected read API on another) and ``shipper`` (rsyslogd in the
foreground, its own configuration under ``<run_dir>/shipper/``) right after Valkey, so every
component's log (``<run_dir>/logs/*.log``) is followed from its first line. The setting names
the shipper's policy, turned into its objects once, here: ``redact`` (production), or the
negative controls ``unredacted`` and ``uncounted`` (stack/logship/rsyslog.py).
"""

from __future__ import annotations

import sys
from pathlib import Path


from stack.components import Component, HealthProbe
from stack.deploy.ports import HOST
from stack.embedded import StackError
from stack.logship import rsyslog
from stack.logship.export import export_logs, produced_lines  # shared with the compose target

__all__ = ["LOG_POLICIES", "export_logs", "log_store_component", "produced_lines", "shipper_component"]

LOG_POLICIES = rsyslog.LOG_POLICIES  # the names StackSpec.log_shipping takes (shared with the compose target)


def policy(name: str) -> tuple[rsyslog.Redaction, rsyslog.Buffer]:
    try:
        return LOG_POLICIES[name]
    except KeyError:
        raise StackError(f"StackSpec.log_shipping={name!r}: one of {sorted(LOG_POLICIES)}") from None


def log_store_component(run_dir: Path, http_port: int, relp_port: int) -> Component:
    argv = (sys.executable, "-m", "stack.logship.store", "--relp-port", str(relp_port), "--http-port", str(http_port),
            "--ledger", str(run_dir / "log_store" / "logs.db"))
    health = HealthProbe("http", f"http://{HOST}:{http_port}/stats", accept="not5xx")  # 401 without the token: it answers
    return Component("log_store", "log_store", argv=argv, health=health, port=http_port)


def shipper_component(run_dir: Path, relp_port: int, name: str) -> Component:
    paths = rsyslog.ShipperPaths.under(run_dir)
    redaction, buffer = policy(name)
    rsyslog.write_config(paths, relp_port, redaction, buffer)
    return Component("shipper", "shipper", argv=tuple(rsyslog.rsyslogd_argv(paths)), health=HealthProbe("alive"))


