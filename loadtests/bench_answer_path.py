"""Benchmark: what one answer costs a web node, the options side by side, before and after.

``python loadtests/bench_answer_path.py [--answers 300] [--rounds 3] [--before 2000210]`` prints:

- **ledger**: the answer transaction in-process on a SQLite ledger (WAL, synchronous=FULL, the
  node's pooled engine), new answers only. Options: ``before`` (the revision code of commit
  ``--before``, loaded from git: Core statements built per call, six of them), ``core-once``
  (this tree's four statements, built once, run by ``conn.execute``: SQLAlchemy still computes
  each cache key), ``compiled`` (this tree: compiled once per dialect, run as driver SQL through
  the same connection; what the node runs) and ``dbapi`` (the same SQL on the raw DB-API cursor:
  the floor, but without SQLAlchemy's error wrapping the retry and the 503 rely on). CPU ms per
  answer (``time.process_time``: this process only), statements per answer, wall ms.
- **node**: one web node over HTTP (``python -m stack.web.serve``, uvicorn with uvloop and
  httptools, a plaintext ``valkey-server`` for the request limiter), from the tree of commit
  ``--before`` and from this tree, each on its own fresh ledger; ``--answers`` new answers sent
  by ``--clients`` keep-alive clients per round. CPU ms per request is the node's process
  group's utime + stime (``/proc``, loadtests/proc_cpu.py) over the answers it served.
  ``--tree NAME=DIR`` adds a tree (this one with a change undone, say) to the same rounds.
- **servers** (only when asked: ``--sections servers``): this tree's public app under uvicorn
  (``stack.web.serve``) and under granian (``pip install granian``; one worker, uvloop), CPU ms
  per answer of each server's process group.
- **json**: microseconds to encode one answer reply with the stdlib (what ``JSONResponse``
  does) and with orjson, when it is importable.

Rounds alternate the options so that the shared machine's load falls on all of them alike; the
1-minute load average is printed per section. Figures are printed, never asserted; the results
go to ``<results>/bench/answer_path.json`` (``stack.paths.bench_dir``).
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
from sqlalchemy import Engine, event

from bench_relay import _start_valkey
from stack.config import Settings
from stack.deploy.ports import free_ports
from stack.ledger import revisions
from stack.ledger.attempts import ensure_student, start_attempt
from stack.ledger.engine import init_ledger, make_engine
from stack.ledger.prepared import Prepared
from stack.paths import bench_dir
from stack.web.auth import issue_token
from proc_cpu import read_table

REPO = Path(__file__).resolve().parents[1]
EXAM, QUESTIONS = "BENCH-1", 20
SECRETS = {"PROCTOR_TOKEN_SECRET": uuid.uuid4().hex, "PROCTOR_ADMIN_TOKEN": uuid.uuid4().hex,
           "PROCTOR_ROSTER_KEY": uuid.uuid4().hex}


def _settings(run_dir: Path) -> Settings:
    return Settings(run_dir=run_dir, exams={EXAM: QUESTIONS}, token_secret=SECRETS["PROCTOR_TOKEN_SECRET"],
                    admin_token=SECRETS["PROCTOR_ADMIN_TOKEN"], roster_key=SECRETS["PROCTOR_ROSTER_KEY"],
                    max_attempts=10_000)


def _ledger(run_dir: Path) -> Engine:
    run_dir.mkdir(parents=True, exist_ok=True)
    engine = make_engine(_settings(run_dir), pool_size=8)
    init_ledger(engine, _settings(run_dir))
    return engine


def _attempts(engine: Engine, count: int) -> list[tuple[str, str]]:
    """(student, attempt id) of ``count`` open attempts, one student each."""
    made = []
    for n in range(count):
        student = f"bench-{uuid.uuid4().hex[:10]}-{n}"
        ensure_student(engine, student)
        attempt, _ = start_attempt(engine, student, EXAM, None)
        made.append((student, attempt.id))
    return made


def _rows(attempts: list[tuple[str, str]], count: int) -> list[dict]:
    """``count`` new answers: every question of an attempt, then the next attempt."""
    return [revisions.revision_row(attempts[n // QUESTIONS][1], f"q{n % QUESTIONS + 1}", 1, f"answer {n}",
                                   uuid.uuid4().hex, "bench") for n in range(count)]


# --- ledger options ------------------------------------------------------------------------

def _before_module(rev: str) -> ModuleType:
    """stack/ledger/revisions.py as it was at ``rev`` (it imports only modules that still exist)."""
    source = subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:stack/ledger/revisions.py"],
                            check=True, capture_output=True, text=True).stdout
    spec = importlib.util.spec_from_loader(f"revisions_{rev}", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    exec(compile(source, f"{rev}:stack/ledger/revisions.py", "exec"), module.__dict__)  # our own history, from git
    return module


class _DriverRows:
    """The slice of a CursorResult the revision code reads, over a raw DB-API cursor."""

    def __init__(self, cursor: Any) -> None:
        names = [d[0] for d in cursor.description] if cursor.description else []
        self._rows = [_Row(zip(names, values)) for values in cursor.fetchall()] if names else []

    def first(self) -> Any:
        return self._rows[0] if self._rows else None

    def all(self) -> list[Any]:
        return self._rows


class _Row(dict):  # type: ignore[type-arg]
    __getattr__ = dict.__getitem__


def _core_once(self: Prepared, conn: Any, params: Any) -> Any:
    return conn.execute(self.statement, dict(params))


def _dbapi(self: Prepared, conn: Any, params: Any) -> Any:
    sql, order = self._for(conn.dialect)
    cursor = conn.connection.driver_connection.cursor()
    cursor.execute(sql, dict(params) if order is None else tuple(params[name] for name in order))
    return _DriverRows(cursor)


_RUNNERS: dict[str, Callable[..., Any] | None] = {"core-once": _core_once, "compiled": None, "dbapi": _dbapi}
"""How ``Prepared.run`` executes in each option of this tree (None: as the product does)."""


class _StatementCount:
    def __init__(self, engine: Engine) -> None:
        self.count = 0
        event.listen(engine, "before_cursor_execute", self._seen)

    def _seen(self, *_args: Any) -> None:
        self.count += 1


def _run_ledger_option(name: str, engine: Engine, rows: list[dict], before: ModuleType | None) -> dict[str, float]:
    counter = _StatementCount(engine)
    module = before if name == "before" else revisions
    real_run = Prepared.run
    runner = _RUNNERS.get(name)
    if runner is not None:
        Prepared.run = runner  # type: ignore[method-assign] - the benchmark's own option, restored below
    try:
        cpu, wall = time.process_time(), time.perf_counter()
        for row in rows:
            module.submit_revision(engine, module.RevisionPolicy(), row)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    finally:
        Prepared.run = real_run  # type: ignore[method-assign]
        event.remove(engine, "before_cursor_execute", counter._seen)
    statements = counter.count if name != "dbapi" else float("nan")  # the raw cursor bypasses the event
    return {"cpu_ms": 1000 * cpu / len(rows), "wall_ms": 1000 * wall / len(rows),
            "statements": statements / len(rows)}


def bench_ledger(workdir: Path, answers: int, rounds: int, rev: str) -> dict[str, Any]:
    before = _before_module(rev)
    options = ["before", "core-once", "compiled", "dbapi"]
    engines = {name: _ledger(workdir / f"ledger-{name}") for name in options}
    per_round: dict[str, list[dict[str, float]]] = {name: [] for name in options}
    for round_no in range(rounds):
        for name in options[round_no % len(options):] + options[:round_no % len(options)]:
            engine = engines[name]
            rows = _rows(_attempts(engine, -(-answers // QUESTIONS)), answers)
            per_round[name].append(_run_ledger_option(name, engine, rows, before))
    for engine in engines.values():
        engine.dispose()
    return {name: _medians(results) for name, results in per_round.items()}


def _medians(results: list[dict[str, float]]) -> dict[str, float]:
    return {key: round(statistics.median(r[key] for r in results), 3) for key in results[0]}


# --- one node over HTTP, before and after --------------------------------------------------

def _tree_of(rev: str, workdir: Path) -> Path:
    tree = workdir / f"tree-{rev}"
    tree.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "stack"], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    return tree


class _Node:
    """``python -m stack.web.serve`` from ``tree`` on a fresh ledger in ``run_dir``."""

    def __init__(self, tree: Path, run_dir: Path, valkey_port: int) -> None:
        self.engine = _ledger(run_dir)
        self.port, admin_port = free_ports(2)
        env = {**os.environ, **SECRETS, "PYTHONPATH": str(tree), "PROCTOR_RUN_DIR": str(run_dir),
               "PROCTOR_EXAMS": f"{EXAM}:{QUESTIONS}", "PROCTOR_NODE_NAME": "web_bench",
               "PROCTOR_ADMIN_PORT": str(admin_port), "PROCTOR_MAX_ATTEMPTS": "10000",
               "PROCTOR_VALKEY_URL": f"redis://127.0.0.1:{valkey_port}/0"}
        self.process = subprocess.Popen(self.command(), env=env, cwd=tree, stdout=subprocess.DEVNULL,
                                        start_new_session=True)
        self.url = f"http://127.0.0.1:{self.port}"
        self._wait_ready()

    def command(self) -> list[str]:
        return [sys.executable, "-m", "stack.web.serve", "--port", str(self.port)]

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code < 500:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError(f"node on {self.url} did not start")

    def cpu_seconds(self) -> float:
        """utime + stime of the server's process group (granian runs a worker beside its main process)."""
        table = read_table()
        return table.cpu(table.group(self.process.pid))

    def stop(self) -> None:
        os.killpg(self.process.pid, signal.SIGTERM)
        self.process.wait(timeout=20)
        self.engine.dispose()


