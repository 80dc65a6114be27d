"""Relay and reconciler against a real plaintext valkey-server and real RQ workers.

The worker-loss case runs ``python -m stack.lanes.worker`` as a subprocess and
SIGKILLs both the worker and its horse (which RQ puts in its own process group),
the way a container kill would.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import pytest
from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from rq import Queue
from rq.job import Job
from rq.registry import StartedJobRegistry
from sqlalchemy import select

from netsupport import REPO, free_port
from stack.components import WORKER_STATE_PREFIX
from stack.config import CASE_MERIT_COMPUTE_SECONDS, WORKER_MODELS, Settings
from stack.deploy.egress import ATTACHMENT_NAME, SMS_RESERVED_ADDRESS, Attachment, write_attachment
from stack.lanes.allowlist import JOB_SERIALIZER, NOOP_JOB
from stack.valkey_client import valkey_client
from stack.ledger.answer_keys import exam_key
from stack.lanes.worker import build_worker, liveness_key
from stack.ledger import outbox, outcomes
from stack.ledger.engine import init_ledger, make_engine
from stack.ledger.schema import answers, attempts, audit_log, students
import stack.relay as stack_relay
from stack.lanes.enqueue import enqueue_operations
from stack.relay import Relay

OPS = ("merit-a1", "narrative-a1", "sms-a1")



@contextmanager
def valkey_server(workdir: Path) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """A throw-away valkey-server (port, process), stopped on the way out if still running."""
    port = free_port()
    server = subprocess.Popen(
        ["valkey-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(workdir)],
        stdout=subprocess.DEVNULL,
    )
    client = Redis(host="127.0.0.1", port=port)
    try:
        wait_for(lambda: ping(client), "valkey-server did not start")
        yield port, server
    finally:
        client.close()
        if server.poll() is None:
            os.kill(server.pid, signal.SIGTERM)
        server.wait(timeout=10)


@pytest.fixture(scope="module")
def valkey_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    with valkey_server(tmp_path_factory.mktemp("valkey")) as (port, _server):
        yield port


def ping(client: Redis) -> bool:
    try:
        return bool(client.ping())
    except Exception:  # noqa: BLE001 - any failure means not there
        return False


def wait_for(condition: Callable[[], bool], message: str, timeout: float = 60.0,
             process: subprocess.Popen[bytes] | None = None) -> None:
    """Until ``condition`` holds. ``timeout`` guards against a hang, it is not what the test judges:
    15 s was missed by a worker's start with the compose pass and two test workers on 2 cores.
    A ``process`` that exits first fails the wait at once, with its exit status."""
    deadline = time.monotonic() + timeout
    while not condition():
        if process is not None and process.poll() is not None:
            raise AssertionError(f"{message}: the process exited with status {process.returncode}")
        assert time.monotonic() < deadline, message
        time.sleep(0.05)


@pytest.fixture
def valkey(valkey_port: int) -> Iterator[Redis]:
    client = Redis(host="127.0.0.1", port=valkey_port)
    client.flushall()
    yield client
    client.close()


@pytest.fixture
def settings(tmp_path: Path, valkey_port: int) -> Settings:
    current = Settings(
        run_dir=tmp_path,
        valkey_url=f"redis://127.0.0.1:{valkey_port}/0",
        time_scale=0.001,
        ai_url=f"http://127.0.0.1:{free_port()}",  # nothing listens: AI jobs fail
        sms_url=f"http://127.0.0.1:{free_port()}",  # nor here: SMS jobs fail
        relay_interval=0.1,
        liveness_ttl=1.0,
        exams={"NOVA-101": 2},
    )
    engine = make_engine(current)
    init_ledger(engine, current)
    seed_attempt(current, "a1")
    return current


def seed_attempt(settings: Settings, attempt_id: str) -> None:
    now = time.time()
    with make_engine(settings).begin() as conn:
        conn.execute(students.insert().prefix_with("OR IGNORE").values(id="s1", created_at=now))
        conn.execute(
            attempts.insert().values(
                id=attempt_id, student_id="s1", exam_code="NOVA-101", status="finished", started_at=now, finished_at=now
            )
        )
        conn.execute(
            answers.insert().values(
                receipt_id=f"r-{attempt_id}", attempt_id=attempt_id, question="q1", content=exam_key(conn, "NOVA-101")["q1"],
                idempotency_key="k1", body_sha256="0" * 64, node="web_1", created_at=now,
            )
        )
        outbox.create_rows(conn, attempt_id, now)


def card_ready(settings: Settings, attempt_id: str = "a1") -> None:
    """What a merit job commits: the ready card and its row done, in one transaction."""
    with make_engine(settings).begin() as conn:
        outcomes.write_ready(conn, f"merit-{attempt_id}", attempt_id, "merit", {"score": 1, "position": 1})
        outbox.mark_done(conn, f"merit-{attempt_id}")


def relay(settings: Settings, valkey: Redis) -> Relay:
    return Relay(settings, make_engine(settings), valkey)


def row(settings: Settings, op: str) -> dict:
    with make_engine(settings).begin() as conn:
        found = outbox.get_row(conn, op)
    assert found is not None
    return found


def start_worker(settings: Settings, lane: str, *args: str) -> subprocess.Popen[bytes]:
    """The worker logs to <run_dir>/worker_<lane>.log (read it when a test fails)."""
    env = {**os.environ, **settings.to_env(), "PYTHONPATH": str(REPO), "PROCTOR_COMPONENT": f"worker_{lane}_1"}
    with open(settings.run_dir / f"worker_{lane}.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "stack.lanes.worker", lane, *args], env=env, cwd=REPO, stdout=log, stderr=log
        )


def worker_log(settings: Settings, lane: str) -> str:
    return (settings.run_dir / f"worker_{lane}.log").read_text()


def sigterm_exit_status(worker: subprocess.Popen[bytes], settings: Settings, lane: str) -> int:
    """SIGTERM, then the exit status; a worker that ignores it is killed (no orphan) and fails the test."""
    worker.send_signal(signal.SIGTERM)
    return exit_status(worker, 15, lambda: f"the {lane} worker ignored SIGTERM:\n{worker_log(settings, lane)}")


def exit_status(process: subprocess.Popen[bytes], timeout: float, describe: Callable[[], str]) -> int:
    """The exit status within ``timeout`` (a hang guard); past it the process is killed, no orphan."""
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise AssertionError(describe()) from None


def job_field(valkey: Redis, jid: str, name: str) -> str | None:
    value = valkey.hget(Job.key_for(jid), name)
    return None if value is None else value.decode()


def test_pending_rows_are_enqueued_once_with_fresh_job_ids(settings: Settings, valkey: Redis) -> None:
    first = relay(settings, valkey).run_once()
    waiting = relay(settings, valkey).run_once()
    assert first.enqueued == ["merit-a1"] and waiting.enqueued == []  # merit first: the others read its card
    assert [row(settings, op)["status"] for op in OPS[1:]] == ["pending", "pending"]
    card_ready(settings)
    third = relay(settings, valkey).run_once()
    fourth = relay(settings, valkey).run_once()
    assert sorted(third.enqueued) == sorted(OPS[1:]) and fourth.enqueued == fourth.reenqueued == []
    for op, lane in zip(OPS[1:], ("ai", "sms")):
        current = row(settings, op)
        assert (current["status"], current["attempts"], current["job_id"]) == ("enqueued", 1, f"{op}-1")
        assert Queue(lane, connection=valkey).job_ids == [f"{op}-1"]
        assert valkey.ttl(Job.key_for(f"{op}-1")) == -1  # no ttl: a job hash never silently expires
    assert Queue("merit", connection=valkey).job_ids == ["merit-a1-1"]


def test_worker_entry_point_runs_a_merit_job_to_done(settings: Settings, valkey: Redis) -> None:
    relay(settings, valkey).run_once()
    worker = start_worker(settings, "merit", "--burst")
    assert worker.wait(timeout=30) == 0, worker_log(settings, "merit")
    assert row(settings, "merit-a1")["status"] == "done"
    assert job_field(valkey, "merit-a1-1", "worker_name").startswith("worker_merit_1.")  # type: ignore[union-attr]
    with make_engine(settings).begin() as conn:
        assert [o["payload"]["score"] for o in outcomes.find(conn, "merit-a1")] == [1]


@pytest.mark.parametrize("reconciler", [True, False])
def test_flushed_valkey_is_reenqueued_only_by_the_reconciler(settings: Settings, valkey: Redis, reconciler: bool) -> None:
    current = settings.with_overrides(reconciler_enabled=reconciler)
    relay(current, valkey).run_once()
    valkey.flushall()
    report = relay(current, valkey).run_once()
    merit = row(current, "merit-a1")
    assert [row(current, op)["status"] for op in OPS[1:]] == ["pending", "pending"]  # still waiting for the card
    if reconciler:
        assert report.reenqueued == ["merit-a1"]
        assert (merit["attempts"], merit["job_id"]) == (2, "merit-a1-2")
        assert "vanished" in merit["last_error"]
        assert Queue("merit", connection=valkey).job_ids == ["merit-a1-2"]
    else:
        assert report.reenqueued == [] and (merit["attempts"], merit["job_id"]) == (1, "merit-a1-1")
        assert Queue("merit", connection=valkey).job_ids == []  # lost: the negative control


def test_failed_job_is_reenqueued(settings: Settings, valkey: Redis) -> None:
    card_ready(settings)
    relay(settings, valkey).run_once()
    # The SMS gateway is down: the job fails. (The AI lane would defer it instead: docs/ai-lane.md.)
    worker = start_worker(settings, "sms", "--burst")
    worker.wait(timeout=30)
    assert job_field(valkey, "sms-a1-1", "status") == "failed"
    report = relay(settings, valkey).run_once()
    assert report.reenqueued == ["sms-a1"]
    assert row(settings, "sms-a1")["job_id"] == "sms-a1-2"


def kill_tree(pid: int) -> None:
    """SIGKILL a worker and its horse; the horse has its own process group, so kill it by pid too."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    os.kill(pid, signal.SIGKILL)
    for child in children:
        os.kill(int(child), signal.SIGKILL)


