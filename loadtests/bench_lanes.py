"""Benchmark: what a lane worker costs to restart and what each job costs it.

``python loadtests/bench_lanes.py [--kills 5] [--jobs 20] [--attempts 8] [--hog]`` starts the
embedded stack (1 web node, one worker per lane) and prints, in real seconds:

- restart: SIGKILL the merit worker's tree, the supervisor restarts it at once; seconds
  from the kill until the new worker is ready (its liveness key set, about to dequeue),
  and the new process's own start-up (spawn -> ready);
- per job: a trivial job (``stack.lanes.allowlist.noop``) enqueued on the merit lane one
  at a time. RQ's timestamps split it: enqueue -> ``started_at`` (dequeue, fork of the
  horse, its Valkey connection, RQ's bookkeeping; ``started_at`` is set in the horse right
  before the function) and ``started_at`` -> ``ended_at`` (the function);
- lane jobs: ``--attempts`` finished attempts, one at a time, each waited for until its
  merit, narrative and SMS rows are done (relay -> worker -> horse); the same RQ split
  per kind, so the second figure is the time inside the real job function;
- phases: the workers are stopped and a helper process that imports what a worker
  imports forks one child per operation, like RQ's horse, and times inside the child the
  per-process set-up (``_current``), the ledger transactions, the provider calls and the
  CPU work, and counts SQL statements and transactions. ``fork`` is fork -> first line
  of the child.

Every section records the 1-minute load average before and after it (``os.getloadavg``):
the 2 cores are shared with other work. ``--hog`` runs ``python3 -c 'while 1: pass'``
(one core busy) for the whole benchmark and stops it by pid. Writes
``<results>/bench/lanes[-hog].json`` (``stack.paths.bench_dir``: ``$PROCTOR_RESULTS_DIR`` or
``./results``). Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from typing import Any, Callable

from stack.paths import bench_dir

PHASES = ("_current", "_unless_ready", "_already_ready", "_merit_card", "merit_of", "_burn_cpu", "_call_provider",
          "_commit_outcome")
"""Functions of stack.lanes.jobs timed in the phase helper; those that exist are wrapped (older releases
had ``_already_ready``, so one benchmark measures before and after). Nested calls are counted in both."""
KIND_FUNCTION = {"merit": "compute_merit_card", "sms": "send_result_sms"}
"""Kinds the phase helper times. The narrative job is stack.lanes.ai.job (a shared limiter and
billing in Valkey and the ledger), not a function of stack.lanes.jobs: its cost is in the
lane-jobs section (RQ's own timestamps) and loadtests/bench_ai_drain.py."""
LANE_OF_KIND = {"merit": "merit", "narrative": "ai", "sms": "sms"}


def _summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    if not ordered:
        return {"n": 0}
    return {"n": len(ordered), "median": round(statistics.median(ordered), 4), "min": round(ordered[0], 4),
            "max": round(ordered[-1], 4)}


def _loaded(section: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    before = round(os.getloadavg()[0], 2)
    figures = section()
    return {**figures, "load1_before": before, "load1_after": round(os.getloadavg()[0], 2)}


def measure_restarts(stack: Any, kills: int) -> dict[str, Any]:
    to_ready, startup = [], []
    for _ in range(kills):
        time.sleep(0.5)
        starts = stack.supervisor.info("worker_merit_1")["starts"]
        killed = time.monotonic()
        stack.supervisor.kill("worker_merit_1", signal.SIGKILL)
        while stack.supervisor.info("worker_merit_1")["starts"] == starts:  # restarted at once
            time.sleep(0.01)
        stack.wait_healthy("worker_merit_1", 60)
        to_ready.append(time.monotonic() - killed)
        startup.append(stack.ready_seconds("worker_merit_1") or float("nan"))
    return {"kill_to_ready": _summary(to_ready), "startup": _summary(startup)}


def _rq_split(jobs: list[Any]) -> dict[str, Any]:
    return {
        "enqueue_to_start": _summary([(j.started_at - j.enqueued_at).total_seconds() for j in jobs]),
        "start_to_end": _summary([(j.ended_at - j.started_at).total_seconds() for j in jobs]),
        "enqueue_to_end": _summary([(j.ended_at - j.enqueued_at).total_seconds() for j in jobs]),
    }


def measure_jobs(stack: Any, jobs: int) -> dict[str, Any]:
    from rq import Queue
    from rq.job import Job

    from stack.lanes.allowlist import JOB_SERIALIZER, NOOP_JOB

    queue = Queue("merit", connection=stack.valkey("queue"), serializer=JOB_SERIALIZER)
    done = []
    for n in range(jobs):
        job = queue.enqueue(NOOP_JOB, f"q{n}", job_id=f"bench-{time.time_ns()}")  # allow-listed, does nothing
        while job.get_status(refresh=True) not in ("finished", "failed"):
            time.sleep(0.005)
        done.append(Job.fetch(job.id, connection=queue.connection, serializer=JOB_SERIALIZER))
    return _rq_split(done)


def _finished_attempt(stack: Any, n: int) -> str:
    from stack.ledger import attempts
    from stack.ledger.revisions import RevisionPolicy, revision_row, submit_revision

    student = f"bench-{os.getpid()}-{n}"
    attempts.ensure_student(stack.engine, student)
    attempt, _ = attempts.start_attempt(stack.engine, student, "NOVA-101", None)
    for q in range(3):
        submit_revision(stack.engine, RevisionPolicy(), revision_row(attempt.id, f"q{q + 1}", 1, "A", f"k{q}", "bench"))
    attempts.finish_attempt(stack.engine, attempt.id, "bench")
    return attempt.id


def _rows(stack: Any, attempt_id: str) -> list[dict[str, Any]]:
    from stack.ledger import outbox

    with stack.engine.connect() as conn:
        return outbox.rows_for_attempt(conn, attempt_id)


def measure_lane_jobs(stack: Any, count: int) -> dict[str, Any]:
    from rq.job import Job

    from stack.lanes.allowlist import JOB_SERIALIZER

    connection = stack.valkey("queue")
    by_kind: dict[str, list[Any]] = {kind: [] for kind in LANE_OF_KIND}
    finish_to_done: list[float] = []
    for n in range(count):
        started = time.monotonic()
        attempt_id = _finished_attempt(stack, n)
        rows = _rows(stack, attempt_id)
        while not all(row["status"] == "done" for row in rows):
            if time.monotonic() - started > 120:
                raise RuntimeError(f"attempt {attempt_id} not done after 120 s: {rows}")
            time.sleep(0.02)
            rows = _rows(stack, attempt_id)
        finish_to_done.append(time.monotonic() - started)
        for row in rows:  # the row is done inside the function; RQ writes ended_at after it returns
            job = Job.fetch(row["job_id"], connection=connection, serializer=JOB_SERIALIZER)
            while job.ended_at is None and time.monotonic() - started < 120:
                time.sleep(0.01)
                job = Job.fetch(row["job_id"], connection=connection, serializer=JOB_SERIALIZER)
            by_kind[row["kind"]].append(job)
    return {"finish_to_all_done": _summary(finish_to_done), **{k: _rq_split(v) for k, v in by_kind.items()}}


def measure_phases(stack: Any, count: int) -> dict[str, Any]:
    for name in [n for n in stack.supervisor.names() if n.startswith("worker_")]:  # nobody races the helper
        stack.supervisor.set_autorestart(name, False)
        stack.supervisor.kill(name, signal.SIGKILL)
    ids = [_finished_attempt(stack, 1000 + n) for n in range(count)]
    figures: dict[str, Any] = {}
    for kind, lane in ((k, LANE_OF_KIND[k]) for k in KIND_FUNCTION):  # merit cards first; one helper per lane
        helper = subprocess.run([sys.executable, __file__, "--phase-helper", lane], text=True, capture_output=True,
                                input=json.dumps([(kind, f"{kind}-{a}") for a in ids]),
                                env=stack._env("bench_phases"), check=True)
        figures[kind] = json.loads(helper.stdout.strip().splitlines()[-1])
    return figures


# ------------------------------------------------------------ worker models side by side (#23 item 4)
def _worker_cpu(pid: int) -> float:
    """CPU seconds of the worker and of every horse it reaped (loadtests/proc_cpu.py)."""
    from proc_cpu import read_table  # beside this file: sys.path[0] when run as a script

    return read_table().cpu({pid})


def _start_worker(stack: Any, lane: str, model: str, folder: Any) -> subprocess.Popen:
    """A worker of ``lane`` under the ``model`` (as the supervised one, but ours: the phases section
    stopped those), returned once it is ready and has had time to block on its first dequeue."""
    name = f"worker_{lane}_1"
    ready = folder / f"{name}-{model}.ready"
    env = {**stack._env(name), "PROCTOR_WORKER_MODEL": f"{lane}:{model}", "PROCTOR_READY_FILE": str(ready)}
    worker = subprocess.Popen([sys.executable, "-m", "stack.lanes.worker", lane, "--name", name], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 60
    while not (ready.exists() and ready.read_text().strip() == str(worker.pid)):
        if worker.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the {model} worker of {lane} never became ready (exit {worker.returncode})")
        time.sleep(0.02)
    time.sleep(0.5)  # past RQ's bootstrap (registration, pubsub): that is start-up, not per-job cost
    return worker


def _stop_worker(worker: subprocess.Popen) -> None:
    worker.terminate()  # warm shutdown; idle, so it ends at once
    try:
        worker.wait(15)
    except subprocess.TimeoutExpired:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()


def _cpu_per_job(workers: dict[str, subprocess.Popen], count: int, run_jobs: Callable[[], None]) -> dict[str, float]:
    """CPU ms per job of each worker: its CPU (reaped horses included) across ``run_jobs``, over ``count``."""
    before = {lane: _worker_cpu(w.pid) for lane, w in workers.items()}
    started = time.monotonic()
    run_jobs()
    time.sleep(0.3)  # a forking worker reaps its last horse right after the job's end
    wall = time.monotonic() - started
    return {**{f"{lane}_cpu_ms_per_job": round((_worker_cpu(w.pid) - before[lane]) * 1000 / count, 2)
               for lane, w in workers.items()}, "wall_seconds": round(wall, 2)}


def _noop_jobs(stack: Any, count: int) -> None:
    from rq import Queue

    from stack.lanes.allowlist import JOB_SERIALIZER, NOOP_JOB

    queue = Queue("merit", connection=stack.valkey("queue"), serializer=JOB_SERIALIZER)
    jobs = [queue.enqueue(NOOP_JOB, f"q{n}", job_id=f"bench-noop-{time.time_ns()}") for n in range(count)]
    deadline = time.monotonic() + 120
    while any(job.get_status(refresh=True) not in ("finished", "failed") for job in jobs[-1:]):
        if time.monotonic() > deadline:
            raise RuntimeError("noop jobs not done after 120 s")
        time.sleep(0.02)


def _attempt_jobs(stack: Any, count: int, first: int) -> None:
    """``count`` finished attempts; returns once each one's merit and SMS rows are done (no AI worker runs)."""
    ids = [_finished_attempt(stack, first + n) for n in range(count)]
    deadline = time.monotonic() + 300
    for attempt_id in ids:
        while not all(row["status"] == "done" for row in _rows(stack, attempt_id) if row["kind"] != "narrative"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"attempt {attempt_id}: merit/SMS rows not done after 300 s")
            time.sleep(0.02)


def first_student(round_no: int, model: str) -> int:
    """Student numbers of a round's attempts, unique per round and model."""
    return 10_000 * (round_no + 1) + 5_000 * WORKER_MODELS_ORDER.index(model)


WORKER_MODELS_ORDER = ("fork", "simple")


def measure_models(stack: Any, count: int, rounds: int) -> dict[str, Any]:
    """Per model and round: a trivial job on the merit lane, then real merit and SMS jobs (``count`` each),
    each worker's CPU per job. The models alternate within every round, so a ranking that grows with
    the attempts (each merit card lists the exam's attempts) and the machine's load are shared alike."""
    import tempfile
    from pathlib import Path

    per_model: dict[str, list[dict[str, float]]] = {model: [] for model in WORKER_MODELS_ORDER}
    with tempfile.TemporaryDirectory(prefix="bench-models-") as tmp:
        for n in range(rounds):
            for model in WORKER_MODELS_ORDER:
                workers = {lane: _start_worker(stack, lane, model, Path(tmp)) for lane in ("merit", "sms")}
                try:
                    noop = _cpu_per_job({"merit": workers["merit"]}, count, lambda: _noop_jobs(stack, count))
                    real = _cpu_per_job(workers, count, lambda: _attempt_jobs(stack, count, first_student(n, model)))
                finally:
                    for worker in workers.values():
                        _stop_worker(worker)
                per_model[model].append({"noop_cpu_ms_per_job": noop["merit_cpu_ms_per_job"], **real})
    keys = sorted({key for runs in per_model.values() for run in runs for key in run})
    return {"jobs_per_kind": count, "rounds": per_model,
            "median": {model: {key: round(statistics.median(run[key] for run in runs), 2) for key in keys}
                       for model, runs in per_model.items()}}


def print_models(models: dict[str, Any]) -> None:
    """The side-by-side table: CPU ms per job per model (medians of the rounds)."""
    medians = models["median"]
    keys = sorted(next(iter(medians.values())))
    print(f"worker models, CPU ms per job (median of {len(next(iter(models['rounds'].values())))} rounds, "
          f"{models['jobs_per_kind']} jobs per kind each):")
    print(f"{'':32}" + "".join(f"{model:>10}" for model in medians))
    for key in keys:
        print(f"{key:32}" + "".join(f"{medians[model][key]:>10}" for model in medians))


# ------------------------------------------------------------ the phase helper (a stand-in worker parent)
def _timed(sink: dict[str, float], name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            sink[name] = sink.get(name, 0.0) + time.perf_counter() - t0
    return wrapper


def _run_in_child(jobs: Any, kind: str, op: str, forked_at: float, out: int) -> None:
    from sqlalchemy import Engine, event

    os.setpgrp()  # as RQ's horse does
    timings: dict[str, float] = {"fork": time.perf_counter() - forked_at, "statements": 0, "transactions": 0}
    event.listen(Engine, "before_cursor_execute", lambda *a: timings.__setitem__("statements", timings["statements"] + 1))
    event.listen(Engine, "begin", lambda *a: timings.__setitem__("transactions", timings["transactions"] + 1))
    for name in PHASES:
        if hasattr(jobs, name):
            setattr(jobs, name, _timed(timings, name, getattr(jobs, name)))
    t0 = time.perf_counter()
    getattr(jobs, KIND_FUNCTION[kind])(op)
    timings["function"] = time.perf_counter() - t0
    os.write(out, json.dumps(timings).encode())
    os._exit(0)


def phase_helper(lane: str) -> int:
    order = json.loads(sys.stdin.read())
    t0 = time.perf_counter()
    import stack.lanes.worker as worker  # what a worker parent imports
    imported = time.perf_counter() - t0
    from stack.config import load_settings
    from stack.lanes import jobs

    worker.warm_tls(load_settings())  # what a worker parent does before its first fork
    if hasattr(worker, "prepare_worker"):  # older releases prepared nothing more
        worker.prepare_worker(lane)
    prepared = time.perf_counter() - t0 - imported
    per_kind: dict[str, list[dict[str, float]]] = {}
    for kind, op in order:
        read, write = os.pipe()
        forked_at = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            _run_in_child(jobs, kind, op, forked_at, write)
        os.close(write)
        data = b"".join(iter(lambda: os.read(read, 65536), b""))
        os.close(read)
        _, status = os.waitpid(pid, 0)
        if status != 0 or not data:
            raise RuntimeError(f"phase child for {op} failed (status {status})")
        per_kind.setdefault(kind, []).append({**json.loads(data), "wall": time.perf_counter() - forked_at})
    runs = [run for kind_runs in per_kind.values() for run in kind_runs]
    median = {key: round(statistics.median(t.get(key, 0.0) for t in runs), 4) for key in sorted({k for t in runs for k in t})}
    print(json.dumps({"import_worker_seconds": round(imported, 3), "prepare_seconds": round(prepared, 4),
                      "median": median}))
    return 0


def main() -> int:
    if sys.argv[1:2] == ["--phase-helper"]:
        return phase_helper(sys.argv[2])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--attempts", type=int, default=8, help="finished attempts for the lane and phase figures")
    parser.add_argument("--hog", action="store_true", help="keep one core busy with a CPU hog")
    parser.add_argument("--model-jobs", type=int, default=60, help="jobs per kind and round in the worker-model comparison")
    parser.add_argument("--model-rounds", type=int, default=2, help="rounds of the worker-model comparison (0: skip it)")
    parser.add_argument("--only-models", action="store_true", help="only the worker-model comparison")
    args = parser.parse_args()
    from stack.embedded import EmbeddedStack, StackSpec

    hog = subprocess.Popen([sys.executable, "-c", "while 1: pass"]) if args.hog else None
    try:
        spec = StackSpec(name="bench-lanes", web=1, merit_workers=1, ai_workers=1, sms_workers=1)
        with EmbeddedStack(spec) as stack:
            figures: dict[str, Any] = {"hog": args.hog}
            if not args.only_models:
                figures.update(restart=_loaded(lambda: measure_restarts(stack, args.kills)),
                               trivial_job=_loaded(lambda: measure_jobs(stack, args.jobs)),
                               lane_jobs=_loaded(lambda: measure_lane_jobs(stack, args.attempts)))
            figures["phases"] = _loaded(lambda: measure_phases(stack, args.attempts))  # also stops the workers
            if args.model_rounds:
                figures["models"] = _loaded(lambda: measure_models(stack, args.model_jobs, args.model_rounds))
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
    results = bench_dir()
    results.mkdir(parents=True, exist_ok=True)
    out = results / f"lanes{'-hog' if args.hog else ''}.json"
    out.write_text(json.dumps(figures, indent=2))
    print(json.dumps(figures, indent=2))
    if "models" in figures:
        print_models(figures["models"])
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
