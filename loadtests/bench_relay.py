"""Benchmark: how fast the relay hands a seeded backlog's pending rows to Valkey.

``python loadtests/bench_relay.py [--count 500]`` starts a plaintext ``valkey-server`` on a
free 127.0.0.1 port and a SQLite ledger in a temporary directory, seeds ``--count``
finished attempts through stack/ledger/backlog.py (each leaves a ``narrative`` and an
``sms`` row pending), then runs ``Relay.run_once`` until no row is pending and prints
rows/s (real seconds, ``time.perf_counter``) with the 1-minute load average before and
after (the 2 cores are shared). No worker runs: the figure is the relay's enqueue path
alone (one Valkey round trip and one ledger commit per row before #12's batching, one
pipeline and one commit per batch after). Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from redis import Redis
from sqlalchemy import func, select

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stack.config import Settings
from stack.deploy.ports import free_port
from stack.ledger.backlog import seed_backlog
from stack.ledger.engine import init_ledger, make_engine
from stack.ledger.schema import outbox
from stack.relay import Relay


def _start_valkey(workdir: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    server = subprocess.Popen(
        ["valkey-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(workdir)],
        stdout=subprocess.DEVNULL,
    )
    client = Redis(host="127.0.0.1", port=port)
    for _ in range(200):
        try:
            if client.ping():
                break
        except Exception:  # noqa: BLE001 - not up yet: any failure means retry
            time.sleep(0.05)
    client.close()
    return server, port


def _pending(engine) -> int:
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(outbox).where(outbox.c.status == "pending")).scalar_one()


def bench(count: int, workdir: Path, port: int) -> dict[str, float]:
    settings = Settings(run_dir=workdir, valkey_url=f"redis://127.0.0.1:{port}/0", relay_interval=0.1)
    engine = make_engine(settings)
    init_ledger(engine, settings)
    seed_backlog(engine, count)
    rows = _pending(engine)
    redis = Redis(host="127.0.0.1", port=port)
    relay = Relay(settings, engine, redis)
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    passes = 0
    while _pending(engine):
        relay.run_once()
        passes += 1
    seconds = time.perf_counter() - started
    redis.close()
    engine.dispose()
    return {"rows": rows, "passes": passes, "seconds": round(seconds, 3), "rows_per_s": round(rows / seconds, 1),
            "load1_before": load_before, "load1_after": os.getloadavg()[0]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=500, help="attempts to seed (2 pending rows each)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-relay-") as tmp:
        server, port = _start_valkey(Path(tmp))
        try:
            print(bench(args.count, Path(tmp), port))
        finally:
            os.kill(server.pid, signal.SIGTERM)
            server.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