def test_started_job_of_a_killed_worker(settings: Settings, valkey: Redis) -> None:
    slow = settings.with_overrides(time_scale=20.0)  # merit burns 6.8 s of CPU: time to kill it mid-job
    relay(slow, valkey).run_once()
    worker = start_worker(slow, "merit")
    try:
        wait_for(lambda: job_field(valkey, "merit-a1-1", "status") == "started", "the merit job never started")
        name = job_field(valkey, "merit-a1-1", "worker_name")
        assert name and valkey.exists(liveness_key(name))
    finally:
        kill_tree(worker.pid)
        worker.wait()
    wait_for(lambda: not valkey.exists(liveness_key(name)), "the liveness key outlived its worker", timeout=5)

    off = relay(slow.with_overrides(reconciler_enabled=False), valkey).run_once()
    assert off.reenqueued == [] and row(slow, "merit-a1")["job_id"] == "merit-a1-1"
    assert job_field(valkey, "merit-a1-1", "status") == "started"  # stuck: RQ alone waits ~90 s + 600 s

    on = relay(slow, valkey).run_once()
    assert on.reenqueued == ["merit-a1"]
    assert (row(slow, "merit-a1")["attempts"], Queue("merit", connection=valkey).job_ids) == (2, ["merit-a1-2"])
    assert not valkey.exists(Job.key_for("merit-a1-1"))
    assert valkey.zcard(StartedJobRegistry("merit", connection=valkey).key) == 0


