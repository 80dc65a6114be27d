"""Valkey's own view of a run, sampled beside the load: who is connected, how many
connections arrived and were rejected, and how much CPU Valkey burnt.

``valkey_sampler(interval)`` returns a Scenario ``background`` generator. It holds
one pooled TLS client (named ``proctor-monitor``) on the DIRECT Valkey address
(``stack.urls["valkey"]``, CA ``stack.settings.valkey_ca``), never through a fault
proxy, and every ``interval`` seconds appends to the history::

    {"process": "monitor", "type": "info", "f": "valkey-sample", "value": {
        "ok": true,
        "connected_clients": 14, "total_connections_received": 310, "rejected_connections": 0,
        "used_cpu_sys": 0.41, "used_cpu_user": 0.88, "maxclients": 10000,
        "clients": {"web_1": [12, 57], "worker_merit_1": [9, 10, 61], ...},   # CLIENT LIST ids by component
        "processes": {"web_1": {"connects": 3, "errors": {"reset": 1}, "error_total": 1, "pids": 1,
                                "max_process_connects": 3}, ...}}}

``clients`` groups CLIENT LIST by the component part of the client name
(``web_1/queue`` and RQ's ``worker_merit_1.4242`` -> ``web_1``, ``worker_merit_1``;
no name -> ``(unnamed)``). A new id under a name is a new connection: a reconnect.
``processes`` sums the per-process counters the stack's components write to
``<run_dir>/connections/`` (stack/connection_stats.py: one ``.jsonl`` file per process,
to which its forked RQ horses append their own lines; the last line of each pid
counts): every connect and every connection error each component saw, including
the short-lived ones a sample cannot catch. If Valkey cannot be read the sample has ``"ok": false``, the error
and its kind, and still the ``processes`` counters.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from redis import Redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from chaos.history import History
from stack.connection_stats import STATS_DIR, STATS_SUFFIX
from stack.valkey_client import classify_error, credentials

__all__ = ["component_of", "read_process_counters", "take_sample", "valkey_sampler"]

MONITOR_NAME = "proctor-monitor"
_INFO_FIELDS = ("connected_clients", "total_connections_received", "rejected_connections", "used_cpu_sys",
                "used_cpu_user", "maxclients", "blocked_clients")


def component_of(client_name: str) -> str:
    """``web_1/queue`` -> ``web_1``; RQ's ``worker_ai_1.4242`` -> ``worker_ai_1``; '' -> ``(unnamed)``."""
    if not client_name:
        return "(unnamed)"
    return client_name.split("/", 1)[0].split(".", 1)[0]


def _last_line_per_pid(folder: Path) -> dict[tuple[str, int, float], dict[str, Any]]:
    """Each process's latest snapshot: a file holds its process's lines and its horses'.

    A process is its pid and its ``started_at``: a restarted container's process has the same
    pid and writes to the same file, and its counts start again from 0, so keyed by pid alone
    its lines would overwrite its predecessor's counts."""
    latest: dict[tuple[str, int, float], dict[str, Any]] = {}
    for path in sorted(folder.glob(f"*{STATS_SUFFIX}")):
        try:
            lines = path.read_bytes().splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                data = json.loads(line)
            except ValueError:
                continue  # a line being appended right now: the next sample reads it
            component = str(data.get("component") or path.name.split(".", 1)[0])
            latest[(component, int(data.get("pid", 0)), float(data.get("started_at") or 0.0))] = data
    return latest


def read_process_counters(run_dir: Path) -> dict[str, dict[str, Any]]:
    """Per component: connects, errors, connection timeouts by phase and events (``EVENT_KINDS``: OOM refusals, limiter
    fallbacks, failed relay passes) summed over its processes (pids, horses and restarted processes included)."""
    folder = Path(run_dir) / STATS_DIR
    out: dict[str, dict[str, Any]] = {}
    if not folder.is_dir():
        return out
    for (component, _pid, _started), data in sorted(_last_line_per_pid(folder).items()):
        entry = out.setdefault(component,
                               {"connects": 0, "errors": {}, "error_total": 0, "events": {}, "pids": 0,
                                "max_process_connects": 0, "timeouts": {}, "timeout_total": 0})
        entry["connects"] += int(data.get("connects", 0))
        entry["max_process_connects"] = max(entry["max_process_connects"], int(data.get("connects", 0)))
        entry["pids"] += 1
        for kind, n in (data.get("errors") or {}).items():
            entry["errors"][kind] = entry["errors"].get(kind, 0) + int(n)
            entry["error_total"] += int(n)
        for kind, n in (data.get("events") or {}).items():
            entry["events"][kind] = entry["events"].get(kind, 0) + int(n)
        for phase, n in (data.get("timeouts") or {}).items():
            entry["timeouts"][phase] = entry["timeouts"].get(phase, 0) + int(n)
            entry["timeout_total"] += int(n)
    return out


def _client(url: str, ca: str, credential: dict[str, str] | None = None) -> Redis:
    kwargs: dict[str, Any] = {"socket_connect_timeout": 1.0, "socket_timeout": 1.0, "client_name": MONITOR_NAME,
                              "retry": Retry(NoBackoff(), 0), "max_connections": 1, **(credential or {})}
    if url.startswith("rediss://"):
        kwargs.update(ssl_ca_certs=ca or None, ssl_cert_reqs="required")
    return Redis.from_url(url, **kwargs)


def take_sample(client: Redis, run_dir: Path | None) -> dict[str, Any]:
    """One sample (blocking); never raises for Valkey trouble."""
    value: dict[str, Any] = {}
    try:
        info = client.info("all")
        clients = client.client_list()
        value["ok"] = True
        value.update({k: info[k] for k in _INFO_FIELDS if k in info})
        grouped: dict[str, list[int]] = {}
        for entry in clients:
            grouped.setdefault(component_of(str(entry.get("name") or "")), []).append(int(entry["id"]))
        value["clients"] = {name: sorted(ids) for name, ids in sorted(grouped.items())}
    except Exception as exc:  # noqa: BLE001 - a failed read is a sample too
        value.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:200], kind=classify_error(exc))
    if run_dir is not None:
        value["processes"] = read_process_counters(run_dir)
    return value


def valkey_sampler(interval: float = 0.5):
    """A Scenario background generator ``gen(stack, history, stop) -> dict``."""

    async def gen(stack: Any, history: History, stop: asyncio.Event) -> dict[str, Any]:
        client = _client(stack.urls["valkey"], stack.settings.valkey_ca, credentials(stack.settings))  # the harness user
        samples = failed = 0
        last: dict[str, Any] = {}
        try:
            while True:
                last = await asyncio.to_thread(take_sample, client, stack.run_dir)
                history.valkey_sample(last)
                samples += 1
                failed += not last.get("ok")
                if stop.is_set():
                    break
                try:
                    await asyncio.wait_for(stop.wait(), interval)
                    await asyncio.sleep(0.4)  # let components flush their last counters, then one final sample
                except TimeoutError:
                    pass
        finally:
            client.close()
        return {"samples": samples, "failed_samples": failed, "interval": interval,
                "last": {k: v for k, v in last.items() if k != "clients"}}

    return gen
