"""The AI lane's drain under its shared limit (issue #11): N narrative jobs, W workers.

A lane-level harness, not the whole stack: a real valkey-server (the shared limiter),
the real fake AI provider over HTTP, a real SQLite ledger, and the real job code
(``stack.ailane.job.run_narrative``); each worker is ``threads`` threads that claim a
due outbox row (what the relay and RQ do in the stack) and run its job. That keeps a
100-job drain to seconds, so the limiter, not fork and start-up costs, is the bottleneck.

``shared=False`` is the negative control: each worker keeps its own limiter (per-worker
keys), so W workers send up to W x the limit. The verdict rests on the provider's own
ledger: calls over the limit in any sliding window (chaos/checkers/provider_limit.py),
duplicate charges and the billing equation. The drain ratio (drain time / (N / limit)
case-minutes) is a figure for the report and the benchmark, never a pass/fail bound.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn
from redis import Redis
from sqlalchemy import Engine, update

from chaos.checkers import CheckOptions
from chaos.checkers.base import Result
from chaos.checkers.billing import check_billing
from chaos.checkers.duplicate_charges import check_duplicate_charges
from chaos.checkers.provider_limit import provider_limit_checker
from chaos.ledgers import EffectRow, Ledgers
from stack.ailane import billing
from stack.ailane.job import LaneConfig, run_narrative
from stack.config import CASE_PROVIDER_CALLS_PER_MINUTE, Settings
from stack.lanes import jobs
from stack.ledger import outbox, outcomes
from stack.ledger.engine import init_ledger, make_engine
from stack.ledger.schema import attempts, outbox as outbox_table, students
from stack.providers import ai
from stack.providers.ledger import EffectLedger

__all__ = ["StormResult", "run_storm"]


@dataclass
class StormResult:
    n: int
    workers: int
    shared: bool
    time_scale: float
    drain_seconds: float
    theoretical_seconds: float
    checks: dict[str, Result] = field(default_factory=dict)

    @property
    def drain_ratio(self) -> float:
        return self.drain_seconds / self.theoretical_seconds

    def summary(self) -> dict[str, Any]:
        return {"n": self.n, "workers": self.workers, "shared_limiter": self.shared, "time_scale": self.time_scale,
                "case_minute_seconds": 60 * self.time_scale, "drain_seconds": round(self.drain_seconds, 3),
                "theoretical_seconds": round(self.theoretical_seconds, 3), "drain_ratio": round(self.drain_ratio, 3),
                **{name: {"valid": r.valid, "violations": r.violations} for name, r in self.checks.items()}}


def _valkey(workdir: Path) -> tuple[subprocess.Popen[bytes], Redis]:
    binary = shutil.which("valkey-server")
    if binary is None:
        raise RuntimeError("valkey-server not found: install the valkey-server package")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                               "--dir", str(workdir)], stdout=subprocess.DEVNULL)
    client = Redis(host="127.0.0.1", port=port)
    for _ in range(300):
        try:
            client.ping()
            return server, client
        except Exception:
            time.sleep(0.05)
    server.kill()
    raise RuntimeError("valkey-server did not answer PING within 15 s")


class _Provider:
    """The fake AI provider on a loopback port, in a thread."""

    def __init__(self, settings: Settings) -> None:
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        self.settings = settings.with_overrides(ai_url=self.url)
        self.server = uvicorn.Server(uvicorn.Config(ai.create_app(self.settings), log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True)

    def __enter__(self) -> "_Provider":
        self.thread.start()
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("the fake AI provider did not start (see the log)")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def _seed(engine: Engine, n: int) -> list[str]:
    """N finished attempts whose merit cards are ready: N narrative rows due now."""
    now = time.time()
    with engine.begin() as conn:
        for i in range(n):
            attempt = f"a{i:04d}"
            conn.execute(students.insert().values(id=f"s-{attempt}", created_at=now))
            conn.execute(attempts.insert().values(id=attempt, student_id=f"s-{attempt}", exam_code="NOVA-101",
                                                  status="finished", started_at=now, finished_at=now))
            outbox.create_rows(conn, attempt, now)
            card = {"attempt_id": attempt, "student_id": f"s-{attempt}", "exam_code": "NOVA-101", "score": i % 5,
                    "max_score": 4, "position": 1 + i % 7}
            outcomes.write_ready(conn, f"merit-{attempt}", attempt, "merit", card)
            outbox.mark_done(conn, f"merit-{attempt}")
    return [f"narrative-a{i:04d}" for i in range(n)]


def _claim(engine: Engine, reader: Engine) -> tuple[str, str] | None:
    """One due narrative row, taken atomically (the relay's enqueue and a worker's dequeue in one).
    Looked for on a read snapshot first: an idle poll takes no write lock."""
    with reader.connect() as conn:
        due = [row for row in outbox.enqueueable(conn, limit=50) if row["kind"] == "narrative"]
    if not due:
        return None
    with engine.begin() as conn:
        for row in due:
            job = f"{row['operation_id']}-{row['attempts'] + 1}"
            taken = conn.execute(update(outbox_table).where(outbox_table.c.operation_id == row["operation_id"],
                                                            outbox_table.c.status == "pending",
                                                            outbox_table.c.attempts == row["attempts"])
                                 .values(status="enqueued", attempts=row["attempts"] + 1, job_id=job))
            if taken.rowcount == 1:
                return row["operation_id"], job
    return None


def _unfinished(engine: Engine) -> int:
    with engine.begin() as conn:
        return sum(1 for status in ("pending", "enqueued")
                   for row in outbox.rows_with_status(conn, status, limit=100000) if row["kind"] == "narrative")


def _worker(settings: Settings, redis: Redis, config: LaneConfig, stop: threading.Event) -> None:
    engine, reader = make_engine(settings), make_engine(settings, read_only=True)
    process = jobs._Process(os.getpid(), settings, engine, reader)
    while not stop.is_set():
        claimed = _claim(engine, reader)
        if claimed is None:
            time.sleep(0.005)
            continue
        run_narrative(process, redis, claimed[0], claimed[1], config)
    if process.http is not None:
        process.http.close()


def _checks(settings: Settings, engine: Engine, limit: int) -> dict[str, Result]:
    effects = tuple(EffectRow(operation_id=e.operation_id, id=e.id, started_at=e.started_at, created_at=e.created_at,
                              cost=e.cost) for e in EffectLedger(settings.run_dir / "ai_effects.db").all())
    ledgers = Ledgers(ai_effects=effects)
    with engine.begin() as conn:
        reservations = billing.rows(conn)
    return {"provider_limit": provider_limit_checker(limit, settings.scaled(60.0))([], ledgers, CheckOptions()),
            "duplicate_charges": check_duplicate_charges([], ledgers, CheckOptions()),
            "billing": check_billing(reservations, effects)}


def run_storm(workdir: Path, n: int = 100, workers: int = 2, threads: int = 4, time_scale: float = 0.01,
              shared: bool = True, limit: int = CASE_PROVIDER_CALLS_PER_MINUTE) -> StormResult:
    server, redis = _valkey(workdir)
    try:
        base = Settings(run_dir=workdir, time_scale=time_scale, exams={"NOVA-101": 4})
        with _Provider(base) as provider:
            settings = provider.settings
            engine = make_engine(settings)
            init_ledger(engine, settings)
            _seed(engine, n)
            return _drain(settings, engine, redis, n, workers, threads, shared, limit)
    finally:
        redis.close()
        server.terminate()
        server.wait(timeout=10)


def _drain(settings: Settings, engine: Engine, redis: Redis, n: int, workers: int, threads: int, shared: bool,
           limit: int) -> StormResult:
    stop = threading.Event()
    configs = [LaneConfig(calls_per_minute=limit, max_in_flight=threads * workers,
                          limiter_keys=("proctor:ai:calls", "proctor:ai:pause") if shared
                          else (f"proctor:ai:calls:{w}", f"proctor:ai:pause:{w}")) for w in range(workers)]
    pool = [threading.Thread(target=_worker, args=(settings, redis, configs[w], stop), daemon=True)
            for w in range(workers) for _ in range(threads)]
    started = time.time()
    for thread in pool:
        thread.start()
    try:
        while _unfinished(engine):
            time.sleep(0.05)
    finally:
        stop.set()
        for thread in pool:
            thread.join(timeout=30)
    with engine.begin() as conn:
        last_done = max(row["done_at"] or started for row in outbox.rows_with_status(conn, "done", limit=100000)
                        if row["kind"] == "narrative")
    theoretical = n / limit * settings.scaled(60.0)
    return StormResult(n, workers, shared, settings.time_scale, last_done - started, theoretical,
                       _checks(settings, engine, limit))