@pytest.mark.parametrize("model", WORKER_MODELS)
def test_a_job_timeout_ends_a_runaway_job_and_the_worker_takes_the_next(settings: Settings, valkey: Redis,
                                                                        model: str) -> None:
    """RQ's job timeout ends a job that runs past it, whether it runs in a horse (fork) or in the
    worker itself (simple: SIGALRM in its main thread), and the same worker then serves the lane."""
    slow = settings.with_overrides(time_scale=20.0, worker_models={**settings.worker_models, "merit": model})
    burn = slow.scaled(CASE_MERIT_COMPUTE_SECONDS)  # 6.8 s of CPU: the runaway
    relay(slow, valkey).run_once()
    valkey.hset(Job.key_for("merit-a1-1"), "timeout", 1)  # as if enqueued with job_timeout=1
    worker = start_worker(slow, "merit")
    state = f"{WORKER_STATE_PREFIX}worker_merit_1"  # what the harness reads to see a job in flight
    try:
        wait_for(lambda: valkey.get(state) == b"busy", "the worker never said busy while the runaway ran",
                 process=worker)
        wait_for(lambda: job_field(valkey, "merit-a1-1", "status") == "failed", "the runaway job was never ended",
                 timeout=burn + 30)  # a hang guard; the verdict is below
        job = Job.fetch("merit-a1-1", connection=valkey, serializer=JOB_SERIALIZER)
        assert "JobTimeoutException" in (job.latest_result().exc_string or ""), job.latest_result().exc_string
        ran = (job.ended_at - job.started_at).total_seconds()
        print(f"{model}: the runaway ran {ran:.2f} s of its {burn:.1f} s burn (timeout 1 s)")
        assert ran < burn  # cut short: the burn alone lasts ``burn`` seconds
        queue = Queue("merit", connection=valkey, serializer=JOB_SERIALIZER)
        follow = queue.enqueue(NOOP_JOB, "after", job_id="noop-after-runaway")
        wait_for(lambda: follow.get_status(refresh=True) == "finished", "the worker took no job after the timeout")
        assert worker.poll() is None and job_field(valkey, follow.id, "worker_name") == job.worker_name  # the same, alive
        wait_for(lambda: valkey.get(state) == b"idle", "the worker never said idle again")
    finally:
        status = sigterm_exit_status(worker, slow, "merit")
    assert status == 0, worker_log(slow, "merit")