def _send(url: str, work: list[tuple[str, dict]], statuses: list[int]) -> None:
    with httpx.Client(base_url=url, timeout=30) as client:
        for token, row in work:
            response = client.put(f"/v1/attempts/{row['attempt_id']}/answers/{row['question']}",
                                  json={"content": row["content"], "revision": 1},
                                  headers={"Authorization": f"Bearer {token}", "Idempotency-Key": row["idempotency_key"]})
            statuses.append(response.status_code)


def _drive(node: _Node, answers: int, clients: int) -> dict[str, float]:
    attempts = _attempts(node.engine, -(-answers // QUESTIONS))
    tokens = {attempt: issue_token(SECRETS["PROCTOR_TOKEN_SECRET"], student, EXAM, 3600)[0]
              for student, attempt in attempts}
    work = [(tokens[row["attempt_id"]], row) for row in _rows(attempts, answers)]
    statuses: list[int] = []
    threads = [threading.Thread(target=_send, args=(node.url, work[n::clients], statuses)) for n in range(clients)]
    cpu, wall = node.cpu_seconds(), time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    cpu, wall = node.cpu_seconds() - cpu, time.perf_counter() - wall
    return {"cpu_ms_per_request": 1000 * cpu / answers, "requests_per_s": answers / wall,
            "not_201": float(sum(1 for s in statuses if s != 201))}


def bench_node(workdir: Path, answers: int, rounds: int, clients: int, rev: str,
               extra: dict[str, Path]) -> dict[str, Any]:
    trees = {"before": _tree_of(rev, workdir), **extra, "after": REPO}
    return _node_rounds(workdir, {name: functools.partial(_Node, tree) for name, tree in trees.items()},
                        answers, rounds, clients)


def _node_rounds(workdir: Path, nodes: dict[str, Callable[[Path, int], _Node]], answers: int, rounds: int,
                 clients: int) -> dict[str, Any]:
    """Each node started fresh per round (``nodes[name](run_dir, valkey_port)``), warmed up, then
    driven; the order rotates per round; the medians over the rounds."""
    valkey, valkey_port = _start_valkey(workdir)
    per_round: dict[str, list[dict[str, float]]] = {name: [] for name in nodes}
    try:
        for round_no in range(rounds):
            names = list(nodes)
            for name in names[round_no % len(names):] + names[:round_no % len(names)]:
                node = nodes[name](workdir / f"node-{name}-{round_no}", valkey_port)
                try:
                    _drive(node, QUESTIONS * 2, clients)  # warm-up: imports, pools, first statements
                    per_round[name].append(_drive(node, answers, clients))
                finally:
                    node.stop()
    finally:
        valkey.terminate()
        valkey.wait(timeout=10)
    return {name: _medians(results) for name, results in per_round.items()}


class _GranianNode(_Node):
    """The same public app under granian (one worker, uvloop); no admin listener, none is used here."""

    def command(self) -> list[str]:
        return [str(Path(sys.executable).with_name("granian")), "--interface", "asgi", "--host", "127.0.0.1",
                "--port", str(self.port), "--loop", "uvloop", "--workers", "1", "--no-ws", "--log-level", "warning",
                "--factory", "stack.web.app:create_app"]


def bench_servers(workdir: Path, answers: int, rounds: int, clients: int) -> dict[str, Any]:
    """uvicorn (uvloop + httptools, what stack.web.serve runs) against granian, this tree on both."""
    if not Path(sys.executable).with_name("granian").exists():
        return {"granian": {"skipped": "not installed (pip install granian)"}}
    servers = {"uvicorn": functools.partial(_Node, REPO), "granian": functools.partial(_GranianNode, REPO)}
    return _node_rounds(workdir, servers, answers, rounds, clients)  # type: ignore[arg-type]


# --- JSON encoders -------------------------------------------------------------------------

def bench_json(repeat: int = 20_000) -> dict[str, float]:
    reply = revisions.RevisionReceipt(uuid.uuid4().hex, uuid.uuid4().hex, "q7", 3, 3, replayed=False).as_reply()
    encoders: dict[str, Callable[[dict], bytes]] = {
        "stdlib": lambda c: json.dumps(c, ensure_ascii=False, allow_nan=False, indent=None,
                                       separators=(",", ":")).encode("utf-8")}
    try:
        import orjson  # type: ignore[import-not-found]
        encoders["orjson"] = orjson.dumps
    except ImportError:
        pass
    timings = {}
    for name, encode in encoders.items():
        started = time.process_time()
        for _ in range(repeat):
            encode(reply)
        timings[name] = round(1e6 * (time.process_time() - started) / repeat, 2)
    return timings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=300, help="new answers per option and round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; each figure is the median over them")
    parser.add_argument("--clients", type=int, default=4, help="concurrent keep-alive clients in the node section")
    parser.add_argument("--before", default="2000210", help="the commit measured as 'before'")
    parser.add_argument("--sections", default="ledger,node,json", help="which sections to run")
    parser.add_argument("--tree", action="append", default=[], metavar="NAME=DIR",
                        help="another tree (a directory holding stack/) measured in the node section, e.g. "
                             "this tree with one change undone, to see what that change bought")
    args = parser.parse_args(argv)
    if args.answers < 1 or args.rounds < 1 or args.clients < 1:
        print("bench_answer_path: --answers, --rounds and --clients must be at least 1", file=sys.stderr)
        return 2
    extra = dict(tree.partition("=")[::2] for tree in args.tree)
    bad = [name for name, path in extra.items() if not name or not (Path(path) / "stack").is_dir()]
    if bad:
        print(f"bench_answer_path: --tree {bad[0]!r}: expected NAME=DIR, DIR holding stack/", file=sys.stderr)
        return 2
    sections = set(args.sections.split(","))
    results: dict[str, Any] = {"before": args.before, "answers": args.answers, "rounds": args.rounds}
    with tempfile.TemporaryDirectory(prefix="bench-answer-") as tmp:
        for name, run in (("ledger", lambda: bench_ledger(Path(tmp), args.answers, args.rounds, args.before)),
                          ("node", lambda: bench_node(Path(tmp), args.answers, args.rounds, args.clients, args.before,
                                                      {name: Path(path) for name, path in extra.items()})),
                          ("servers", lambda: bench_servers(Path(tmp), args.answers, args.rounds, args.clients)),
                          ("json", bench_json)):
            if name in sections:
                load = os.getloadavg()[0]
                results[name] = {"figures": run(), "load_before": load, "load_after": os.getloadavg()[0]}
                print(f"{name} (load average {load:.2f} -> {results[name]['load_after']:.2f}):")
                for option, figures in results[name]["figures"].items():
                    print(f"  {option:10s} {figures}")
    out = bench_dir() / "answer_path.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