def test_max_attempts_fail_the_row_for_review(settings: Settings, valkey: Redis) -> None:
    current = settings.with_overrides(max_job_attempts=2)
    relay(current, valkey).run_once()
    for _ in range(2):
        valkey.flushall()
        report = relay(current, valkey).run_once()
    assert report.failed == ["merit-a1"]
    merit = row(current, "merit-a1")
    assert (merit["status"], merit["attempts"]) == ("failed", 2)
    # The next pass fails the rows that waited for the card: never left pending, never run without it.
    assert sorted(relay(current, valkey).run_once().failed) == sorted(OPS[1:])
    with make_engine(current).begin() as conn:
        found = {op: outcomes.find(conn, op) for op in OPS}
        audits = conn.execute(select(audit_log.c.action)).scalars().all()
    assert [(o["status"], o["payload"]["attempts"]) for o in found["merit-a1"]] == [("failed_for_review", 2)]
    assert [(o["status"], o["payload"]["reason"]) for o in found["sms-a1"]] == [
        ("failed_for_review", "merit-a1 failed for review; no card to report")]
    assert [(row(current, op)["status"], row(current, op)["attempts"]) for op in OPS[1:]] == [("failed", 0)] * 2
    assert audits.count("failed_for_review") == 3
    assert relay(current, valkey).run_once().failed == []  # failed rows stay failed, reviewable


def test_deferrals_do_not_use_up_the_attempts_of_a_later_crash(settings: Settings, valkey: Redis) -> None:
    """A row that waited (limiter, backoff) three times, then lost its job once, is replaced:
    only lost runs count against max_job_attempts (part 1 counted every enqueue and gave up)."""
    current = settings.with_overrides(max_job_attempts=2)
    for _ in range(3):
        relay(current, valkey).run_once()
        job = row(current, "merit-a1")["job_id"]
        with make_engine(current).begin() as conn:
            assert outbox.defer(conn, "merit-a1", job, time.time(), "limiter: window")
    relay(current, valkey).run_once()
    assert (row(current, "merit-a1")["attempts"], row(current, "merit-a1")["deferrals"]) == (4, 3)
    valkey.flushall()  # the fourth job is lost: one lost run, under the limit of 2
    report = relay(current, valkey).run_once()
    assert (report.reenqueued, report.failed) == (["merit-a1"], [])
    assert row(current, "merit-a1")["status"] == "enqueued"
    valkey.flushall()  # a second lost run reaches the limit: given up, for review
    assert relay(current, valkey).run_once().failed == ["merit-a1"]


HandBack = Callable[[Settings, str, str], bool]


def defer_now(settings: Settings, op: str, job: str) -> bool:
    with make_engine(settings).begin() as conn:
        return outbox.defer(conn, op, job, time.time(), "limiter: window")


def give_up_now(settings: Settings, op: str, job: str) -> bool:
    with make_engine(settings).begin() as conn:
        return outbox.mark_failed(conn, op, job, "permanent: provider answered 400")


HAND_BACKS = {"deferred": (defer_now, "pending"), "failed": (give_up_now, "failed")}


@pytest.mark.parametrize("hand_back", sorted(HAND_BACKS))
def test_a_job_that_hands_its_row_back_before_the_relay_marks_it_is_never_undone(
        settings: Settings, valkey: Redis, hand_back: str) -> None:
    """The relay marks a row only after Valkey accepted the job, so a fast worker can run the
    job and hand the row back first. That hand-back must stick: rehearsal run 23 had it match
    nothing, the late mark set the row ``enqueued`` on a finished job, and the narrative was
    stuck for good (the reconciler treats a finished job as healthy)."""
    act, status = HAND_BACKS[hand_back]
    card_ready(settings)
    first = relay(settings, valkey)

    def worker_runs_first(current: Relay, items: list[tuple[str, str, int]]) -> list[str]:
        enqueue_operations(current.redis, current.settings, items)
        for _, op, number in items:
            assert act(settings, op, f"{op}-{number}"), f"{op}: the hand-back matched nothing"
        return current.mark(items)

    first.send_and_mark = worker_runs_first
    assert first.run_once().enqueued == []  # every mark found its row handed back already
    for op in OPS[1:]:
        found = row(settings, op)
        assert (found["status"], found["job_id"], found["attempts"]) == (status, f"{op}-1", 1)
    if status == "pending":
        assert relay(settings, valkey).run_once().enqueued == list(OPS[1:])
        assert {row(settings, op)["job_id"] for op in OPS[1:]} == {f"{op}-2" for op in OPS[1:]}


def test_a_replacement_that_defers_before_the_reconciler_marks_it_stays_deferred(
        settings: Settings, valkey: Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same race on a re-enqueue: job 2 runs and defers before ``mark_reenqueued`` moves the
    row from job 1 to job 2; the row must stay pending on job 2, not go back to ``enqueued``."""
    relay(settings, valkey).run_once()
    valkey.flushall()  # job 1 is lost: the reconciler replaces it with job 2
    send = stack_relay.enqueue_operation

    def worker_runs_first(redis: Redis, current: Settings, kind: str, op: str, number: int) -> str:
        jid = send(redis, current, kind, op, number)
        assert defer_now(settings, op, jid)
        return jid

    monkeypatch.setattr(stack_relay, "enqueue_operation", worker_runs_first)
    assert relay(settings, valkey).run_once().reenqueued == []  # the deferral came first
    found = row(settings, "merit-a1")
    assert (found["status"], found["job_id"], found["attempts"], found["deferrals"]) == ("pending", "merit-a1-2", 2, 1)


def test_a_stale_job_hands_nothing_back(settings: Settings, valkey: Redis) -> None:
    """A job the row has moved on from (a newer enqueue is recorded) still matches nothing."""
    relay(settings, valkey).run_once()
    assert defer_now(settings, "merit-a1", "merit-a1-1")
    relay(settings, valkey).run_once()
    assert row(settings, "merit-a1")["job_id"] == "merit-a1-2"
    assert not defer_now(settings, "merit-a1", "merit-a1-1")
    assert not give_up_now(settings, "merit-a1", "merit-a1-1")
    assert (row(settings, "merit-a1")["status"], row(settings, "merit-a1")["job_id"]) == ("enqueued", "merit-a1-2")


def test_waiting_rows_never_hide_the_merit_rows_they_wait_for(settings: Settings) -> None:
    """A backlog of narrative/SMS rows waiting for cards must not fill the relay's batch."""
    for attempt in ("a2", "a3"):
        seed_attempt(settings, attempt)
    with make_engine(settings).begin() as conn:
        for attempt in ("a1", "a2"):
            outbox.mark_enqueued(conn, f"merit-{attempt}", 1, f"merit-{attempt}-1")
        assert [r["operation_id"] for r in outbox.enqueueable(conn, limit=1)] == ["merit-a3"]
        assert [r["operation_id"] for r in outbox.pending_for_attempt(conn, "a1")] == []


def test_relay_keeps_looping_while_valkey_is_down(settings: Settings, caplog: pytest.LogCaptureFixture) -> None:
    dead = valkey_client(settings.with_overrides(valkey_url=f"redis://127.0.0.1:{free_port()}/0"), "queue")
    stop = threading.Event()
    thread = threading.Thread(target=Relay(settings, make_engine(settings), dead).run_forever, args=(stop,))
    def failed_passes() -> int:
        return sum("relay pass failed" in r.message for r in caplog.records)

    with caplog.at_level(logging.ERROR, logger="proctor.relay"):
        thread.start()
        try:  # a second failed pass proves the loop went on after the first (a fixed 0.8 s saw one on a loaded machine)
            wait_for(lambda: failed_passes() >= 2, "the relay stopped looping after a failed pass")
        finally:
            stop.set()
            thread.join(timeout=10)
    assert not thread.is_alive()
    dead.close()


def test_relay_process_stops_cleanly_on_sigterm(settings: Settings, valkey: Redis) -> None:
    env = {**os.environ, **settings.to_env(), "PYTHONPATH": str(REPO)}
    process = subprocess.Popen([sys.executable, "-m", "stack.relay"], env=env, cwd=REPO, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: row(settings, "merit-a1")["status"] == "enqueued", "the relay never enqueued", process=process)
    except AssertionError:
        process.kill()  # no orphan and no open pipe left for a later test to trip on
        process.communicate()
        raise
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=10)
    assert process.returncode == 0, stderr.decode()
    assert "relay stopped" in stderr.decode()


def test_worker_keeps_a_liveness_key_and_stops_cleanly_on_sigterm(settings: Settings, valkey: Redis) -> None:
    worker = start_worker(settings, "sms")
    pattern = liveness_key(f"worker_sms_1.{worker.pid}.*")  # the name ends in a per-start suffix
    try:
        wait_for(lambda: bool(valkey.keys(pattern)), "no liveness key", process=worker)
        [key] = valkey.keys(pattern)
        assert 0 < valkey.pttl(key) <= 1000
        time.sleep(1.2)  # longer than the TTL: only refreshing keeps it
        assert valkey.exists(key)
    finally:
        status = sigterm_exit_status(worker, settings, "sms")
    assert status == 0, worker_log(settings, "sms")
    assert not valkey.exists(key)


@pytest.mark.parametrize("lane", ["sms", "merit"])
def test_a_sigterm_as_soon_as_the_worker_is_ready_is_a_clean_stop(settings: Settings, valkey: Redis, lane: str) -> None:
    # What a supervisor does when it stops a worker it has just restarted: the signal lands
    # between the ready file and RQ's own handlers (it was lost there, and the worker ran on).
    ready = settings.run_dir / f"{lane}.ready"
    worker = start_worker(settings.with_overrides(ready_file=str(ready)), lane)
    try:
        wait_for(ready.exists, "the worker never wrote its ready file", process=worker)
    finally:
        status = sigterm_exit_status(worker, settings, lane)
    assert status == 0, worker_log(settings, lane)
    assert valkey.keys(liveness_key("*")) == []


def test_a_stop_asked_for_before_rq_took_the_signals_ends_the_work_before_any_job(settings: Settings, valkey: Redis) -> None:
    relay(settings, valkey).run_once()
    worker = build_worker(settings, "merit", "worker_merit_1")
    worker.early_stop = threading.Event()
    worker.early_stop.set()  # what main's handler does with a SIGTERM during start-up
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        worker.work(burst=True)  # burst: without the stop it takes the job, runs it and returns
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    assert worker.stop_signalled
    assert Queue("merit", connection=valkey).job_ids == ["merit-a1-1"]


def test_worker_exits_non_zero_without_valkey(settings: Settings) -> None:
    worker = start_worker(settings.with_overrides(valkey_url=f"redis://127.0.0.1:{free_port()}/0"), "merit")
    assert exit_status(worker, 30, lambda: "a worker without Valkey ran on") == 1


def test_a_standby_that_loses_valkey_exits_non_zero(settings: Settings, tmp_path: Path) -> None:
    # A standby SMS worker whose Valkey goes silent stops itself (lost(): SIGTERM to itself);
    # exit 0 would tell the supervisor the stop was requested, and it would not restart it.
    attachment = tmp_path / ATTACHMENT_NAME
    write_attachment(attachment, Attachment("worker_sms_2", "worker_sms_2", SMS_RESERVED_ADDRESS, time.time()))
    ready = tmp_path / "standby.ready"
    with valkey_server(tmp_path) as (port, server):
        standby = settings.with_overrides(
            valkey_url=f"redis://127.0.0.1:{port}/0", egress_attachment=str(attachment), ready_file=str(ready)
        )
        worker = start_worker(standby, "sms")  # PROCTOR_COMPONENT worker_sms_1: not the lane holder
        try:
            wait_for(lambda: "standby on" in worker_log(settings, "sms"), "the worker never stood by", process=worker)
        finally:
            server.kill()  # Valkey gone: the liveness beat gives up after one TTL (1 s here)
            status = exit_status(worker, 30, lambda: f"a standby without Valkey ran on:\n{worker_log(settings, 'sms')}")
    assert "Valkey unreachable" in worker_log(settings, "sms")
    assert status == 1


def take_like_a_worker_that_dies(valkey: Redis, lane: str) -> str:
    """What a single-queue worker's BLMOVE does, with no horse ever marking the job started."""
    queue = Queue(lane, connection=valkey)
    jid = valkey.lmove(queue.key, f"{queue.key}:intermediate", "RIGHT", "LEFT").decode()
    assert job_field(valkey, jid, "status") == "queued"
    return jid


@pytest.mark.parametrize("reconciler", [True, False])
def test_job_held_between_dequeue_and_start_is_reenqueued_after_grace(
    settings: Settings, valkey: Redis, reconciler: bool
) -> None:
    current = settings.with_overrides(reconciler_enabled=reconciler)
    watcher = relay(current, valkey)
    watcher.run_once()
    jid = take_like_a_worker_that_dies(valkey, "merit")
    assert watcher.run_once().reenqueued == []  # within the grace: a live worker may be about to start it
    time.sleep(current.liveness_ttl + 0.1)
    report = watcher.run_once()
    merit = row(current, "merit-a1")
    if reconciler:
        assert report.reenqueued == ["merit-a1"]
        assert (merit["attempts"], merit["job_id"]) == (2, "merit-a1-2")
        assert "between dequeue and start" in merit["last_error"]
        assert valkey.lrange("rq:queue:merit:intermediate", 0, -1) == []
        assert Queue("merit", connection=valkey).job_ids == ["merit-a1-2"]
    else:
        assert report.reenqueued == [] and merit["job_id"] == jid  # lost: the negative control
        assert valkey.lrange("rq:queue:merit:intermediate", 0, -1) == [jid.encode()]


def test_a_pass_that_fails_while_replacing_a_held_job_loses_nothing(
    settings: Settings, valkey: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Valkey drops the relay's connection mid-replacement (seen under tls_churn, seed 20261011).

    The old order released the held job from the intermediate list, then failed deleting it:
    the job was left ``queued`` in no list at all, which no later pass could see (stuck for
    good). The replacement is enqueued and recorded first, the old job cleaned up after.
    """
    watcher = relay(settings, valkey)
    watcher.run_once()
    take_like_a_worker_that_dies(valkey, "merit")
    watcher.run_once()
    time.sleep(settings.liveness_ttl + 0.1)
    calls = {"n": 0}
    real_delete = Job.delete

    def delete_once_failing(job: Job, *args: object, **kwargs: object) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RedisConnectionError("Connection closed by server.")  # as redis-py reports it
        real_delete(job, *args, **kwargs)

    monkeypatch.setattr(Job, "delete", delete_once_failing)
    with pytest.raises(RedisConnectionError):
        watcher.run_once()
    watcher.run_once()  # the next pass, with Valkey back
    merit = row(settings, "merit-a1")
    assert (merit["status"], merit["attempts"], merit["job_id"]) == ("enqueued", 2, "merit-a1-2")
    assert Queue("merit", connection=valkey).job_ids == ["merit-a1-2"]
